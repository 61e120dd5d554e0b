"""S3ObjectStore: the cold tier on S3 or any S3-compatible server (MinIO, Ceph, moto).

boto3 is an optional dependency (``tierstore[s3]``) and is imported when a store is
constructed, never at module import. Credentials come from boto3's usual chain
(environment, config files, instance roles) or from explicit ``aws_*`` keyword
arguments, which are handed to the client and never kept, printed or logged here.
"""

from __future__ import annotations

import random
import re
import time
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from tierstore.errors import (
    InvalidInputError,
    MissingDependencyError,
    ObjectNotFoundError,
    ObjectStoreError,
)
from tierstore.optional import install_hint
from tierstore.storage.objectstore._base import (
    url_without_userinfo,
    validate_data,
    validate_key,
    validate_prefix,
    validate_range,
)

__all__ = ["S3ObjectStore"]

# Lenient on purpose (legacy us-east-1 buckets allow upper case and "_"); what matters
# is that a bucket name cannot carry "/" or other URL syntax.
_BUCKET = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{1,254}")
# S3 answers a conditional PUT that races another write to the same key with 409
# ConditionalRequestConflict and documents "retry the upload". botocore does not retry
# 409 for S3, so put_if_absent does, a few times with jittered backoff.
_CONFLICT_RETRIES = 5
_CONFLICT_BACKOFF_S = 0.05
# Server error messages are included in exceptions, but never at unbounded length.
_MAX_SERVER_MESSAGE = 300
# User info ("user:password@") and query strings in URLs quoted by botocore's own
# messages (an endpoint URL, a presigned-style query) are cut from our errors.
_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s\"'`<>@]*@")
_URL_QUERY = re.compile(r"(?i)(\b[a-z][a-z0-9+.-]*://[^\s\"'`<>?]*)\?[^\s\"'`<>]*")


def _scrub(text: str) -> str:
    """``text`` without URL user info or query strings."""
    return _URL_QUERY.sub(r"\1?<redacted>", _URL_USERINFO.sub(r"\1", text))


