"""The seed article's reference design (§4.1–4.4), reproduced for comparison.

``SeedMemorySystem`` is the article's ``MemorySystem`` on ChromaDB with three
changes, none of which touches its algorithms:

* embeddings are given explicitly (the article calls OpenAI; Chroma would
  otherwise try to download a model) — ``retrieve_memories`` takes the query
  vector, and the collection is created with ``embedding_function=None``;
* "now" is a parameter (the article calls ``datetime.now()``), so that a
  simulated clock can drive it;
* the article writes the last access time under ``last_accessed`` in
  ``create_memory`` but reads ``last_access`` in ``retrieve_memories`` and
  ``run_memory_cleanup`` (a KeyError as printed); we store ``last_access``.
  The comparison operators lost in the article's text are restored as the
  prose describes (``now > created_at + ttl``, ``weight < threshold``).

``cleanup_dicts`` runs the same ``run_memory_cleanup`` loop over an in-memory
copy of what ``collection.get`` returns (``{"ids": [...], "metadatas":
[...]}``): the seed's algorithm without any database cost, a lower bound of
what the real thing costs. It needs no optional package.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

DEFAULT_TTL_MAP = {"conversation": 3600, "fact": 2592000, "preference": 604800, "task": 172800}


def seed_metadata(
    mid: str,
    *,
    memory_type: str,
    created: datetime,
    last_access: datetime,
    confidence: float,
    tags: Sequence[str],
    ttl: float | None,
    weight: float = 1.0,
    access_count: int = 0,
) -> dict[str, Any]:
    """The metadata dict of the article's ``create_memory``."""
    return {
        "id": mid,
        "type": memory_type,
        "created_at": created.isoformat(),
        "last_access": last_access.isoformat(),
        "access_count": access_count,
        "confidence": confidence,
        "tags": ",".join(tags) if tags else "",
        "ttl": ttl if ttl else DEFAULT_TTL_MAP.get(memory_type, 2592000),
        "weight": weight,
        "archived": False,
    }


def rerank(initial: Mapping[str, Any], context_tags: Sequence[str] | None, top_k: int, now: datetime) -> list[dict]:
    """Steps 3–7 of the article's ``retrieve_memories``, exactly: recency
    ``0.5 ** (hours / 24)``, context ``1 + 0.2 · matched tags``, similarity
    ``1 - distance``, and their product with confidence and weight."""
    if not initial["documents"]:
        return []
    memories = []
    for i, doc in enumerate(initial["documents"][0]):
        metadata = initial["metadatas"][0][i]
        last_access = datetime.fromisoformat(metadata["last_access"])
        hours_since_access = (now - last_access).total_seconds() / 3600
        recency_factor = 0.5 ** (hours_since_access / 24.0)
        context_factor = 1.0
        if context_tags:
            memory_tags = metadata["tags"].split(",") if metadata["tags"] else []
            common_tags = set(context_tags) & set(memory_tags)
            context_factor = 1.0 + (len(common_tags) * 0.2)
        base_similarity = 1.0 - initial["distances"][0][i]
        combined_weight = (
            base_similarity * recency_factor * metadata["confidence"] * context_factor * metadata["weight"]
        )
        memories.append(
            {
                "id": metadata["id"],
                "content": doc,
                "similarity": base_similarity,
                "recency_factor": recency_factor,
                "confidence": metadata["confidence"],
                "combined_weight": combined_weight,
                "metadata": metadata,
            }
        )
    memories.sort(key=lambda x: x["combined_weight"], reverse=True)
    return memories[:top_k]


def classify(
    all_memories: Mapping[str, Any], now: datetime, archive_threshold: float = 0.1, delete_threshold: float = 0.01
) -> tuple[list[str], list[str]]:
    """The evaluation loop of the article's ``run_memory_cleanup``."""
    to_archive: list[str] = []
    to_delete: list[str] = []
    for i, mem_id in enumerate(all_memories["ids"]):
        metadata = all_memories["metadatas"][i]
        created_at = datetime.fromisoformat(metadata["created_at"])
        last_access = datetime.fromisoformat(metadata["last_access"])
        ttl = metadata.get("ttl", DEFAULT_TTL_MAP.get(metadata["type"], 2592000))
        if now > created_at + timedelta(seconds=ttl):
            to_archive.append(mem_id)
            continue
        hours_since_access = (now - last_access).total_seconds() / 3600
        decayed_weight = metadata["weight"] * (0.5 ** (hours_since_access / (24 * 7)))
        if decayed_weight < delete_threshold:
            if metadata["confidence"] < 0.3:
                to_delete.append(mem_id)
            else:
                to_archive.append(mem_id)
        elif decayed_weight < archive_threshold:
            to_archive.append(mem_id)
    return to_archive, to_delete


