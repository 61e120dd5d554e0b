"""LangGraph namespace tuples <-> tierstore namespaces, reversibly.

``("users", "alice")`` becomes ``lg.users.alice``: a prefix, then each label
after a ``.``. A label keeps ASCII letters, digits and ``-``; every other
character (``_`` included) becomes ``_`` and two hex digits per UTF-8 byte, so
the encoding is injective (no two tuples share a namespace) and decodes back.
LangGraph labels are non-empty and hold no ``.``, so ``.`` separates them."""

from __future__ import annotations

import re

from tierstore.errors import InvalidNamespaceError
from tierstore.rules.validation import NAMESPACE_RE

_PLAIN = re.compile(r"[A-Za-z0-9-]")
_PREFIX_RE = re.compile(r"[A-Za-z0-9-]{1,32}")


def check_prefix(prefix: str) -> str:
    """The tierstore namespace prefix of a LangGraph store: 1-32 of ``[A-Za-z0-9-]``."""
    if not isinstance(prefix, str) or not _PREFIX_RE.fullmatch(prefix):
        raise InvalidNamespaceError(f"namespace prefix must be 1-32 of [A-Za-z0-9-], got {prefix!r}")
    return prefix


def check_labels(namespace: tuple[str, ...] | list[str], *, allow_empty: bool = False) -> tuple[str, ...]:
    """A LangGraph namespace as a tuple: a tuple or list (LangGraph's own
    stores take both) of non-empty strings without ``.`` or NUL."""
    if not isinstance(namespace, (tuple, list)):
        raise InvalidNamespaceError(f"a namespace is a tuple (or list) of strings, got {type(namespace).__name__}")
    namespace = tuple(namespace)
    if not namespace and not allow_empty:
        raise InvalidNamespaceError("a namespace needs at least one label")
    for label in namespace:
        if not isinstance(label, str) or not label or "." in label or "\x00" in label:
            raise InvalidNamespaceError(
                f"invalid namespace label {label!r} in {namespace!r}: labels are non-empty strings without '.' or NUL"
            )
    return namespace


def encode_label(label: str) -> str:
    out = []
    for ch in label:
        if _PLAIN.fullmatch(ch):
            out.append(ch)
        else:
            out.extend(f"_{b:02x}" for b in ch.encode("utf-8", "surrogatepass"))
    return "".join(out)


def decode_label(text: str) -> str:
    raw = bytearray()
    i = 0
    while i < len(text):
        if text[i] == "_":
            raw.append(int(text[i + 1 : i + 3], 16))
            i += 3
        else:
            raw.extend(text[i].encode("ascii"))
            i += 1
    return raw.decode("utf-8", "surrogatepass")


def encode(prefix: str, namespace: tuple[str, ...] | list[str]) -> str:
    """The tierstore namespace of a LangGraph namespace. Raises
    InvalidNamespaceError if the labels are invalid or the result is longer
    than tierstore's 128 characters."""
    namespace = check_labels(namespace)
    ns = prefix + "".join("." + encode_label(label) for label in namespace)
    if not NAMESPACE_RE.fullmatch(ns):
        raise InvalidNamespaceError(
            f"namespace {namespace!r} is {len(ns)} characters as a tierstore namespace ({ns[:40]}...), more than 128"
        )
    return ns


def decode(prefix: str, ns: str) -> tuple[str, ...] | None:
    """The LangGraph namespace of a tierstore namespace, or ``None`` if ``ns``
    is not one of this prefix's (or not a valid encoding)."""
    if not ns.startswith(prefix + "."):
        return None
    parts = ns[len(prefix) + 1 :].split(".")
    try:
        labels = tuple(decode_label(p) for p in parts)
    except (ValueError, UnicodeDecodeError):
        return None
    if any(not label or "." in label for label in labels) or encode(prefix, labels) != ns:
        return None
    return labels
