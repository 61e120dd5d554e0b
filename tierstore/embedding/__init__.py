"""Text in: the embedder a store turns text into vectors with.

``TierStore.open(path, embedder=...)`` takes a callable ``list[str] ->
float32 array (n, dim)`` or a name (``"minilm"``: all-MiniLM-L6-v2 run by
ONNX Runtime from a package that ships its files, offline, no torch; extra
``embed``, see :mod:`.minilm`). The store records the
embedder's name and dimension in its catalog (meta ``embedder``), so that a
store is never searched with vectors from another model: reopening it with a
different embedder is a :class:`StoreConfigError`.

Texts are embedded in batches of :data:`BATCH` per call of the model (one
``add_batch`` of 1000 memories is 16 calls, not 1000).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from tierstore.errors import InvalidInputError, StoreConfigError

BATCH = 64  # texts per call of the model: MiniLM's throughput on CPU levels off around here

#: Names accepted by ``TierStore.open(embedder=...)`` (besides ``"module:function"`` and callables).
NAMED = ("minilm",)


class Embedder:
    """Text to unit vectors: ``embed(texts)`` returns float32 ``(len(texts), dim)``.

    ``name`` identifies the model (it is stored with the store); ``dim`` is
    its output dimension."""

    name: str
    dim: int
    #: The most tokens (special ones included) the model reads of one text: its
    #: window. ``None``: unknown, and texts are not checked against it.
    max_tokens: int | None = None

    def count_tokens(self, text: str) -> int | None:
        """How many tokens ``text`` is for this model (special ones included),
        or ``None`` when no tokenizer is at hand (see :func:`check_window`)."""
        return None

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """``(len(texts), dim)`` float32, each row finite and non-zero; batched by :data:`BATCH`."""
        out = np.empty((len(texts), self.dim), np.float32)
        for start in range(0, len(texts), BATCH):
            part = list(texts[start : start + BATCH])
            out[start : start + len(part)] = self._checked(self._embed_batch(part), len(part))
        return out

    def _embed_batch(self, texts: list[str]) -> Any:
        raise NotImplementedError

    def _checked(self, arr: Any, n: int) -> np.ndarray:
        """The model's output as float32 ``(n, dim)``, or a clear error naming what came back."""
        try:
            a = np.asarray(arr, dtype=np.float32)
        except (TypeError, ValueError):
            raise StoreConfigError(
                f"the embedder {self.name!r} returned something that is not an array of numbers"
            ) from None
        if a.shape != (n, self.dim):
            raise StoreConfigError(
                f"the embedder {self.name!r} returned shape {a.shape} for {n} texts; expected ({n}, {self.dim})"
            )
        return a

    def record(self) -> str:
        """What the catalog keeps: JSON of name and dim."""
        return json.dumps({"name": self.name, "dim": self.dim}, sort_keys=True)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, dim={self.dim})"


class CallableEmbedder(Embedder):
    """A function ``list[str] -> (n, dim)``. Its name is its ``name`` attribute
    if it has one, else its module and qualified name; its dimension is its
    ``dim`` attribute, else measured on one text at open."""

    def __init__(self, fn: Callable[[list[str]], Any]) -> None:
        self._fn = fn
        name = getattr(fn, "name", None)
        if not isinstance(name, str) or not name:
            name = f"{getattr(fn, '__module__', None) or '?'}.{getattr(fn, '__qualname__', type(fn).__qualname__)}"
        self.name = name
        dim = getattr(fn, "dim", None)
        if dim is None:
            probe = np.asarray(fn(["dimension probe"]), dtype=np.float32)
            if probe.ndim != 2 or probe.shape[0] != 1:
                raise StoreConfigError(
                    f"the embedder {name!r} must return an array of shape (n, dim) for n texts; "
                    f"for one text it returned shape {probe.shape}"
                )
            dim = probe.shape[1]
        if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim < 1:
            raise StoreConfigError(f"the embedder {name!r} has no valid dimension (dim={dim!r})")
        self.dim = int(dim)
        window = getattr(fn, "max_tokens", None)  # optional, as dim: the model's window, and its tokenizer
        if window is not None and (isinstance(window, bool) or not isinstance(window, (int, np.integer)) or window < 3):
            raise StoreConfigError(f"the embedder {name!r} has no valid window (max_tokens={window!r})")
        self.max_tokens = None if window is None else int(window)
        self._count = getattr(fn, "count_tokens", None)

    def count_tokens(self, text: str) -> int | None:
        return None if self._count is None else int(self._count(text))

    def _embed_batch(self, texts: list[str]) -> Any:
        return self._fn(texts)


