"""The HTTP API's response bodies, and its OpenAPI document.

The requests are defined once, in :mod:`tierstore.remote.api_schema` (the server
checks bodies against it, the client and the MCP tools use it); the
responses are pydantic models here. Both make the OpenAPI document.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field
from pydantic.json_schema import models_json_schema

from tierstore.remote.api_schema import ROUTES, Bounds, Route, json_schema
from tierstore.remote.wire import PACKED_ROUTES


class VectorB64(BaseModel):
    base64: str = Field(description="little-endian float32 bytes, base64")


# ---------------------------------------------------------------- responses


class MemoryOut(BaseModel):
    id: str
    namespace: str
    content: str
    memory_type: str
    created_at: float = Field(description="POSIX seconds")
    last_accessed_at: float = Field(description="POSIX seconds")
    access_count: int
    confidence: float
    source: str
    tags: list[str]
    ttl_seconds: float | None
    pinned: bool
    tier: Literal["hot", "warm", "cold"]
    weight: float
    expires_at: float | None
    due_at: float | None
    embedding: VectorB64 | None


class ExplainOut(BaseModel):
    mode: str
    raw: dict[str, float]
    normalised: dict[str, float]
    weights: dict[str, float]
    terms: dict[str, float]
    score: float
    tier: str
    reached_because: str | None


class HitOut(BaseModel):
    id: str
    score: float
    memory: MemoryOut
    explain: ExplainOut | None


class IdOut(BaseModel):
    id: str


class IdsOut(BaseModel):
    ids: list[str]


class HitsOut(BaseModel):
    hits: list[HitOut]


class HitListsOut(BaseModel):
    hits: list[list[HitOut]] = Field(description="per query, in the order of the queries")


class MemoryOrNone(BaseModel):
    memory: MemoryOut | None


class MemoriesOut(BaseModel):
    memories: list[MemoryOut]
    next: str | None = Field(description="the cursor of the next page; null after the last")


class MemoryResult(BaseModel):
    memory: MemoryOut


class DeletedOut(BaseModel):
    deleted: bool


class TagsOut(BaseModel):
    tags: list[str]


class Empty(BaseModel):
    pass


class ReportOut(BaseModel):
    report: dict[str, Any] = Field(description="SweepReport.as_dict()")


class StatsOut(BaseModel):
    stats: dict[str, Any] = Field(description="Stats.as_dict()")


class NamespacesOut(BaseModel):
    namespaces: list[str]


class InfoOut(BaseModel):
    api: str
    version: str
    dim: int
    embedder: str | None
    now: float = Field(description="the store's time, POSIX seconds")
    policy: dict[str, Any] | None = Field(description="Policy.to_dict(); null: the served stores keep their own")
    store_id: str | None = Field(description="the store's id (made at its creation); null for a cluster")
    migrator_running: bool = Field(description="whether this server runs background sweeps")
    codecs: list[str] = Field(
        description='the bodies it reads and writes: "json", and "msgpack" (search bodies; any answer)'
    )


class ErrorDetail(BaseModel):
    type: str = Field(description="the class in tierstore.errors")
    message: str


class ErrorOut(BaseModel):
    error: ErrorDetail


_RESPONSES: dict[str, type[BaseModel]] = {
    "/v1/add": IdOut,
    "/v1/add_batch": IdsOut,
    "/v1/upsert_batch": IdsOut,
    "/v1/search": HitsOut,
    "/v1/search_batch": HitListsOut,
    "/v1/get": MemoryOrNone,
    "/v1/get_by_key": MemoryOrNone,
    "/v1/memories": MemoriesOut,
    "/v1/touch": Empty,
    "/v1/feedback": MemoryResult,
    "/v1/pin": Empty,
    "/v1/delete": DeletedOut,
    "/v1/set_context": Empty,
    "/v1/get_context": TagsOut,
    "/v1/restore": IdsOut,
    "/v1/sweep": ReportOut,
}
#: POST routes: path -> (request definition, response model, summary)
POST_ROUTES: dict[str, tuple[Route, type[BaseModel], str]] = {
    path: (route, _RESPONSES[path], route.summary) for path, route in ROUTES.items()
}

#: GET routes: path -> (response model or None for text, summary, authenticated)
GET_ROUTES: dict[str, tuple[type[BaseModel] | None, str, bool]] = {
    "/v1/stats": (
        StatsOut,
        "counts per tier and type, lifecycle metrics (store-wide; ?lifecycle=false skips the lifecycle metrics)",
        True,
    ),
    "/v1/namespaces": (NamespacesOut, "the namespaces this token can reach that hold memories", True),
    "/v1/info": (InfoOut, "dimension, embedder, policy, store id, version, store time, background sweeps", True),
    "/metrics": (None, "Prometheus text exposition (store-wide)", True),
    "/health": (None, "liveness: the process answers", False),
    "/ready": (None, "readiness: the store is open and the server is not shutting down", False),
}


def openapi(version: str, bounds: Any = Bounds) -> dict[str, Any]:
    """The OpenAPI 3.1 document of the HTTP API (request bounds: ``bounds``, the server's limits)."""
    models = {out for _, out, _ in POST_ROUTES.values()}
    models |= {out for out, _, _ in GET_ROUTES.values() if out is not None} | {ErrorOut}
    _, defs = models_json_schema(
        [(m, "serialization") for m in sorted(models, key=lambda m: m.__name__)],
        ref_template="#/components/schemas/{model}",
    )
    schemas = dict(defs.get("$defs", {}))
    ref = lambda name: {"$ref": f"#/components/schemas/{name}"}  # noqa: E731
    errors = {
        str(code): {"description": why, "content": {"application/json": {"schema": ref("ErrorOut")}}}
        for code, why in (
            (400, "bad input; nothing changed"),
            (401, "missing or unknown token"),
            (403, "namespace outside the token's tenant, or a store-wide call"),
            (404, "no such memory"),
            (409, "duplicate id, clock skew"),
            (413, "body too large"),
            (415, "a msgpack body to a route that takes JSON only"),
            (500, "server error (details in its log)"),
            (503, "store closed or shutting down"),
        )
    }
    paths: dict[str, Any] = {}
    for path, (route, out, summary) in POST_ROUTES.items():
        name = "".join(part.capitalize() for part in route.method.split("_")) + "Body"
        schemas[name] = json_schema(path, bounds)
        paths[path] = {
            "post": {
                "summary": summary,
                "description": route.description or f"TierStore.{route.method}.",
                "requestBody": {
                    "required": True,
                    "content": {
                        media: {"schema": ref(name)}
                        for media in ("application/json", "application/msgpack")
                        if media == "application/json" or path in PACKED_ROUTES
                    },
                },
                "responses": {
                    "200": {
                        "description": "ok",
                        "content": {
                            media: {"schema": ref(out.__name__)}
                            for media in ("application/json", "application/msgpack")
                        },
                    },
                    **errors,
                },
                "security": [{"bearer": []}],
            }
        }
    for path, (model, summary, authed) in GET_ROUTES.items():
        content = (
            {"application/json": {"schema": ref(model.__name__)}}
            if model is not None
            else {"text/plain": {"schema": {"type": "string"}}}
        )
        op: dict[str, Any] = {"summary": summary, "responses": {"200": {"description": "ok", "content": content}}}
        if authed:
            op["security"] = [{"bearer": []}]
            op["responses"].update({k: errors[k] for k in ("401", "403")})
        paths[path] = {"get": op}
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "tierstore",
            "version": version,
            "description": "One tierstore store served over HTTP: the calls of TierStore, same names, "
            'same errors. Vectors: JSON arrays or {"base64": little-endian float32}; a '
            "string where a vector goes is text for the server's embedder. Every body is "
            "checked against its schema before any work: exact JSON types, bounded counts "
            "and lengths; a null field is left out (the store's default). Codecs: JSON, or msgpack "
            "(Content-Type: application/msgpack, for the search routes; a vector may then be a bin of "
            "little-endian float32) and Accept: application/msgpack for a msgpack answer (415: a msgpack "
            "body to a route that takes JSON only).",
        },
        "paths": paths,
        "components": {"schemas": schemas, "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
    }
