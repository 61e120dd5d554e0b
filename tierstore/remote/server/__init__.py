"""``tierstore serve``: one store served to many processes — an HTTP JSON API
and an MCP server in one ASGI app (extra ``server``). See docs/server.md.

Modules: :mod:`.app` (the HTTP API and the app), :mod:`.schema` (bodies,
OpenAPI), :mod:`.auth` (tokens, tenants), :mod:`.mcp_tools` (the MCP tools),
:mod:`.run` (process: open, serve, shut down). Nothing here is imported by
``import tierstore``; the optional dependencies are imported when a server is
built, with an install hint if they are missing.
"""
