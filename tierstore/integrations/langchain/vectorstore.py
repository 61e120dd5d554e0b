"""``TierStoreVectorStore``: a LangChain ``VectorStore`` over one namespace of a TierStore."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import VectorStore

from tierstore.errors import InvalidInputError, StoreConfigError
from tierstore.integrations.langchain.fields import FieldMap
from tierstore.integrations.langchain.selection import (
    REMOTE_MAX_CANDIDATES,
    check_mmr_args,
    filtered_hits,
    hit_filter,
    mmr,
    record_use,
)
from tierstore.integrations.policy import adapter_policy, check_adapter_policy
from tierstore.records import Hit
from tierstore.remote.client import RemoteStore
from tierstore.rules.validation import check_namespace, fresh_id
from tierstore.store import TierStore

# search() keywords passed through to TierStore.search
SEARCH_OPTIONS = frozenset(
    {"context_tags", "memory_types", "min_confidence", "include_warm", "include_cold", "record_access"}
)


def _document_fast(id: str, content: str, metadata: dict[str, Any] | None) -> Document:
    """A Document built as ``Document(id=, page_content=, metadata=)`` would
    build it, without running pydantic's validation: ~1.5 us instead of ~4 us
    (measured; four per search). The values are valid by construction (the
    store's id and content, metadata read from JSON: a fresh dict). Used only
    if :func:`_fast_documents_agree` says the result equals the validated one
    in every attribute (it may not in a later pydantic or LangChain)."""
    doc = _new(Document)
    _set(
        doc,
        "__dict__",
        {"id": id, "metadata": {} if metadata is None else metadata, "page_content": content, "type": "Document"},
    )
    _set(doc, "__pydantic_fields_set__", {"id", "metadata", "page_content"})
    _set(doc, "__pydantic_extra__", None)
    _set(doc, "__pydantic_private__", None)
    return doc


def _document_validated(id: str, content: str, metadata: dict[str, Any] | None) -> Document:
    return Document(id=id, page_content=content, metadata={} if metadata is None else metadata)


def _fast_documents_agree() -> bool:
    """Whether :func:`_document_fast` builds what the validated constructor builds (checked once, at import)."""
    try:
        probe = ("an-id", "some text", {"k": [1, "two"], "n": None})
        fast, slow = _document_fast(*probe), _document_validated(*probe)
        return (
            fast == slow
            and list(fast.__dict__.items()) == list(slow.__dict__.items())
            and fast.model_fields_set == slow.model_fields_set
            and fast.__pydantic_extra__ == slow.__pydantic_extra__
            and fast.__pydantic_private__ == slow.__pydantic_private__
            and fast.model_dump() == slow.model_dump()
            and fast.to_json() == slow.to_json()
        )
    except Exception:  # noqa: BLE001 - any difference at all: use the constructor
        return False


def _document_of(h: Hit) -> Document:
    return _document(h.id, h.content, h.metadata)


_new = object.__new__
_set = object.__setattr__
_document = _document_fast if _fast_documents_agree() else _document_validated


class TierStoreVectorStore(VectorStore):
    """Documents of one namespace of ``store``, embedded by ``embedding``.

    ``Document.page_content`` is the memory's content, ``Document.metadata``
    its metadata (stored whole, returned exactly: no store field is added),
    ``Document.id`` its id. Adding a document whose id exists replaces it
    atomically (:meth:`TierStore.upsert_batch`: a concurrent reader or a
    crash sees the old version or the new one). ``fields`` chooses metadata
    keys that set each memory's type, confidence, tags, TTL and pin;
    ``memory_type`` and ``source`` are the defaults.

    Searches rank by the store's fused score (similarity, recency,
    confidence, context, weight; see docs/policy.md), which orders fresh,
    unused documents by similarity; ``filter`` (a dict of metadata
    conditions or a function of a ``Document``) keeps the best that pass,
    and :meth:`max_marginal_relevance_search` picks diverse ones among the
    best. They do not count as use unless ``record_access=True`` (the
    retriever's default). ``store`` may be a :class:`RemoteStore` (a store
    served with ``tierstore serve --policy``). The store's policy
    must keep every document under its own id (no duplicate merging, no
    automatic supersession: see :func:`~tierstore.integrations.adapter_policy`).
    Async methods are LangChain's defaults (the sync ones in
    an executor); the store is thread-safe."""

    def __init__(
        self,
        store: TierStore | RemoteStore,
        embedding: Embeddings,
        *,
        namespace: str = "langchain",
        fields: FieldMap | None = None,
        memory_type: str = "fact",
        source: str = "langchain",
        record_access: bool = False,
        owns_store: bool = False,
    ) -> None:
        if not isinstance(store, (TierStore, RemoteStore)):
            raise InvalidInputError(f"store must be a TierStore or a RemoteStore, got {type(store).__name__}")
        if store.policy is None:
            raise StoreConfigError(
                "the server does not say its store's policy (a server older than this client, "
                "or a cluster): a vector store needs it checked"
            )
        check_adapter_policy(store.policy, "a vector store", served=isinstance(store, RemoteStore))
        store.policy.type_index(memory_type)  # UnknownMemoryTypeError now, not at the first add
        self.store = store
        self.namespace = check_namespace(namespace)
        self._embedding = embedding
        self.fields = fields if fields is not None else FieldMap()
        if not isinstance(self.fields, FieldMap):
            raise InvalidInputError(f"fields must be a FieldMap, got {type(fields).__name__}")
        self.memory_type = memory_type
        self.source = source
        self.record_access = record_access
        self._owns_store = owns_store

    @property
    def embeddings(self) -> Embeddings:
        return self._embedding

    def close(self) -> None:
        """Close the store if this vector store opened it (:meth:`from_texts` without ``store``)."""
        if self._owns_store:
            self.store.close()

    # -- writes -------------------------------------------------------------

    def add_texts(
        self, texts: Iterable[str], metadatas: list[dict] | None = None, *, ids: list[str] | None = None, **kwargs: Any
    ) -> list[str]:
        """Embed and store ``texts`` in one transaction; returns their ids
        (given, or new UUIDs). An id that exists is replaced, atomically;
        within one call, a later text with the same id wins."""
        if kwargs:
            raise InvalidInputError(f"add_texts: unknown arguments {sorted(kwargs)}")
        texts = list(texts)
        n = len(texts)
        if metadatas is not None and len(metadatas) != n:
            raise InvalidInputError(f"add_texts: {len(metadatas)} metadatas for {n} texts")
        if ids is not None and len(ids) != n:
            raise InvalidInputError(f"add_texts: {len(ids)} ids for {n} texts")
        if n == 0:
            return []
        out_ids = [fresh_id() if ids is None or ids[i] is None else ids[i] for i in range(n)]
        last = {mid: i for i, mid in enumerate(out_ids)}  # a later text with the same id wins
        keep = sorted(last.values())
        vectors = np.asarray(self._embedding.embed_documents([texts[i] for i in keep]), dtype=np.float32)
        items = []
        for j, i in enumerate(keep):
            meta = {} if metadatas is None or metadatas[i] is None else metadatas[i]
            item: dict[str, Any] = {
                "content": texts[i],
                "embedding": vectors[j],
                "id": out_ids[i],
                "memory_type": self.memory_type,
                "source": self.source,
                "metadata": meta,
            }
            item.update(self.fields.store_fields(meta))
            items.append(item)
        # one transaction: existing ids replaced, new ones added, or (bad input) nothing changed
        self.store.upsert_batch(self.namespace, items)
        return out_ids

    def add_documents(self, documents: list[Document], **kwargs: Any) -> list[str]:
        """Store ``documents`` (``ids=`` or each ``Document.id``; the documents are not changed)."""
        ids = kwargs.pop("ids", None)
        if ids is None:
            ids = [doc.id for doc in documents]
        return self.add_texts(
            [d.page_content for d in documents], [d.metadata for d in documents], ids=list(ids), **kwargs
        )

    def delete(self, ids: list[str] | None = None, **kwargs: Any) -> bool | None:
        """Delete the documents ``ids`` (ids not there are skipped). Returns True."""
        if kwargs:
            raise InvalidInputError(f"delete: unknown arguments {sorted(kwargs)}")
        if ids is None:
            raise InvalidInputError("delete needs the ids to delete (deleting a whole namespace is not supported)")
        for mid in ids:
            self.store.delete(self.namespace, mid)
        return True

    # -- reads --------------------------------------------------------------

    def get_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        """The documents with these ids, in that order; missing ids are skipped. Counts no use."""
        out = []
        for mid in ids:
            m = self.store.get(self.namespace, mid)
            if m is not None:
                out.append(_document(m.id, m.content, m.metadata))
        return out

    def _search(self, embedding: Any, k: int, kwargs: dict[str, Any]) -> list[Hit]:
        """The store's hits for a query vector (the search methods' shared part);
        ``kwargs``: the search options and ``filter``."""
        q, flt, options = self._query(embedding, kwargs)
        if flt is None:  # the common case: straight to the store
            return self.store.search(self.namespace, q, k=k, **options)
        record = options.pop("record_access")
        hits = self._candidates(q, k, hit_filter(flt, _document_of), options)
        record_use(self.store, self.namespace, hits, record)
        return hits

    def _query(self, embedding: Any, kwargs: dict[str, Any]) -> tuple[np.ndarray, Any, dict[str, Any]]:
        """The query as the store takes it, the ``filter`` (or None) and the
        search options (unknown ones: InvalidInputError; ``record_access``
        defaulted to the vector store's)."""
        if kwargs:
            unknown = kwargs.keys() - SEARCH_OPTIONS - {"filter"}
            if unknown:
                raise InvalidInputError(
                    f"unknown search arguments {sorted(unknown)}; known: {sorted(SEARCH_OPTIONS | {'filter'})}"
                )
            flt = kwargs.pop("filter", None)
            kwargs.setdefault("record_access", self.record_access)
        else:
            flt, kwargs = None, {"record_access": self.record_access}
        # a float32 array goes as it is (the store's fast path); a list of floats (most Embeddings) is converted
        q = embedding if type(embedding) is np.ndarray else np.asarray(embedding, dtype=np.float32)
        return q, flt, kwargs

    def _candidates(self, q: np.ndarray, k: int, keep: Any, options: dict[str, Any]) -> list[Hit]:
        """The ``k`` best hits that ``keep`` passes (all when None), none of
        them counted as used (the caller records what it returns)."""
        remote = isinstance(self.store, RemoteStore)
        return filtered_hits(
            lambda n: self.store.search(self.namespace, q, k=n, **{**options, "record_access": False}),
            k,
            keep,
            REMOTE_MAX_CANDIDATES if remote else None,
        )

    def similarity_search_with_score_by_vector(
        self, embedding: Sequence[float], k: int = 4, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        """The ``k`` best documents for a query vector with their fused scores
        (higher is better). ``kwargs``: :meth:`TierStore.search`'s
        ``context_tags``, ``memory_types``, ``min_confidence``,
        ``include_warm``, ``include_cold``, ``record_access``, and
        ``filter``: a dict of metadata conditions (equality, ``$eq $ne $gt
        $gte $lt $lte``, dotted paths; see :mod:`tierstore.integrations.filters`)
        or a function of a ``Document`` returning whether to keep it (as
        LangChain's ``InMemoryVectorStore`` takes)."""
        return [(_document(h.id, h.content, h.metadata), h.score) for h in self._search(embedding, k, kwargs)]

    def similarity_search_by_vector(self, embedding: list[float], k: int = 4, **kwargs: Any) -> list[Document]:
        return [_document(h.id, h.content, h.metadata) for h in self._search(embedding, k, kwargs)]

    def similarity_search_with_score(self, query: str, k: int = 4, **kwargs: Any) -> list[tuple[Document, float]]:
        return self.similarity_search_with_score_by_vector(self._embedding.embed_query(query), k, **kwargs)

    def similarity_search(self, query: str, k: int = 4, **kwargs: Any) -> list[Document]:
        # straight to the store, without the scores' tuples (called per query: its overhead is measured
        # against store.search in benchmarks/adapters.py)
        return [
            _document(h.id, h.content, h.metadata) for h in self._search(self._embedding.embed_query(query), k, kwargs)
        ]

    def max_marginal_relevance_search_by_vector(
        self, embedding: Sequence[float], k: int = 4, fetch_k: int = 20, lambda_mult: float = 0.5, **kwargs: Any
    ) -> list[Document]:
        """``k`` documents chosen by maximal marginal relevance among the
        ``fetch_k`` best of the fused ranking (after ``filter``): each next one
        the most relevant to the query and least like those already chosen,
        by their stored vectors (a cold candidate's, which the store does not
        hold, re-embedded from its text). ``lambda_mult`` 1: relevance alone,
        0: diversity alone. Other ``kwargs`` as
        :meth:`similarity_search_with_score_by_vector`; only the returned
        documents count as used (``record_access``)."""
        check_mmr_args(k, fetch_k, lambda_mult)
        q, flt, options = self._query(embedding, dict(kwargs))
        record = options.pop("record_access")
        keep = None if flt is None else hit_filter(flt, _document_of)
        candidates = self._candidates(q, fetch_k, keep, options)
        chosen = mmr(q, candidates, self._vectors(candidates), k, float(lambda_mult))
        record_use(self.store, self.namespace, chosen, record)
        return [_document_of(h) for h in chosen]

    def max_marginal_relevance_search(
        self, query: str, k: int = 4, fetch_k: int = 20, lambda_mult: float = 0.5, **kwargs: Any
    ) -> list[Document]:
        """:meth:`max_marginal_relevance_search_by_vector` for a text query."""
        return self.max_marginal_relevance_search_by_vector(
            self._embedding.embed_query(query), k, fetch_k, lambda_mult, **kwargs
        )

    def _vectors(self, hits: Sequence[Hit]) -> list[np.ndarray]:
        """The stored vector of each hit (one read each; a cold memory, whose
        vector the catalog does not keep, is embedded again from its text)."""
        vectors: list[np.ndarray | None] = []
        for h in hits:
            m = self.store.get(self.namespace, h.id)
            vectors.append(None if m is None or m.embedding is None else np.asarray(m.embedding, np.float32))
        missing = [i for i, v in enumerate(vectors) if v is None]
        if missing:
            again = self._embedding.embed_documents([hits[i].content for i in missing])
            for i, v in zip(missing, again):
                vectors[i] = np.asarray(v, np.float32)
        return vectors  # type: ignore[return-value]

    def _select_relevance_score_fn(self) -> Callable[[float], float]:
        """The fused score is already a relevance in [0, 1] (weighted-sum and product modes)."""
        return lambda score: score

    @classmethod
    def from_texts(
        cls,
        texts: list[str],
        embedding: Embeddings,
        metadatas: list[dict] | None = None,
        *,
        ids: list[str] | None = None,
        store: TierStore | None = None,
        path: str | None = None,
        **kwargs: Any,
    ) -> TierStoreVectorStore:
        """A vector store holding ``texts``. Without ``store``, opens a new one
        at ``path`` (a temporary directory if ``None``) with
        :func:`adapter_policy` and the embedding's dimension, closed by
        :meth:`close`. Other ``kwargs`` go to the constructor."""
        owns = store is None
        if store is None:
            dim = len(embedding.embed_query(texts[0] if texts else "dimension"))
            store = TierStore.open(
                path if path is not None else tempfile.mkdtemp(prefix="tierstore-"), dim=dim, policy=adapter_policy()
            )
        vs = cls(store, embedding, owns_store=owns, **kwargs)
        vs.add_texts(texts, metadatas, ids=ids)
        return vs
