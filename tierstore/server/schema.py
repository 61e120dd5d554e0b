"""The HTTP API's request and response bodies, and its OpenAPI document.

Each route's body is a pydantic model here. The server uses a model for
two things only: which fields a body may have (an unknown one is refused)
and which it must have; the values go to :class:`TierStore` as they came,
and the store's own checks refuse bad ones with the same error a local call
gets. So a field left out means the store's default, and the defaults are
not repeated here. The same models make the OpenAPI document.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import models_json_schema


class VectorB64(BaseModel):
    base64: str = Field(description="little-endian float32 bytes, base64")


Vector = list[float] | VectorB64
VectorOrText = list[float] | VectorB64 | str  # a str is text, embedded by the server's embedder


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AddBody(Body):
    """``TierStore.add``. Without ``embedding`` (or with a text) the server's embedder embeds the content (the text)."""

    ns: str
    content: str
    embedding: VectorOrText | None = None
    memory_type: str | None = None
    confidence: float | None = None
    source: str | None = None
    tags: list[str] | None = None
    ttl_seconds: float | None = Field(None, description="seconds")
    pinned: bool | None = None
    id: str | None = None
    supersedes: list[str] | None = None
    key: str | None = None
    metadata: dict[str, Any] | None = Field(None, description="JSON, kept and returned exactly")


class AddItem(Body):
    content: str
    embedding: VectorOrText | None = None
    memory_type: str | None = None
    confidence: float | None = None
    source: str | None = None
    tags: list[str] | None = None
    ttl_seconds: float | None = None
    pinned: bool | None = None
    id: str | None = None
    supersedes: list[str] | None = None
    key: str | None = None
    metadata: dict[str, Any] | None = Field(None, description="JSON, kept and returned exactly")


class AddBatchBody(Body):
    """``TierStore.add_batch``: all or nothing."""

    ns: str
    items: list[AddItem]


class SearchBody(Body):
    """``TierStore.search``."""

    ns: str
    query: VectorOrText
    k: int | None = None
    context_tags: list[str] | None = None
    memory_types: list[str] | None = None
    min_confidence: float | None = None
    include_warm: bool | None = None
    include_cold: bool | Literal["auto"] | None = None
    record_access: bool | None = None
    explain: bool | None = None


class IdBody(Body):
    """``TierStore.get`` / ``delete``."""

    ns: str
    id: str


class KeyBody(Body):
    """``TierStore.get_by_key``."""

    ns: str
    key: str


class MemoriesBody(Body):
    """``TierStore.memories_page``: one page of the namespace's memories, in the order added. Without
    ``limit`` the server's ``--max-page`` applies; ``after`` is the ``next`` cursor of the previous page."""

    ns: str
    after: str | None = Field(None, description="opaque cursor: the previous page's next; null for the first page")
    limit: int | None = None
    with_embedding: bool | None = None


class TouchBody(Body):
    """``TierStore.touch``."""

    ns: str
    ids: list[str] | str


class FeedbackBody(Body):
    """``TierStore.feedback``."""

    ns: str
    id: str
    positive: bool
    strength: float | None = None
    implicit: bool | None = None


class PinBody(Body):
    """``TierStore.pin``."""

    ns: str
    id: str
    pinned: bool | None = None


class ContextBody(Body):
    """``TierStore.set_context``."""

    ns: str
    tags: list[str]


class NsBody(Body):
    """``TierStore.get_context``."""

    ns: str


class RestoreBody(Body):
    """``TierStore.restore``. ``where`` times are POSIX seconds or ISO 8601."""

    ns: str
    ids: list[str] | None = None
    where: dict[str, Any] | None = None
    text: str | None = None
    query: VectorOrText | None = None
    k: int | None = None
    limit: int | None = None


class SweepBody(Body):
    """``TierStore.sweep``. Without ``max_items`` / ``time_budget_s`` the server's limits apply."""

    max_items: int | None = None
    time_budget_s: float | None = Field(None, description="seconds")
    dry_run: bool | None = None


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


class ErrorDetail(BaseModel):
    type: str = Field(description="the class in tierstore.errors")
    message: str


class ErrorOut(BaseModel):
    error: ErrorDetail


