"""Feeding LangChain precomputed vectors, so that nothing is re-embedded.

LangChain's retrievers take text and embed it through an ``Embeddings``
object. ``LookupEmbeddings`` is an ``Embeddings`` whose "model" is a dict:
the benchmark names every memory ``"m<i>"`` and every query ``"q<j>"`` and
registers the vector under that name beforehand; ``embed_documents`` and
``embed_query`` return the registered vector (a dict lookup, no model).

``HnswVectorStore`` is a minimal LangChain ``VectorStore`` over an hnswlib
index built with the same parameters as tierstore's (ip on normalised
vectors, M=16, ef_construction=200, ef=64), so that the peer runs on the
same ANN engine and the comparison isolates what each layer adds. Its
relevance score is the cosine similarity (what LangChain's Chroma wrapper
returns as ``1 - cosine distance``).

Imported only when langchain-core is installed (the ``bench`` extra).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import hnswlib
import numpy as np
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import VectorStore

from tierstore.bench.common import EF, EF_CONSTRUCTION, M


class LookupEmbeddings(Embeddings):
    def __init__(self, dim: int) -> None:
        self.dim = dim
        self.table: dict[str, np.ndarray] = {}

    def register(self, names: Iterable[str], vectors: np.ndarray) -> None:
        for name, v in zip(names, vectors):
            self.table[name] = v

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self.table[t] for t in texts]  # type: ignore[misc]  # float32 rows; the store takes arrays

    def embed_query(self, text: str) -> list[float]:
        return self.table[text]  # type: ignore[return-value]


class HnswVectorStore(VectorStore):
    def __init__(self, embedding: LookupEmbeddings, capacity: int, *, ef: int = EF) -> None:
        self._embedding = embedding
        self.index = hnswlib.Index(space="ip", dim=embedding.dim)
        self.index.init_index(max_elements=max(capacity, 16), M=M, ef_construction=EF_CONSTRUCTION, random_seed=100)
        self.index.set_ef(ef)
        self.docs: list[Document] = []

    @property
    def embeddings(self) -> Embeddings:
        return self._embedding

    def add_texts(
        self,
        texts: Iterable[str],
        metadatas: list[dict[str, Any]] | None = None,
        *,
        ids: list[str] | None = None,
        **kwargs: Any,
    ) -> list[str]:
        texts = list(texts)
        vecs = np.asarray(self._embedding.embed_documents(texts), np.float32)
        start = len(self.docs)
        labels = np.arange(start, start + len(texts))
        self.index.add_items(vecs, labels, num_threads=-1 if len(texts) >= 1000 else 1)
        self.index.set_num_threads(1)
        for i, t in enumerate(texts):
            self.docs.append(Document(page_content=t, metadata=(metadatas[i] if metadatas else {})))
        return [str(x) for x in labels.tolist()]

    def similarity_search_with_score(self, query: str, k: int = 4, **kwargs: Any) -> list[tuple[Document, float]]:
        q = np.asarray(self._embedding.embed_query(query), np.float32)
        labels, dists = self.index.knn_query(q, k=min(k, len(self.docs)))
        return [(self.docs[int(label)], 1.0 - float(d)) for label, d in zip(labels[0], dists[0])]

    def similarity_search(self, query: str, k: int = 4, **kwargs: Any) -> list[Document]:
        return [d for d, _ in self.similarity_search_with_score(query, k, **kwargs)]

    def _select_relevance_score_fn(self):
        return lambda score: score  # already the cosine similarity

    @classmethod
    def from_texts(
        cls, texts: list[str], embedding: Embeddings, metadatas: list[dict] | None = None, **kwargs: Any
    ) -> HnswVectorStore:
        assert isinstance(embedding, LookupEmbeddings)
        store = cls(embedding, kwargs.get("capacity", len(texts)))
        store.add_texts(texts, metadatas)
        return store
