"""The cluster's object formats: msgpack (never pickle), with numpy arrays as
an extension type (dtype string, shape, raw little-endian bytes), so a logged
vector replays bit-identical."""

from __future__ import annotations

from typing import Any

import msgpack
import numpy as np

from tierstore.errors import CorruptDataError

__all__ = ["pack", "unpack"]

_EXT_NDARRAY = 1


def _default(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        if obj.dtype.hasobject or obj.dtype.fields is not None:
            raise TypeError(f"cannot encode a numpy array of dtype {obj.dtype} in a cluster record")
        arr = np.ascontiguousarray(obj)
        if arr.dtype.byteorder == ">":
            arr = arr.astype(arr.dtype.newbyteorder("<"))
        return msgpack.ExtType(_EXT_NDARRAY, msgpack.packb([arr.dtype.str, list(arr.shape), arr.tobytes()]))
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    raise TypeError(f"cannot encode {type(obj).__name__} in a cluster record")


def _ext_hook(code: int, data: bytes) -> Any:
    if code == _EXT_NDARRAY:
        dtype, shape, raw = msgpack.unpackb(data)
        return np.frombuffer(raw, dtype=np.dtype(dtype)).reshape(shape).copy()
    return msgpack.ExtType(code, data)


def pack(obj: Any) -> bytes:
    """msgpack bytes of ``obj`` (dicts, lists, str, numbers, bytes, numpy arrays)."""
    return msgpack.packb(obj, default=_default, use_bin_type=True)


def unpack(data: bytes, what: str = "cluster record") -> Any:
    """The object :func:`pack` made; CorruptDataError naming ``what`` if it does not parse."""
    try:
        return msgpack.unpackb(data, ext_hook=_ext_hook, raw=False, strict_map_key=False)
    except (ValueError, TypeError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as exc:
        raise CorruptDataError(f"{what}: not a msgpack record ({exc})") from None