def _safe_endpoint(url: str | None) -> str | None:
    """The endpoint URL without user info or query, fit for repr and messages."""
    if not url:
        return url
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def _error_fields(exc: Any) -> tuple[str, int | None, str]:
    """(code, HTTP status, server message) of a botocore ClientError."""
    response = getattr(exc, "response", None) or {}
    error = response.get("Error") or {}
    status = (response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
    return str(error.get("Code") or ""), status, str(error.get("Message") or "")


class S3ObjectStore:
    """An :class:`~tierstore.storage.objectstore.ObjectStore` on an S3 bucket, under an optional prefix.

    The key ``k`` is stored as ``prefix/k``. Network errors are retried by botocore
    ("standard" mode, at most ``max_attempts`` tries per request, the first included);
    what still fails raises ObjectStoreError naming the operation and key. A ``client``
    may be passed in: then the timeouts and retries are the client's own. boto3 clients
    are thread-safe, and so is this class.
    """

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        region_name: str | None = None,
        connect_timeout: float = 5.0,
        read_timeout: float = 30.0,
        max_attempts: int = 5,
        client: Any = None,
        **client_kwargs: Any,
    ) -> None:
        if not isinstance(bucket, str) or not _BUCKET.fullmatch(bucket):
            raise InvalidInputError(f"invalid S3 bucket name {bucket!r}")
        if not isinstance(prefix, str):
            raise InvalidInputError(f"S3 prefix must be a str, got {type(prefix).__name__}")
        prefix = prefix.strip("/")
        if prefix:
            validate_key(prefix)  # the prefix obeys the same rules as a key
        for name, value in (("connect_timeout", connect_timeout), ("read_timeout", read_timeout)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise InvalidInputError(f"{name} must be a positive number of seconds, got {value!r}")
        if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
            raise InvalidInputError(f"max_attempts must be an int >= 1, got {max_attempts!r}")

        try:
            if client is None:
                import boto3
            from botocore.config import Config
            from botocore.exceptions import BotoCoreError, ClientError
        except ImportError as exc:
            raise MissingDependencyError(
                f"S3ObjectStore needs boto3, which is not installed: {install_hint('s3')}"
            ) from exc
        self._ClientError = ClientError
        self._BotoCoreError = BotoCoreError

        if client is None:
            config = Config(
                # total_max_attempts counts the first try, so max_attempts=1 means "no
                # retries" (botocore's own retries["max_attempts"] counts retries only
                # and would make 5 mean 6 requests).
                retries={"total_max_attempts": max_attempts, "mode": "standard"},
                connect_timeout=connect_timeout,
                read_timeout=read_timeout,
            )
            user_config = client_kwargs.pop("config", None)
            if user_config is not None:
                config = config.merge(user_config)  # the caller's settings win
            try:
                # A fresh Session per store: boto3's default session is not thread-safe
                # to create clients from, a client made from it is.
                client = boto3.session.Session().client(
                    "s3",
                    endpoint_url=url_without_userinfo(endpoint_url),
                    region_name=region_name,
                    config=config,
                    **client_kwargs,
                )
            except (TypeError, ValueError, BotoCoreError) as exc:
                # Name the options, never their values: they may hold credentials. The
                # error text is kept only if no option value appears in it.
                detail = _scrub(f"{type(exc).__name__}: {exc}")
                secrets = [str(v) for v in client_kwargs.values() if v is not None]
                secrets.append(str(endpoint_url))
                if any(secret and secret in detail for secret in secrets):
                    detail = type(exc).__name__
                raise InvalidInputError(
                    f"cannot create an S3 client for bucket {bucket!r} "
                    f"(endpoint {_safe_endpoint(endpoint_url)!r}, "
                    f"options {sorted(client_kwargs)}): {detail}"
                ) from None
        elif client_kwargs:
            raise InvalidInputError(f"client options {sorted(client_kwargs)} cannot be combined with client=")
        else:
            meta = getattr(client, "meta", None)
            endpoint_url = endpoint_url or getattr(meta, "endpoint_url", None)

        self._client = client
        # Whole-GET attempts when the response body fails mid-stream (see get()).
        self._body_attempts = max_attempts
        self._bucket = bucket
        self._prefix = prefix
        self._base = f"{prefix}/" if prefix else ""
        self._endpoint = _safe_endpoint(endpoint_url)

    # -- introspection ---------------------------------------------------------------

    @property
    def bucket(self) -> str:
        """The bucket name."""
        return self._bucket

    @property
    def prefix(self) -> str:
        """The normalised key prefix ("" for the whole bucket)."""
        return self._prefix

    @property
    def client(self) -> Any:
        """The underlying boto3 S3 client."""
        return self._client

    def __repr__(self) -> str:
        # Bucket, prefix and endpoint only: credentials never appear in repr or str.
        return f"S3ObjectStore(bucket={self._bucket!r}, prefix={self._prefix!r}, endpoint_url={self._endpoint!r})"

    # -- helpers ---------------------------------------------------------------------

    def _key(self, key: str) -> str:
        return self._base + key

    def _error(self, exc: BaseException, op: str, key: str) -> ObjectStoreError:
        """Translate a botocore exception; messages carry no credentials."""
        if isinstance(exc, self._ClientError):
            code, status, message = _error_fields(exc)
            # HEAD has no body, so a missing key there is a bare "404"; NoSuchBucket is
            # also a 404 but is a configuration problem, not a missing object.
            not_found = code in ("NoSuchKey", "NotFound", "404")
            if not_found or (status == 404 and code != "NoSuchBucket"):
                return ObjectNotFoundError(key)
            detail = f"{code or 'error'} (HTTP {status})"
            if message:
                detail += f": {message[:_MAX_SERVER_MESSAGE]}"
        else:
            detail = f"{type(exc).__name__}: {str(exc)[:_MAX_SERVER_MESSAGE]}"
        return ObjectStoreError(f"S3 {op} of {key!r} in {self!r} failed: {_scrub(detail)}")

    def _raise(self, exc: BaseException, op: str, key: str) -> None:
        err = self._error(exc, op, key)
        if isinstance(err, ObjectNotFoundError):
            raise err from None
        raise err from exc

    def _head(self, key: str, op: str) -> dict[str, Any] | None:
        try:
            return self._client.head_object(Bucket=self._bucket, Key=self._key(key))
        except (self._ClientError, self._BotoCoreError) as exc:
            err = self._error(exc, op, key)
            if isinstance(err, ObjectNotFoundError):
                return None
            raise err from exc

    # -- protocol --------------------------------------------------------------------

    def put(self, key: str, data: bytes) -> None:
        """Store ``data`` under ``key`` (a single PUT: S3 makes it atomic)."""
        key = validate_key(key)
        data = validate_data(data)
        try:
            self._client.put_object(Bucket=self._bucket, Key=self._key(key), Body=data)
        except (self._ClientError, self._BotoCoreError) as exc:
            self._raise(exc, "put", key)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Store ``data`` only if ``key`` is free, with a conditional PUT (``If-None-Match: *``).

        S3 evaluates the condition atomically. Two caveats, both inherent to S3: if a
        PUT succeeds but its response is lost, botocore's retry finds the object and
        this returns False for an object this call wrote; and a server that ignores
        If-None-Match (some older S3-compatible servers) would overwrite.
        """
        key = validate_key(key)
        data = validate_data(data)
        for attempt in range(_CONFLICT_RETRIES):
            try:
                self._client.put_object(Bucket=self._bucket, Key=self._key(key), Body=data, IfNoneMatch="*")
                return True
            except self._ClientError as exc:
                code, status, _ = _error_fields(exc)
                if status == 412 or code == "PreconditionFailed":
                    return False
                if status == 409 or code == "ConditionalRequestConflict":
                    time.sleep(_CONFLICT_BACKOFF_S * (2**attempt) * (0.5 + random.random()))
                    continue
                self._raise(exc, "put_if_absent", key)
            except self._BotoCoreError as exc:
                self._raise(exc, "put_if_absent", key)
        raise ObjectStoreError(
            f"S3 put_if_absent of {key!r} in {self!r} failed: ConditionalRequestConflict "
            f"(HTTP 409) on {_CONFLICT_RETRIES} attempts; concurrent writes to this key "
            "kept conflicting"
        )

    def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        """Return bytes ``[start, end)`` with one (ranged) GET; raises ObjectNotFoundError."""
        key = validate_key(key)
        first, end = validate_range(start, end)
        if end is not None and first == end:
            return b""  # HTTP cannot express an empty range; nothing to fetch
        kwargs: dict[str, Any] = {"Bucket": self._bucket, "Key": self._key(key)}
        if first or end is not None:
            # HTTP ranges are inclusive: [first, end) is bytes=first-(end-1).
            kwargs["Range"] = f"bytes={first}-" if end is None else f"bytes={first}-{end - 1}"
        for attempt in range(1, self._body_attempts + 1):
            try:
                response = self._client.get_object(**kwargs)
            except self._ClientError as exc:
                code, status, _ = _error_fields(exc)
                # 416: the range starts at or past the end of an existing object (a
                # missing key is a 404). The protocol answers that with the bytes
                # available: none.
                if status == 416 or code == "InvalidRange":
                    return b""
                self._raise(exc, "get", key)
            except self._BotoCoreError as exc:
                self._raise(exc, "get", key)
            body = response["Body"]
            try:
                return body.read()
            except self._BotoCoreError as exc:
                # botocore retries a request until its response headers arrive, not a
                # body cut short afterwards (connection reset, read timeout, truncated
                # stream). A GET is idempotent, so repeat the whole request.
                if attempt == self._body_attempts:
                    self._raise(exc, "get", key)
            finally:
                body.close()
        raise AssertionError("unreachable")  # pragma: no cover

    def delete(self, key: str) -> bool:
        """Remove the object; True if it existed.

        S3's DELETE succeeds whether or not the object exists, so existence is checked
        with a HEAD first. That pair is not atomic: two concurrent deletes of one key
        may both report True. The object is gone either way.
        """
        key = validate_key(key)
        if self._head(key, "delete") is None:
            return False
        try:
            self._client.delete_object(Bucket=self._bucket, Key=self._key(key))
        except (self._ClientError, self._BotoCoreError) as exc:
            self._raise(exc, "delete", key)
        return True

    def list(self, prefix: str = "") -> list[str]:
        """Return the sorted keys under ``prefix``, following every page of the listing."""
        prefix = validate_prefix(prefix)
        # self._base ends with "/", so the store "tenant" never sees "tenant2/...".
        full = self._base + prefix
        keys: list[str] = []
        try:
            paginator = self._client.get_paginator("list_objects_v2")
            for page in paginator.paginate(Bucket=self._bucket, Prefix=full):
                for obj in page.get("Contents", ()):
                    key = obj["Key"][len(self._base) :]
                    # Objects written by other tools under names get() would reject
                    # are skipped, as the local store skips such files.
                    try:
                        keys.append(validate_key(key))
                    except InvalidInputError:
                        continue
        except (self._ClientError, self._BotoCoreError) as exc:
            self._raise(exc, "list", prefix)
        keys.sort()
        return keys

    def exists(self, key: str) -> bool:
        """True if an object is stored under ``key`` (one HEAD)."""
        return self._head(validate_key(key), "exists") is not None

    def size(self, key: str) -> int:
        """The object's length in bytes (one HEAD); raises ObjectNotFoundError."""
        key = validate_key(key)
        head = self._head(key, "size")
        if head is None:
            raise ObjectNotFoundError(key)
        return int(head["ContentLength"])