class MiniLMEmbedder(Embedder):
    """all-MiniLM-L6-v2 (384 dimensions) without torch (:class:`.minilm.MiniLM`):
    its window is 256 word-pieces, [CLS] and [SEP] included (the model reads
    no further; :func:`check_window` refuses a longer text), and
    ``count_tokens`` is exact (the model's own tokenizer).
    ``model_dir``: the model's files elsewhere than in the installed package;
    ``threads``: ONNX Runtime's threads (0: one per core)."""

    name = "minilm"
    dim = 384

    def __init__(self, model_dir: str | None = None, threads: int = 0) -> None:
        from tierstore.embedding.minilm import MiniLM

        self._model = MiniLM(model_dir, threads=threads)
        if self._model.dim != self.dim:
            raise StoreConfigError(f"the model at {model_dir} gives {self._model.dim} dimensions, not {self.dim}")
        self.max_tokens = self._model.max_tokens

    def count_tokens(self, text: str) -> int | None:
        return self._model.count_tokens([text])[0]

    def _embed_batch(self, texts: list[str]) -> Any:
        return self._model.encode(texts)


def resolve(spec: Any) -> Embedder | None:
    """``None``, an :class:`Embedder`, a name from :data:`NAMED` or a callable, as an Embedder."""
    if spec is None or isinstance(spec, Embedder):
        return spec
    if isinstance(spec, str):
        if spec == "minilm":
            return MiniLMEmbedder()
        if ":" in spec:
            return CallableEmbedder(_import(spec))
        raise StoreConfigError(
            f"unknown embedder {spec!r}: give one of {', '.join(NAMED)}, 'module:function' "
            "or a callable list[str] -> float32 array (n, dim)"
        )
    if callable(spec):
        return CallableEmbedder(spec)
    raise StoreConfigError(f"embedder must be a name ({', '.join(NAMED)}) or a callable, got {type(spec).__name__}")


def _import(spec: str) -> Callable[[list[str]], Any]:
    """``"package.module:function"`` (the command line's ``--embedder``) imported."""
    import importlib

    module, _, attr = spec.partition(":")
    try:
        fn = importlib.import_module(module)
        for part in attr.split("."):
            fn = getattr(fn, part)
    except (ImportError, AttributeError) as exc:
        raise StoreConfigError(f"cannot import the embedder {spec!r}: {exc}") from None
    if not callable(fn):
        raise StoreConfigError(f"the embedder {spec!r} is not callable")
    return fn


def check_against_record(embedder: Embedder, stored: str | None, where: str) -> None:
    """Refuse an embedder other than the one the store recorded (by name and dim)."""
    if stored is None:
        return
    try:
        rec = json.loads(stored)
        name, dim = rec["name"], int(rec["dim"])
    except (ValueError, KeyError, TypeError):
        raise StoreConfigError(f"the store at {where} has an unreadable embedder record: {stored[:200]!r}") from None
    if name != embedder.name or dim != embedder.dim:
        raise StoreConfigError(
            f"the store at {where} holds vectors of the embedder {name!r} (dim {dim}); "
            f"opened with {embedder.name!r} (dim {embedder.dim}). Open it with the same embedder, "
            "or without one and pass vectors"
        )


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise InvalidInputError(f"{what} must be text (a str) to be embedded, got {type(value).__name__}")
    if not value.strip():
        raise InvalidInputError(f"{what} is empty: there is nothing to embed")
    try:  # before the tokenizer, which fails on a lone surrogate (a bad decode) with its own error
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInputError(f"{what} is not valid Unicode text: a lone surrogate at position {exc.start}") from None
    return value


