"""The HTTP API's requests: per route, each field's JSON type, bounds and meaning.

One definition, four uses: the server checks every body against it before
any work (:func:`check_body`), :class:`tierstore.remote.client.RemoteStore` builds
its bodies from it (:func:`body`), the MCP tools take their parameters'
descriptions and bounds from it, and the OpenAPI document is made from it
(:func:`json_schema`).

What a check here does: the JSON type exactly (a boolean is ``true`` or
``false``, not ``"no"``; a list is a JSON array, not an object), counts and
lengths against the server's limits *before* any entry is looked at, then
each entry's type, in one pass (linear time, so refusing a hostile body
costs no more than reading it). What it leaves to :class:`TierStore`: what a
value means (an unknown memory type, a confidence of 1.5, an id that does
not exist), so that a remote call raises the error class a local one does.
A field given as ``null`` is left out: the store's default applies.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tierstore.errors import (
    InvalidConfidenceError,
    InvalidInputError,
    InvalidKeyError,
    InvalidNamespaceError,
    InvalidVectorError,
    TierStoreError,
)
from tierstore.rules.validation import (
    CONTENT_MAX_CHARS,
    ID_MAX_LEN,
    KEY_MAX_LEN,
    LABEL_MAX_CHARS,
    SUPERSEDES_MAX,
    TAG_MAX_LEN,
    TAGS_MAX_LISTED,
    check_id,
    shown,
)

MAX_VECTOR_LEN = 65_536  # numbers in a vector as a JSON array: above any embedder's dimension
MAX_TYPES = 64  # memory types one search may name
MAX_CURSOR_CHARS = 4096  # a page cursor: a few dozen characters in practice
MAX_WHERE_KEYS = 16  # a restore filter has 8 known keys


class Bounds:
    """The server's limits a check needs (``tierstore.remote.server.app.Limits`` has
    them all); these defaults are the server's."""

    max_k = 1000
    max_batch = 1000
    max_batch_hits = 10_000
    max_restore = 1000
    max_sweep_items = 10_000
    max_sweep_seconds = 10.0
    max_page = 1000
    max_content_chars = CONTENT_MAX_CHARS


# ------------------------------------------------------------------ kinds of value
# Each kind: check(value, what, bounds) -> value (raises its error class), and
# schema(bounds) -> a JSON Schema fragment. ``what`` is the name the caller
# knows the field by (the body's field, or an MCP tool's parameter).


def _type_name(value: Any) -> str:
    return {
        dict: "an object",
        list: "an array",
        str: "a string",
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        type(None): "null",
    }.get(type(value), type(value).__name__)


def _wrong(error: type[TierStoreError], what: str, expected: str, value: Any) -> TierStoreError:
    return error(f"{what} must be {expected}, got {_type_name(value)} {shown(value)}")


def _text_ok(value: str, what: str, error: type[TierStoreError] = InvalidInputError) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise error(f"{what} is not valid Unicode text: a lone surrogate at position {exc.start}") from None
    return value


def _bound(bounds: Any, limit: int | str) -> Any:
    return getattr(bounds, limit) if isinstance(limit, str) else limit


def _over(what: str, value: Any, limit: int | float, flag: str | None) -> InvalidInputError:
    where = f"this server's limit of {limit} ({flag})" if flag else f"the limit of {limit}"
    return InvalidInputError(f"{what}={value} is above {where}")


def _flag(limit: int | str) -> str | None:
    return f"--{limit.replace('_', '-')}" if isinstance(limit, str) else None


@dataclass(frozen=True)
class Text:
    """A JSON string of at most ``max_chars`` characters (an int, or the name of a bound), valid Unicode."""

    max_chars: int | str
    error: type[TierStoreError] = InvalidInputError
    checker: Callable[[str], Any] | None = None  # the store's own check when it is cheap (namespace, id)

    def check(self, value: Any, what: str, bounds: Any) -> Any:
        if not isinstance(value, str):
            raise _wrong(self.error, what, "a string", value)
        limit = _bound(bounds, self.max_chars)
        if len(value) > limit:
            raise self.error(
                f"{what} is {len(value)} characters, more than the limit of {limit}"
                + (f" ({_flag(self.max_chars)})" if _flag(self.max_chars) else "")
            )
        _text_ok(value, what, self.error)
        return value if self.checker is None else self.checker(value)

    def schema(self, bounds: Any) -> dict[str, Any]:
        return {"type": "string", "maxLength": _bound(bounds, self.max_chars)}


