"""The ``server`` extra's imports, with an install hint when one is missing."""

from __future__ import annotations

import importlib
from types import ModuleType

from tierstore.errors import MissingDependencyError
from tierstore.optional import install_hint


def require(module: str, package: str | None = None, extra: str = "server") -> ModuleType:
    """Import ``module`` or raise MissingDependencyError naming the extra to install."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingDependencyError(
            f"{package or module} is not installed ({exc}); install the {extra!r} extra: {install_hint(extra)}"
        ) from None
