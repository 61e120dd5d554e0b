"""The cluster's view of its bucket: conditional puts and ETag reads.

Ownership rests on two S3 conditions (no consensus service of our own):
``If-None-Match: *`` (create only: the log's appends, a first lease) and
``If-Match: <etag>`` (compare-and-swap: a lease taken over). A failed
condition is HTTP 412 ``PreconditionFailed``; a race S3 could not order is
409 ``ConditionalRequestConflict``, which AWS documents as "retry". The client
is made by :class:`tierstore.storage.objectstore.S3ObjectStore` (its validation,
timeouts and retries); the settings travel to Ray actors as a plain dict.
"""

from __future__ import annotations

import random
import threading
import time
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from tierstore.errors import ObjectStoreError
from tierstore.storage.objectstore import S3ObjectStore

__all__ = ["Bucket", "BucketConfig"]

_CONFLICT_RETRIES = 6
_CONFLICT_BACKOFF_S = 0.02
# GETs in flight at once when many objects are read in order (a take's log records, a snapshot's
# blobs): each costs a round trip to the object store (tens of ms on S3), which overlap.
READ_AHEAD = 8


@dataclass(frozen=True)
class BucketConfig:
    """Where a cluster keeps its state: ``bucket`` under ``prefix``, and the
    S3 client options (``endpoint_url``, ``region_name``, ...) as keywords of
    :class:`S3ObjectStore`. Plain data, so it can be sent to actors."""

    bucket: str
    prefix: str = ""
    options: dict[str, Any] = field(default_factory=dict)

    def open(self) -> Bucket:
        return Bucket(self)