@dataclass(frozen=True)
class Flag:
    """A JSON boolean."""

    def check(self, value: Any, what: str, bounds: Any) -> Any:
        if type(value) is not bool:
            raise _wrong(InvalidInputError, what, "true or false (a JSON boolean)", value)
        return value

    def schema(self, bounds: Any) -> dict[str, Any]:
        return {"type": "boolean"}


@dataclass(frozen=True)
class Count:
    """A JSON integer; at most a bound when one is named (the store checks that it is positive)."""

    limit: int | str | None = None

    def check(self, value: Any, what: str, bounds: Any) -> Any:
        if type(value) is not int:
            raise _wrong(InvalidInputError, what, "a positive integer", value)
        if self.limit is not None and value > _bound(bounds, self.limit):
            raise _over(what, value, _bound(bounds, self.limit), _flag(self.limit))
        return value

    def schema(self, bounds: Any) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "integer", "minimum": 1}
        if self.limit is not None:
            out["maximum"] = _bound(bounds, self.limit)
        return out


@dataclass(frozen=True)
class Number:
    """A finite JSON number (the store checks its range); at most a bound when one is named."""

    error: type[TierStoreError] = InvalidInputError
    limit: int | str | None = None
    minimum: float | None = None
    maximum: float | None = None

    def check(self, value: Any, what: str, bounds: Any) -> Any:
        if type(value) not in (int, float) or not math.isfinite(value):
            raise _wrong(self.error, what, "a finite number", value)
        if self.limit is not None and value > _bound(bounds, self.limit):
            raise _over(what, value, _bound(bounds, self.limit), _flag(self.limit))
        return value

    def schema(self, bounds: Any) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "number"}
        if self.minimum is not None:
            out["minimum"] = self.minimum
        top = self.maximum if self.limit is None else _bound(bounds, self.limit)
        if top is not None:
            out["maximum"] = top
        return out


@dataclass(frozen=True)
class Strings:
    """A JSON array of at most ``max_count`` strings of at most ``max_chars``
    characters each; the count is checked before any entry. ``one_ok``: a
    single string stands for a list of one."""

    max_count: int | str
    max_chars: int
    one_ok: bool = False

    def check(self, value: Any, what: str, bounds: Any) -> Any:
        if isinstance(value, str) and self.one_ok:
            value = [value]
        if not isinstance(value, list):
            raise _wrong(
                InvalidInputError, what, "an array of strings" + (" or one string" if self.one_ok else ""), value
            )
        limit = _bound(bounds, self.max_count)
        if len(value) > limit:
            raise InvalidInputError(
                f"{what}: {len(value)} entries, more than the limit of {limit}"
                + (f" ({_flag(self.max_count)})" if _flag(self.max_count) else "")
            )
        for i, v in enumerate(value):
            if not isinstance(v, str):
                raise _wrong(InvalidInputError, f"{what}[{i}]", "a string", v)
            if len(v) > self.max_chars:
                raise InvalidInputError(f"{what}[{i}] is {len(v)} characters, more than the limit of {self.max_chars}")
            _text_ok(v, f"{what}[{i}]")
        return value

    def schema(self, bounds: Any) -> dict[str, Any]:
        items = {
            "type": "array",
            "maxItems": _bound(bounds, self.max_count),
            "items": {"type": "string", "maxLength": self.max_chars},
        }
        return {"anyOf": [items, {"type": "string"}]} if self.one_ok else items


