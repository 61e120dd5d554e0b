"""The remote surface: the HTTP/MCP server, the Python client (RemoteStore) and the JSON vocabulary they share."""