class DictCollection:
    """What ``collection.get`` returns, held in memory, with the two
    operations the cleanup needs. No database: a lower bound of the cost."""

    def __init__(self, ids: Sequence[str], metadatas: Sequence[dict[str, Any]]) -> None:
        self.ids = list(ids)
        self.metadatas = [dict(m) for m in metadatas]
        self._pos = {mid: i for i, mid in enumerate(self.ids)}

    def get_not_archived(self) -> dict[str, Any]:
        keep = [i for i, m in enumerate(self.metadatas) if m.get("archived") is not True]
        return {"ids": [self.ids[i] for i in keep], "metadatas": [self.metadatas[i] for i in keep]}

    def update_archived(self, ids: Sequence[str]) -> None:
        for mid in ids:
            self.metadatas[self._pos[mid]]["archived"] = True

    def delete(self, ids: Sequence[str]) -> None:
        for mid in ids:
            self.metadatas[self._pos[mid]]["archived"] = True  # gone from the next get, like a delete


def cleanup_dicts(
    coll: DictCollection, now: datetime, archive_threshold: float = 0.1, delete_threshold: float = 0.01
) -> tuple[int, int]:
    """``run_memory_cleanup`` over the in-memory collection."""
    all_memories = coll.get_not_archived()
    to_archive, to_delete = classify(all_memories, now, archive_threshold, delete_threshold)
    if to_archive:
        coll.update_archived(to_archive)
    if to_delete:
        coll.delete(to_delete)
    return len(to_archive), len(to_delete)


class SeedMemorySystem:
    """The article's ``MemorySystem`` on a real Chroma collection."""

    def __init__(
        self,
        path: str | None,
        *,
        name: str = "agent_memories",
        ef_search: int = 64,
        ef_construction: int = 200,
        max_neighbors: int = 16,
    ) -> None:
        import chromadb
        from chromadb.config import Settings

        settings = Settings(anonymized_telemetry=False)
        self.client = (
            chromadb.PersistentClient(path=path, settings=settings)
            if path is not None
            else chromadb.EphemeralClient(settings=settings)
        )
        # The article: metadata={"hnsw:space": "cosine"}. The same space, plus
        # the graph and search parameters tierstore is measured with.
        self.collection = self.client.create_collection(
            name=name,
            embedding_function=None,
            configuration={
                "hnsw": {
                    "space": "cosine",
                    "ef_search": ef_search,
                    "ef_construction": ef_construction,
                    "max_neighbors": max_neighbors,
                }
            },
        )
        self.default_ttl_map = dict(DEFAULT_TTL_MAP)
        self.max_batch = int(self.client.get_max_batch_size())

    def add_many(
        self,
        ids: Sequence[str],
        embeddings: Any,
        documents: Sequence[str],
        metadatas: Sequence[dict[str, Any]],
        batch: int | None = None,
    ) -> None:
        """``collection.add`` in batches (at most Chroma's maximum batch size)."""
        b = min(batch or self.max_batch, self.max_batch)
        for s in range(0, len(ids), b):
            self.collection.add(
                ids=list(ids[s : s + b]),
                embeddings=embeddings[s : s + b],
                documents=list(documents[s : s + b]),
                metadatas=list(metadatas[s : s + b]),
            )

    def retrieve_memories(
        self,
        query_embedding: Any,
        context_tags: Sequence[str] | None = None,
        top_k: int = 5,
        *,
        now: datetime,
        where: bool = True,
    ) -> list[dict]:
        """§4.3: over-fetch ``top_k * 3`` non-archived memories, rerank in Python.
        ``where=False`` drops the ``archived`` filter (a variant, not the article)."""
        initial = self.collection.query(
            query_embeddings=[query_embedding],
            n_results=top_k * 3,
            **({"where": {"archived": {"$ne": True}}} if where else {}),
        )
        return rerank(initial, context_tags, top_k, now)

    def fetch_not_archived(self, page: int = 5000) -> dict[str, Any]:
        """``collection.get(where={"archived": {"$ne": True}})`` in pages.

        As printed (one call) it fails on chromadb 1.5 once the result is
        large ("too many SQL variables" at 100k memories); the article notes
        that production code should page (生产环境应分页), so we page with
        limit/offset. Nothing is modified while paging."""
        ids: list[str] = []
        metadatas: list[Any] = []
        offset = 0
        while True:
            part = self.collection.get(
                where={"archived": {"$ne": True}}, limit=page, offset=offset, include=["metadatas", "documents"]
            )
            ids += part["ids"]
            metadatas += part["metadatas"]
            if len(part["ids"]) < page:
                return {"ids": ids, "metadatas": metadatas}
            offset += page

    def run_memory_cleanup(
        self, *, now: datetime, archive_threshold: float = 0.1, delete_threshold: float = 0.01
    ) -> tuple[int, int]:
        """§4.4: fetch every non-archived memory (paged, see
        :meth:`fetch_not_archived`), evaluate, update. The update is sent in
        batches of Chroma's maximum batch size (one call as printed fails
        above it)."""
        all_memories = self.fetch_not_archived()
        to_archive, to_delete = classify(all_memories, now, archive_threshold, delete_threshold)
        b = self.max_batch
        for s in range(0, len(to_archive), b):
            part = to_archive[s : s + b]
            self.collection.update(ids=part, metadatas=[{"archived": True} for _ in part])
        for s in range(0, len(to_delete), b):
            self.collection.delete(ids=to_delete[s : s + b])
        return len(to_archive), len(to_delete)