@dataclass(frozen=True)
class Vector:
    """A vector: a JSON array of numbers, ``{"base64": little-endian float32}``,
    or (``text_ok``) a string: text for the server's embedder. In a msgpack
    body also a bin of little-endian float32 bytes (JSON has no bytes)."""

    text_ok: bool = True

    def check(self, value: Any, what: str, bounds: Any) -> Any:
        if isinstance(value, list):
            if len(value) > MAX_VECTOR_LEN:
                raise InvalidVectorError(f"{what} has {len(value)} numbers, more than the limit of {MAX_VECTOR_LEN}")
            return value  # its numbers: the store's check (an array of strings is InvalidVectorError there)
        if isinstance(value, dict):
            return value  # wire.vector_in decodes it, or says what is wrong
        if isinstance(value, bytes):
            if len(value) % 4 or len(value) > 4 * MAX_VECTOR_LEN:
                raise InvalidVectorError(
                    f"{what}: {len(value)} bytes is not a whole number of float32 values up to {MAX_VECTOR_LEN}"
                )
            return value  # wire.vector_in reads it as float32
        if isinstance(value, str) and self.text_ok:
            limit = bounds.max_content_chars
            if len(value) > limit:
                raise InvalidInputError(
                    f"{what} is text of {len(value)} characters, more than the limit of "
                    f"{limit} (--max-content-chars): split it into several memories"
                )
            return _text_ok(value, what)
        raise _wrong(
            InvalidVectorError,
            what,
            'an array of numbers, {"base64": ...}' + (" or a text" if self.text_ok else ""),
            value,
        )

    def schema(self, bounds: Any) -> dict[str, Any]:
        forms: list[dict[str, Any]] = [
            {"type": "array", "items": {"type": "number"}, "maxItems": MAX_VECTOR_LEN},
            {
                "type": "object",
                "properties": {"base64": {"type": "string", "description": "little-endian float32"}},
                "required": ["base64"],
                "additionalProperties": False,
            },
        ]
        if self.text_ok:
            forms.append(
                {
                    "type": "string",
                    "maxLength": bounds.max_content_chars,
                    "description": "text, embedded by the server's embedder",
                }
            )
        return {"anyOf": forms}


@dataclass(frozen=True)
class ColdChoice:
    """``include_cold``: true, false or "auto"."""

    def check(self, value: Any, what: str, bounds: Any) -> Any:
        if type(value) is not bool and value != "auto":
            raise _wrong(InvalidInputError, what, 'true, false or "auto"', value)
        return value

    def schema(self, bounds: Any) -> dict[str, Any]:
        return {"anyOf": [{"type": "boolean"}, {"const": "auto"}]}


@dataclass(frozen=True)
class Obj:
    """A JSON object of at most ``max_keys`` keys (its values: the store's check)."""

    max_keys: int | None = None

    def check(self, value: Any, what: str, bounds: Any) -> Any:
        if not isinstance(value, dict):
            raise _wrong(InvalidInputError, what, "a JSON object", value)
        if self.max_keys is not None and len(value) > self.max_keys:
            raise InvalidInputError(f"{what} has {len(value)} keys, more than the limit of {self.max_keys}")
        return value

    def schema(self, bounds: Any) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "object"}
        if self.max_keys is not None:
            out["maxProperties"] = self.max_keys
        return out


@dataclass(frozen=True)
class Queries:
    """``search_batch``'s queries: a JSON array of at most ``--max-batch``
    vectors (no text: each is checked before any search runs); the count
    is checked before any entry."""

    def check(self, value: Any, what: str, bounds: Any) -> Any:
        if not isinstance(value, list):
            raise _wrong(InvalidVectorError, what, "an array of vectors", value)
        if len(value) > bounds.max_batch:
            raise InvalidInputError(
                f"{what}: {len(value)} queries, more than this server's limit of {bounds.max_batch} (--max-batch)"
            )
        one = Vector(text_ok=False)
        return [one.check(v, f"{what}[{i}]", bounds) for i, v in enumerate(value)]

    def schema(self, bounds: Any) -> dict[str, Any]:
        return {"type": "array", "minItems": 1, "maxItems": bounds.max_batch, "items": Vector(False).schema(bounds)}


@dataclass(frozen=True)
class Items:
    """``add_batch``'s items: a JSON array of at most ``--max-batch`` objects, each with :data:`ITEM`'s fields."""

    def check(self, value: Any, what: str, bounds: Any) -> Any:
        if not isinstance(value, list):
            raise _wrong(InvalidInputError, what, "an array of objects", value)
        if len(value) > bounds.max_batch:
            raise InvalidInputError(
                f"{len(value)} items is above this server's limit of {bounds.max_batch} (--max-batch)"
            )
        return [
            check_fields(ITEM, item, bounds, f"{what}[{i}]", prefix=f"{what}[{i}].") for i, item in enumerate(value)
        ]

    def schema(self, bounds: Any) -> dict[str, Any]:
        return {"type": "array", "maxItems": bounds.max_batch, "items": _object_schema(ITEM, bounds)}


