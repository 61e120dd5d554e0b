"""Object stores for the cold tier: one protocol, a local directory and S3.

``open_object_store`` turns a URL, a path or an existing store into an
:class:`ObjectStore`. Backends are looked up by URL scheme in a registry and imported
only when used, so ``s3://`` needs boto3 only when it is asked for (fsspec style).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from tierstore.errors import InvalidInputError
from tierstore.storage.objectstore._base import (
    KEY_MAX_BYTES,
    ObjectStore,
    url_without_userinfo,
    validate_key,
    validate_prefix,
    validate_range,
)
from tierstore.storage.objectstore._local import LocalObjectStore

if TYPE_CHECKING:
    from tierstore.storage.objectstore._s3 import S3ObjectStore

__all__ = [
    "KEY_MAX_BYTES",
    "LocalObjectStore",
    "ObjectStore",
    "S3ObjectStore",
    "open_object_store",
    "url_without_userinfo",
    "validate_key",
    "validate_prefix",
    "validate_range",
]


def __getattr__(name: str) -> Any:
    # S3ObjectStore is importable from here without importing boto3 up front.
    if name == "S3ObjectStore":
        from tierstore.storage.objectstore._s3 import S3ObjectStore

        return S3ObjectStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _no_options(what: str, endpoint_url: Any, region_name: Any, kwargs: dict[str, Any]) -> None:
    given = list(kwargs)
    for name, value in (("endpoint_url", endpoint_url), ("region_name", region_name)):
        if value is not None:
            given.append(name)
    if given:
        raise InvalidInputError(f"options {sorted(given)} do not apply to {what} object stores")


def _open_file(url: str, endpoint_url: Any, region_name: Any, kwargs: dict[str, Any]) -> ObjectStore:
    _no_options("file://", endpoint_url, region_name, kwargs)
    parts = urlsplit(url)
    if parts.netloc not in ("", "localhost") or parts.query or parts.fragment:
        # Not echoed whole: a host part may carry user info.
        raise InvalidInputError(
            f"invalid file URL (host {parts.hostname!r}, query {parts.query!r}): expected file:///absolute/dir"
        )
    path = unquote(parts.path)
    if not os.path.isabs(path):
        raise InvalidInputError(f"invalid file URL {url!r}: the path must be absolute")
    return LocalObjectStore(path)


def _open_s3(url: str, endpoint_url: Any, region_name: Any, kwargs: dict[str, Any]) -> ObjectStore:
    from tierstore.storage.objectstore._s3 import S3ObjectStore

    parts = urlsplit(url)
    if "@" in parts.netloc:  # do not echo the URL: it holds credentials
        raise InvalidInputError(
            "invalid S3 URL: credentials in the URL are not supported; use the environment, "
            "an AWS profile or the aws_access_key_id / aws_secret_access_key options"
        )
    if not parts.netloc or parts.query or parts.fragment:
        raise InvalidInputError(f"invalid S3 URL {url!r}: expected s3://bucket[/prefix]")
    return S3ObjectStore(
        parts.netloc,
        unquote(parts.path),
        endpoint_url=endpoint_url,
        region_name=region_name,
        **kwargs,
    )


# URL scheme -> loader(url, endpoint_url, region_name, other options). A new backend is
# one entry here; its module is imported by the loader, only when that scheme is used.
_REGISTRY: dict[str, Callable[[str, Any, Any, dict[str, Any]], ObjectStore]] = {
    "file": _open_file,
    "s3": _open_s3,
}


def open_object_store(
    target: str | os.PathLike[str] | ObjectStore,
    *,
    endpoint_url: str | None = None,
    region_name: str | None = None,
    **kwargs: Any,
) -> ObjectStore:
    """Return the object store ``target`` names.

    ``target`` is ``file:///abs/dir``, a plain directory path, ``s3://bucket/prefix``
    (extra keyword arguments go to :class:`S3ObjectStore`), or an object that already
    implements :class:`ObjectStore`, returned as is. An unknown URL scheme raises
    InvalidInputError naming it.
    """
    if isinstance(target, os.PathLike):
        target = os.fspath(target)
    if isinstance(target, bytes):
        raise InvalidInputError("object store target must be a str path or URL, not bytes")
    if isinstance(target, str):
        if not target:
            raise InvalidInputError("object store target must not be empty")
        if "://" not in target:  # a plain path (also "C:\\dir" on Windows)
            _no_options("local", endpoint_url, region_name, kwargs)
            return LocalObjectStore(target)
        scheme = target.split("://", 1)[0].lower()
        loader = _REGISTRY.get(scheme)
        if loader is None:
            # Name the scheme only: the rest of a URL may carry user info.
            raise InvalidInputError(f"unknown object store scheme {scheme!r}; known: {', '.join(sorted(_REGISTRY))}")
        return loader(target, endpoint_url, region_name, kwargs)
    if isinstance(target, ObjectStore):
        _no_options(type(target).__name__, endpoint_url, region_name, kwargs)
        return target
    raise InvalidInputError(f"object store target must be a path, a URL or an ObjectStore, got {type(target).__name__}")
