"""Bearer tokens and tenants.

A request carries ``Authorization: Bearer <token>``. Tokens come from a
file (``--token-file``) and/or the environment variable ``TIERSTORE_TOKEN``.
The file holds one token per line, optionally followed by the namespace
prefixes it may reach::

    # token                           tenant prefixes (comma-separated; none = every namespace)
    3f9c...e1                                                     # an operator: everything
    b77a...42                         acme.,acme-                 # only namespaces starting acme. or acme-

A token with prefixes is a tenant's: it reaches only namespaces that start
with one of them, and not the calls that act on the whole store (sweep,
stats, metrics). Tokens are compared in constant time, against every
configured token (no early exit), so timing says nothing about which
characters matched.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tierstore.errors import AuthError, StoreConfigError
from tierstore.rules.validation import check_namespace

ENV_TOKEN = "TIERSTORE_TOKEN"
MIN_TOKEN_LEN = 16  # shorter tokens are guessable; `python -c "import secrets; print(secrets.token_hex(32))"`


@dataclass(frozen=True)
class Principal:
    """Who a request is: ``prefixes`` None reaches every namespace and the store-wide calls."""

    name: str
    prefixes: tuple[str, ...] | None = None

    def check_namespace(self, ns: object) -> str:
        """``ns`` if this principal may reach it (InvalidNamespaceError for a
        malformed one, as the store would say; AuthError outside the tenant)."""
        ns = check_namespace(ns)
        if self.prefixes is not None and not ns.startswith(self.prefixes):
            raise AuthError(f"this token may not reach namespace {ns!r}")
        return ns

    def check_store_wide(self, what: str) -> None:
        if self.prefixes is not None:
            raise AuthError(f"{what} acts on the whole store: a tenant's token may not call it")

    def visible(self, namespaces: list[str]) -> list[str]:
        return namespaces if self.prefixes is None else [ns for ns in namespaces if ns.startswith(self.prefixes)]


#: The principal of an unauthenticated server (--insecure-no-auth) and of in-process or stdio MCP sessions.
EVERYONE = Principal("local")


class TokenTable:
    """The configured tokens. Only their SHA-256 digests are kept in memory."""

    def __init__(self, entries: list[tuple[str, Principal]]) -> None:
        self._entries = [(hashlib.sha256(tok.encode()).digest(), p) for tok, p in entries]

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, header: str | None) -> Principal:
        """The principal of an ``Authorization`` header value; AuthError if none matches."""
        if not header:
            raise AuthError("missing bearer token: send 'Authorization: Bearer <token>'")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise AuthError("malformed Authorization header: expected 'Bearer <token>'")
        digest = hashlib.sha256(token.strip().encode()).digest()
        found: Principal | None = None
        for known, principal in self._entries:  # every entry, always: no timing difference
            if hmac.compare_digest(known, digest) and found is None:
                found = principal
        if found is None:
            raise AuthError("unknown bearer token")
        return found

    @classmethod
    def load(cls, token_file: str | os.PathLike[str] | None, env: dict[str, str] | None = None) -> TokenTable:
        """Tokens from ``token_file`` (see the module's docstring) and ``$TIERSTORE_TOKEN``."""
        environ: Mapping[str, str] = os.environ if env is None else env
        entries: list[tuple[str, Principal]] = []
        if token_file is not None:
            path = Path(token_file)
            try:
                text = path.read_text(encoding="utf-8")
            except OSError as exc:
                raise StoreConfigError(f"cannot read the token file {path}: {exc.strerror}") from None
            for n, line in enumerate(text.splitlines(), 1):
                line = line.split("#", 1)[0].strip()
                if not line:
                    continue
                parts = line.split()
                if len(parts) > 2:
                    raise StoreConfigError(f"{path} line {n}: expected 'TOKEN [PREFIX,PREFIX...]'")
                token = parts[0]
                prefixes = None
                if len(parts) == 2:
                    prefixes = tuple(p for p in parts[1].split(",") if p)
                    if not prefixes:
                        raise StoreConfigError(f"{path} line {n}: empty prefix list")
                entries.append((_checked_token(token, f"{path} line {n}"), Principal(f"{path.name}:{n}", prefixes)))
        if environ.get(ENV_TOKEN):
            entries.append((_checked_token(environ[ENV_TOKEN], f"${ENV_TOKEN}"), Principal(ENV_TOKEN)))
        return cls(entries)


def token_file_exposure(token_file: str | os.PathLike[str] | None) -> str | None:
    """A warning when ``token_file`` may be read (or changed) by users other
    than its owner (group or other permission bits on POSIX); None when it
    is private, or there is no file."""
    if token_file is None or os.name != "posix":
        return None
    try:
        mode = os.stat(token_file).st_mode
    except OSError:
        return None  # TokenTable.load says why it cannot be read
    if mode & 0o077:
        return (
            f"the token file {token_file} is readable or writable by other users (mode {mode & 0o777:o}): "
            f"anyone who reads it can use the server; make it private: chmod 600 {token_file}"
        )
    return None


def _checked_token(token: str, where: str) -> str:
    if len(token) < MIN_TOKEN_LEN:
        raise StoreConfigError(
            f"{where}: a token must be at least {MIN_TOKEN_LEN} characters "
            '(make one with: python -c "import secrets; print(secrets.token_hex(32))")'
        )
    return token


def is_loopback(host: str) -> bool:
    """``host`` is a loopback address (127.0.0.0/8, ::1) or ``localhost``."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