#: POST routes: path -> (request model, response model, summary)
POST_ROUTES: dict[str, tuple[type[Body], type[BaseModel], str]] = {
    "/v1/add": (AddBody, IdOut, "add one memory"),
    "/v1/add_batch": (AddBatchBody, IdsOut, "add many memories, all or nothing"),
    "/v1/upsert_batch": (AddBatchBody, IdsOut, "store many memories under their ids, replacing those that exist, "
                         "in one transaction"),
    "/v1/search": (SearchBody, HitsOut, "the k best memories for a query"),
    "/v1/get": (IdBody, MemoryOrNone, "one memory, from any tier, without counting an access"),
    "/v1/get_by_key": (KeyBody, MemoryOrNone, "the live memory holding a key"),
    "/v1/memories": (MemoriesBody, MemoriesOut, "a page of a namespace's memories, in the order added, "
                     "without counting an access"),
    "/v1/touch": (TouchBody, Empty, "count an access"),
    "/v1/feedback": (FeedbackBody, MemoryResult, "move confidence and weight"),
    "/v1/pin": (PinBody, Empty, "exempt from expiry, or end the exemption"),
    "/v1/delete": (IdBody, DeletedOut, "forget a memory for good"),
    "/v1/set_context": (ContextBody, Empty, "the namespace's active context"),
    "/v1/get_context": (NsBody, TagsOut, "the namespace's active context"),
    "/v1/restore": (RestoreBody, IdsOut, "bring archived memories back to the hot tier"),
    "/v1/sweep": (SweepBody, ReportOut, "one bounded pass of the migrator (store-wide)"),
}

#: GET routes: path -> (response model or None for text, summary, authenticated)
GET_ROUTES: dict[str, tuple[type[BaseModel] | None, str, bool]] = {
    "/v1/stats": (StatsOut, "counts per tier and type, lifecycle metrics (store-wide; ?lifecycle=false skips "
                            "the lifecycle metrics)", True),
    "/v1/namespaces": (NamespacesOut, "the namespaces this token can reach that hold memories", True),
    "/v1/info": (InfoOut, "dimension, embedder, policy, store id, version, store time, background sweeps", True),
    "/metrics": (None, "Prometheus text exposition (store-wide)", True),
    "/health": (None, "liveness: the process answers", False),
    "/ready": (None, "readiness: the store is open and the server is not shutting down", False),
}


def openapi(version: str) -> dict[str, Any]:
    """The OpenAPI 3.1 document of the HTTP API."""
    models = {m for body, out, _ in POST_ROUTES.values() for m in (body, out)}
    models |= {out for out, _, _ in GET_ROUTES.values() if out is not None} | {ErrorOut}
    _, defs = models_json_schema([(m, "validation" if issubclass(m, Body) else "serialization")
                                  for m in sorted(models, key=lambda m: m.__name__)],
                                 ref_template="#/components/schemas/{model}")
    ref = lambda m: {"$ref": f"#/components/schemas/{m.__name__}"}  # noqa: E731
    errors = {str(code): {"description": why, "content": {"application/json": {"schema": ref(ErrorOut)}}}
              for code, why in ((400, "bad input; nothing changed"), (401, "missing or unknown token"),
                                (403, "namespace outside the token's tenant, or a store-wide call"),
                                (404, "no such memory"), (409, "duplicate id, clock skew"),
                                (413, "body too large"), (500, "server error (details in its log)"),
                                (503, "store closed or shutting down"))}
    paths: dict[str, Any] = {}
    for path, (body, out, summary) in POST_ROUTES.items():
        paths[path] = {"post": {
            "summary": summary, "description": body.__doc__ or "",
            "requestBody": {"required": True, "content": {"application/json": {"schema": ref(body)}}},
            "responses": {"200": {"description": "ok", "content": {"application/json": {"schema": ref(out)}}},
                          **errors},
            "security": [{"bearer": []}],
        }}
    for path, (out, summary, authed) in GET_ROUTES.items():
        content = ({"application/json": {"schema": ref(out)}} if out is not None
                   else {"text/plain": {"schema": {"type": "string"}}})
        op: dict[str, Any] = {"summary": summary, "responses": {"200": {"description": "ok", "content": content}}}
        if authed:
            op["security"] = [{"bearer": []}]
            op["responses"].update({k: errors[k] for k in ("401", "403")})
        paths[path] = {"get": op}
    return {
        "openapi": "3.1.0",
        "info": {"title": "tierstore", "version": version,
                 "description": "One tierstore store served over HTTP: the calls of TierStore, same names, "
                                "same errors. Vectors: JSON arrays or {\"base64\": little-endian float32}; a "
                                "string where a vector goes is text for the server's embedder."},
        "paths": paths,
        "components": {"schemas": defs.get("$defs", {}),
                       "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
    }