# ------------------------------------------------------------------ fields and routes


@dataclass(frozen=True)
class Field:
    name: str
    kind: Any
    description: str
    required: bool = False


@dataclass(frozen=True)
class Route:
    """One POST route: the :class:`TierStore` method it calls and its body's fields."""

    method: str
    fields: tuple[Field, ...]
    summary: str
    description: str = ""
    by_name: dict[str, Field] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_name", {f.name: f for f in self.fields})

    def describe(self, name: str) -> str:
        return self.by_name[name].description


NS_DOC = (
    "the namespace: whose memories these are, one per user, agent or conversation partner "
    "(1-128 characters of letters, digits, '_', '.', '-'); namespaces never see each other's memories"
)
ID_DOC = f"a memory's id (1-{ID_MAX_LEN} characters), as add returned it"
TAGS_DOC = (
    f"labels (each 1-{TAG_MAX_LEN} characters; at most {TAGS_MAX_LISTED} listed, duplicates dropped, and "
    "the store's max_tags_per_memory distinct ones, 64 by default); memories sharing the search's context "
    "tags rank higher"
)
SOURCE_DOC = (
    "who said it, which sets the confidence the store adds to yours: user_declaration (default), "
    "user_confirmation, external_verified, tool_output, ai_summary, ai_inference, ai_guess "
    "(another label counts as none)"
)
TYPE_DOC = (
    "fact (default; lives 30 days), preference (7 days), opinion (3 days), task (2 days) or conversation "
    "(1 hour), per the server's policy; each use refreshes the lifetime"
)
NS = Field(
    "ns", Text(128, InvalidNamespaceError), NS_DOC, True
)  # its name: Principal.check_namespace, first in every call
ID = Field("id", Text(ID_MAX_LEN, checker=check_id), ID_DOC, True)

_ADD_FIELDS = (
    Field("content", Text("max_content_chars"), "the memory's text (at most --max-content-chars characters)", True),
    Field(
        "embedding",
        Vector(),
        'its vector: an array of numbers or {"base64": little-endian float32}; a string '
        "is text to embed instead of the content; left out: the content's embedding (the server's embedder)",
    ),
    Field("memory_type", Text(LABEL_MAX_CHARS), TYPE_DOC),
    Field(
        "confidence",
        Number(InvalidConfidenceError, minimum=0.0, maximum=1.0),
        "how sure the caller is, in [0, 1] (default 0.8)",
    ),
    Field("source", Text(LABEL_MAX_CHARS), SOURCE_DOC),
    Field("tags", Strings(TAGS_MAX_LISTED, TAG_MAX_LEN), TAGS_DOC),
    Field("ttl_seconds", Number(minimum=0.0), "its lifetime in seconds, instead of its type's"),
    Field("pinned", Flag(), "true: it never expires (default false)"),
    Field("id", Text(ID_MAX_LEN, checker=check_id), "its id (default: a new random one)"),
    Field(
        "supersedes",
        Strings(SUPERSEDES_MAX, ID_MAX_LEN, one_ok=True),
        f"ids of memories this one replaces (at most {SUPERSEDES_MAX}): they are marked, rank low and retire",
    ),
    Field(
        "key",
        Text(KEY_MAX_LEN, InvalidKeyError),
        "a slot such as home_city: the slot's current memory is superseded by this one",
    ),
    Field("metadata", Obj(), "free-form JSON kept and returned exactly (at most 64 KiB)"),
)
#: The fields of one item of add_batch / upsert_batch.
ITEM = Route("add_batch item", _ADD_FIELDS, "one memory of a batch")