def fill_embeddings(embedder: Embedder | None, items: Sequence[Any]) -> Sequence[Any]:
    """Items of ``add``/``add_batch`` with their text turned into vectors:
    an item without an embedding (or with ``None``) gets its content's, one
    whose embedding is a str gets that text's. All texts of the call go to
    the model together, in batches. Items that already carry a vector (and
    non-dict items, which the store's own checks refuse) pass unchanged."""
    todo: list[tuple[int, str]] = []
    for i, item in enumerate(items):
        if not isinstance(item, Mapping):
            continue
        emb = item.get("embedding")
        if emb is None:
            source, what = item.get("content"), "content"
        elif isinstance(emb, str):
            source, what = emb, "embedding"
        else:
            continue
        if embedder is None:
            if emb is None:
                raise InvalidInputError(
                    _where(items, i) + "an embedding is required: this store has no embedder "
                    "(open it with embedder='minilm' or a callable to add text alone)"
                )
            raise InvalidInputError(
                _where(items, i) + "embedding is text, but this store has no embedder to "
                "embed it (open it with embedder=...), and takes vectors"
            )
        try:
            todo.append((i, check_window(embedder, _text(source, what), what)))
        except InvalidInputError as exc:
            raise InvalidInputError(_where(items, i) + str(exc)) from None
    if not todo:
        return items
    vectors = embedder.embed([t for _, t in todo])  # type: ignore[union-attr]
    out = list(items)
    for (i, _), v in zip(todo, vectors):
        out[i] = {**items[i], "embedding": v}
    return out


def embed_query(embedder: Embedder | None, query: Any, what: str = "query") -> Any:
    """A str query as its vector (with an embedder); anything else unchanged."""
    if not isinstance(query, str):
        return query
    if embedder is None:
        raise InvalidInputError(
            f"{what} is text, but this store has no embedder (open it with embedder=...); give a vector"
        )
    return embedder.embed([check_window(embedder, _text(query, what), what)])[0]


#: Without a tokenizer a text counts as one token per this many characters:
#: fewer than English word-pieces average (about 4.5 for MiniLM's), so a text
#: the model would cut is refused rather than cut silently.
CHARS_PER_TOKEN_FALLBACK = 3


def check_window(embedder: Embedder, text: str, what: str) -> str:
    """``text`` if ``embedder`` reads all of it; InvalidInputError saying why
    and what to do when it is longer than the embedder's window (the model
    would ignore the rest, silently). Exact with the embedder's tokenizer;
    without one, an estimate that errs towards refusing
    (:data:`CHARS_PER_TOKEN_FALLBACK`). A text with more words than the
    window is refused before it is tokenized (each word is a token or more)."""
    window = embedder.max_tokens
    if window is None:
        return text
    count, how = len(text.split()) + 2, "at least "  # [CLS], [SEP] and a token per word, at least
    if count <= window:
        tokens = embedder.count_tokens(text)
        if tokens is None:
            count, how = -(-len(text) // CHARS_PER_TOKEN_FALLBACK) + 2, "about "
        else:
            count, how = tokens, ""
    if count > window:
        raise InvalidInputError(
            f"{what} is {how}{count} tokens, more than the {window} the embedder {embedder.name!r} reads: it "
            "would ignore the rest. Split it into several memories, or pass an embedding you computed for "
            "the whole text"
        )
    return text


def _where(items: Sequence[Any], i: int) -> str:
    return "" if len(items) == 1 else f"item {i}: "