class Bucket:
    """Conditional object operations on one bucket/prefix; thread-safe.

    Counts its requests (``puts``, ``gets``, ``lists``, ``deletes``) for the benchmarks."""

    def __init__(self, config: BucketConfig) -> None:
        self.config = config
        self._store = S3ObjectStore(config.bucket, config.prefix, **config.options)
        self._client = self._store.client
        self._base = f"{config.prefix.strip('/')}/" if config.prefix.strip("/") else ""
        self._lock = threading.Lock()
        self.puts = 0
        self.gets = 0
        self.lists = 0
        self.deletes = 0
        # added before every PUT / GET, seconds: benchmarks use them to stand in for a remote
        # store's latency on a loopback server (0 in use)
        self.put_delay_s = 0.0
        self.get_delay_s = 0.0
        from botocore.exceptions import BotoCoreError, ClientError

        self._errors = (BotoCoreError, ClientError)

    def _count(self, what: str) -> None:
        with self._lock:
            setattr(self, what, getattr(self, what) + 1)

    def _fail(self, exc: BaseException, op: str, key: str) -> ObjectStoreError:
        return ObjectStoreError(
            f"S3 {op} of {key!r} in bucket {self.config.bucket!r} failed: {type(exc).__name__}: {str(exc)[:300]}"
        )

    @staticmethod
    def _status(exc: BaseException) -> tuple[str, int | None]:
        response = getattr(exc, "response", None) or {}
        code = str((response.get("Error") or {}).get("Code") or "")
        return code, (response.get("ResponseMetadata") or {}).get("HTTPStatusCode")

    def get(self, key: str) -> tuple[bytes, str] | None:
        """(body, ETag) of the object, or ``None`` if there is none."""
        self._count("gets")
        if self.get_delay_s:
            time.sleep(self.get_delay_s)
        try:
            resp = self._client.get_object(Bucket=self.config.bucket, Key=self._base + key)
            return resp["Body"].read(), resp["ETag"]
        except self._errors as exc:
            code, status = self._status(exc)
            if status == 404 or code in ("NoSuchKey", "404"):
                return None
            raise self._fail(exc, "get", key) from None

    def get_many(self, keys: Sequence[str], ahead: int = READ_AHEAD) -> Iterator[tuple[bytes, str] | None]:
        """:meth:`get` of each of ``keys``, yielded in their order, with up to
        ``ahead`` requests in flight. Closing the iterator early cancels the
        requests not yet started (those running finish in the background)."""
        if len(keys) <= 1 or ahead <= 1:
            for key in keys:
                yield self.get(key)
            return
        pool = ThreadPoolExecutor(min(ahead, len(keys)), thread_name_prefix="tierstore-bucket-get")
        try:
            todo = iter(keys)
            pending: deque[Future[tuple[bytes, str] | None]] = deque()
            for key in todo:
                pending.append(pool.submit(self.get, key))
                if len(pending) == ahead:
                    break
            while pending:
                got = pending.popleft().result()
                following = next(todo, None)
                if following is not None:  # the next request starts before this answer is used
                    pending.append(pool.submit(self.get, following))
                yield got
        finally:
            pool.shutdown(wait=False, cancel_futures=True)

    def get_if_changed(self, key: str, etag: str) -> tuple[bool, tuple[bytes, str] | None]:
        """A conditional GET (``If-None-Match: <etag>``): ``(False, None)`` if
        the object still has ``etag`` (HTTP 304, no body sent); else
        ``(True, (body, ETag))``, or ``(True, None)`` if it is gone."""
        self._count("gets")
        try:
            resp = self._client.get_object(Bucket=self.config.bucket, Key=self._base + key, IfNoneMatch=etag)
            return True, (resp["Body"].read(), resp["ETag"])
        except self._errors as exc:
            code, status = self._status(exc)
            if status == 304 or code in ("304", "NotModified"):
                return False, None
            if status == 404 or code in ("NoSuchKey", "404"):
                return True, None
            raise self._fail(exc, "conditional get", key) from None

    def _conditional_put(self, key: str, data: bytes, **condition: str) -> str | None:
        for attempt in range(_CONFLICT_RETRIES):
            self._count("puts")
            if self.put_delay_s:
                time.sleep(self.put_delay_s)
            try:
                resp = self._client.put_object(Bucket=self.config.bucket, Key=self._base + key, Body=data, **condition)
                return str(resp["ETag"])
            except self._errors as exc:
                code, status = self._status(exc)
                if status == 412 or code == "PreconditionFailed":
                    return None
                if status == 409 or code == "ConditionalRequestConflict":
                    time.sleep(_CONFLICT_BACKOFF_S * (2**attempt) * (0.5 + random.random()))
                    continue
                raise self._fail(exc, "conditional put", key) from None
        raise ObjectStoreError(
            f"S3 conditional put of {key!r}: ConditionalRequestConflict {_CONFLICT_RETRIES} times in a row"
        )

    def put_new(self, key: str, data: bytes) -> str | None:
        """Create ``key`` only if absent (``If-None-Match: *``): its ETag, ``None`` on 412."""
        return self._conditional_put(key, data, IfNoneMatch="*")

    def put_cas(self, key: str, data: bytes, etag: str) -> str | None:
        """Replace ``key`` only if its ETag is still ``etag`` (``If-Match``): the new ETag, ``None`` on 412."""
        return self._conditional_put(key, data, IfMatch=etag)

    def put(self, key: str, data: bytes) -> None:
        """An unconditional put (tests: a damaged object)."""
        self._count("puts")
        try:
            self._client.put_object(Bucket=self.config.bucket, Key=self._base + key, Body=data)
        except self._errors as exc:
            raise self._fail(exc, "put", key) from None

    def delete_many(self, keys: list[str]) -> int:
        """Delete these keys (relative to the cluster's prefix), up to 1000 per
        request (``DeleteObjects``); a key already gone counts as deleted.
        Returns how many were deleted; ObjectStoreError if any could not be."""
        done = 0
        for i in range(0, len(keys), 1000):
            chunk = keys[i : i + 1000]
            self._count("deletes")
            try:
                resp = self._client.delete_objects(
                    Bucket=self.config.bucket,
                    Delete={"Objects": [{"Key": self._base + k} for k in chunk], "Quiet": True},
                )
            except self._errors as exc:
                raise self._fail(exc, "delete", chunk[0]) from None
            errors = resp.get("Errors") or []
            if errors:
                first = errors[0]
                raise ObjectStoreError(
                    f"S3 delete of {len(errors)} keys in bucket {self.config.bucket!r} failed, "
                    f"e.g. {first.get('Key')!r}: {first.get('Code')} {first.get('Message')}"
                )
            done += len(chunk)
        return done

    def list(self, prefix: str, start_after: str = "") -> list[str]:
        """Keys under ``prefix`` (relative to the cluster's prefix), sorted, after ``start_after``."""
        keys: list[str] = []
        token: str | None = None
        while True:
            self._count("lists")
            kwargs: dict[str, Any] = {"Bucket": self.config.bucket, "Prefix": self._base + prefix}
            if token:
                kwargs["ContinuationToken"] = token
            elif start_after:
                kwargs["StartAfter"] = self._base + start_after
            try:
                resp = self._client.list_objects_v2(**kwargs)
            except self._errors as exc:
                raise self._fail(exc, "list", prefix) from None
            keys.extend(obj["Key"][len(self._base) :] for obj in resp.get("Contents", ()))
            if not resp.get("IsTruncated"):
                return keys
            token = resp.get("NextContinuationToken")

    def counters(self) -> dict[str, int]:
        with self._lock:
            return {"puts": self.puts, "gets": self.gets, "lists": self.lists, "deletes": self.deletes}