_SEARCH_FIELDS = (
    NS,
    Field(
        "query",
        Vector(),
        "a vector, or a text (the server's embedder embeds it; its words are also looked up in the keyword index)",
        True,
    ),
    Field(
        "text",
        Text("max_content_chars"),
        "the query's words, beside a vector query: memories that share them "
        "rank higher (BM25, weighted by the policy's scoring.keyword_weight); a text query uses its own",
    ),
    Field("k", Count("max_k"), "how many hits, best first (default 5; at most --max-k)"),
    Field(
        "context_tags",
        Strings(TAGS_MAX_LISTED, TAG_MAX_LEN),
        "the query's context (default: the namespace's, set_context); memories sharing them rank higher",
    ),
    Field("memory_types", Strings(MAX_TYPES, LABEL_MAX_CHARS), "only memories of these types"),
    Field(
        "min_confidence",
        Number(InvalidConfidenceError, minimum=0.0, maximum=1.0),
        "only memories at least this sure, in [0, 1]",
    ),
    Field("include_warm", Flag(), "search the warm tier too (default true)"),
    Field(
        "include_cold",
        ColdChoice(),
        'search archived memories: true, false or "auto" (the policy\'s default: when hot and warm answer weakly)',
    ),
    Field("record_access", Flag(), "count the hits as used (they live longer); default: the policy's"),
    Field("explain", Flag(), "attach each hit's score breakdown"),
)

ROUTES: dict[str, Route] = {
    "/v1/add": Route(
        "add",
        (NS, *_ADD_FIELDS),
        "add one memory",
        "TierStore.add. Without embedding (or with a text) the server's embedder embeds the content (the text).",
    ),
    "/v1/add_batch": Route(
        "add_batch",
        (NS, Field("items", Items(), "the memories (at most --max-batch)", True)),
        "add many memories, all or nothing",
    ),
    "/v1/upsert_batch": Route(
        "upsert_batch",
        (NS, Field("items", Items(), "the memories (at most --max-batch)", True)),
        "store many memories under their ids, replacing those that exist, in one transaction",
    ),
    "/v1/search": Route("search", _SEARCH_FIELDS, "the k best memories for a query"),
    "/v1/search_batch": Route(
        "search_batch",
        (
            NS,
            Field(
                "queries",
                Queries(),
                "vectors (at most --max-batch; no text), each searched as /v1/search would with the options below",
                True,
            ),
            *(f for f in _SEARCH_FIELDS if f.name not in ("ns", "query", "text", "k")),
            Field(
                "k",
                Count("max_k"),
                "hits per query (default 5; at most --max-k; queries x k at most the server's max_batch_hits, 10 000)",
            ),
        ),
        "the k best memories for each of many query vectors, in one request",
        "RemoteStore.search_batch: one TierStore.search per query, in order, in one request (every vector is "
        "checked first: a bad one changes nothing). For callers with many queries: one request's overhead "
        "instead of one per query.",
    ),
    "/v1/get": Route("get", (NS, ID), "one memory, from any tier, without counting an access"),
    "/v1/get_by_key": Route(
        "get_by_key",
        (NS, Field("key", Text(KEY_MAX_LEN, InvalidKeyError), "the slot", True)),
        "the live memory holding a key",
    ),
    "/v1/memories": Route(
        "memories_page",
        (
            NS,
            Field("after", Text(MAX_CURSOR_CHARS), "opaque cursor: the previous page's next; null for the first page"),
            Field("limit", Count("max_page"), "memories per page (default and most: --max-page)"),
            Field("with_embedding", Flag(), "include each memory's vector"),
        ),
        "a page of a namespace's memories, in the order added, without counting an access",
        "TierStore.memories_page. Without limit the server's --max-page applies; after is the next cursor of the "
        "previous page.",
    ),
    "/v1/touch": Route(
        "touch",
        (
            NS,
            Field(
                "ids", Strings("max_batch", ID_MAX_LEN, one_ok=True), "the memories used (at most --max-batch)", True
            ),
        ),
        "count an access",
    ),
    "/v1/feedback": Route(
        "feedback",
        (
            NS,
            ID,
            Field("positive", Flag(), "true: it proved right; false: wrong", True),
            Field("strength", Number(minimum=0.0, maximum=1.0), "in (0, 1] (default 1)"),
            Field("implicit", Flag(), "a smaller, implicit feedback (default false)"),
        ),
        "move confidence and weight",
    ),
    "/v1/pin": Route(
        "pin",
        (NS, ID, Field("pinned", Flag(), "true (default): never expires; false: ends it")),
        "exempt from expiry, or end the exemption",
    ),
    "/v1/delete": Route("delete", (NS, ID), "forget a memory for good"),
    "/v1/set_context": Route(
        "set_context",
        (NS, Field("tags", Strings(TAGS_MAX_LISTED, TAG_MAX_LEN), "the active context's tags", True)),
        "the namespace's active context",
    ),
    "/v1/get_context": Route("get_context", (NS,), "the namespace's active context"),
    "/v1/restore": Route(
        "restore",
        (
            NS,
            Field("ids", Strings("max_batch", ID_MAX_LEN, one_ok=True), "these memories (at most --max-batch)"),
            Field(
                "where",
                Obj(MAX_WHERE_KEYS),
                "a filter: memory_type, tags, any_tags, source, created_after, "
                "created_before, archived_after, archived_before (times: POSIX seconds or ISO 8601)",
            ),
            Field("text", Text("max_content_chars"), "keywords, any of them (BM25)"),
            Field("query", Vector(), "by meaning: a vector or a text"),
            Field("k", Count("max_k"), "with query: how many (default 5)"),
            Field("limit", Count("max_restore"), "at most this many (default and most: --max-restore)"),
        ),
        "bring archived memories back to the hot tier",
        "TierStore.restore.",
    ),
    "/v1/sweep": Route(
        "sweep",
        (
            Field(
                "max_items", Count("max_sweep_items"), "due memories to examine (default and most: --max-sweep-items)"
            ),
            Field(
                "time_budget_s",
                Number(limit="max_sweep_seconds", minimum=0.0),
                "seconds (default and most: --max-sweep-seconds)",
            ),
            Field("dry_run", Flag(), "count what is due, change nothing"),
        ),
        "one bounded pass of the migrator (store-wide)",
    ),
}


# ------------------------------------------------------------------ checks


def check_fields(
    route: Route, body: Any, bounds: Any, where: str, names: Mapping[str, str] | None = None, prefix: str = ""
) -> dict[str, Any]:
    """``body``'s fields for ``route``, each checked (see the module's doc),
    nulls left out; InvalidInputError (or the field's own class) naming the
    field as the caller knows it (``names``: route field -> caller's name;
    ``prefix``: where the body sits, as ``items[3].``)."""
    if not isinstance(body, dict):
        raise InvalidInputError(f"{where}: expected a JSON object, got {_type_name(body)}")
    known = route.by_name
    if len(body) > len(known) or not known.keys() >= body.keys():
        # key=repr: a msgpack map may mix str and bytes keys, which do not sort together
        unknown = sorted((k for k in list(body)[: len(known) + 8] if k not in known), key=repr)
        raise InvalidInputError(f"{where}: unknown field(s) {shown(unknown)}; expected some of {sorted(known)}")
    out: dict[str, Any] = {}
    for name, value in body.items():
        if value is None:
            continue
        what = prefix + (name if names is None else names.get(name, name))
        out[name] = known[name].kind.check(value, what, bounds)
    missing = [f.name for f in route.fields if f.required and f.name not in out]
    if missing:
        shown_names = [m if names is None else names.get(m, m) for m in missing]
        raise InvalidInputError(f"{where}: missing field(s) {shown_names}")
    return out


def check_body(path: str, body: Any, bounds: Any = Bounds) -> dict[str, Any]:
    """The checked fields of a body sent to ``path`` (a key of :data:`ROUTES`)."""
    return check_fields(ROUTES[path], body, bounds, path)


def body(path: str, **fields: Any) -> dict[str, Any]:
    """A request body for ``path``: the given fields, ``None`` ones left out
    (the server's default is the store's). A name the route does not have is
    a programming error (ValueError): the client and the server cannot drift."""
    known = ROUTES[path].by_name
    unknown = set(fields) - set(known)
    if unknown:
        raise ValueError(f"{path} has no field(s) {sorted(unknown)}")
    return {k: v for k, v in fields.items() if v is not None}


def _object_schema(route: Route, bounds: Any) -> dict[str, Any]:
    props = {f.name: {**f.kind.schema(bounds), "description": f.description} for f in route.fields}
    out: dict[str, Any] = {"type": "object", "properties": props, "additionalProperties": False}
    required = [f.name for f in route.fields if f.required]
    if required:
        out["required"] = required
    return out


def json_schema(path: str, bounds: Any = Bounds) -> dict[str, Any]:
    """The JSON Schema of ``path``'s body (with the server's limits)."""
    route = ROUTES[path]
    return {**_object_schema(route, bounds), "description": route.description or route.summary}
