"""Shared test helpers: constants and vector makers, imported as ``from helpers import ...``
(``tests/`` is on sys.path: ``pythonpath`` in pyproject.toml's ``[tool.pytest.ini_options]``).
Fixtures stay in ``tests/conftest.py``."""

from __future__ import annotations

from pathlib import Path

import numpy as np

# wide enough that random unit vectors are unrelated (cosine ~ N(0, 1/8)), as real embeddings of unrelated texts
# are; automatic supersession would otherwise pair them
DIM = 64
T0 = 1_700_000_000.0


def unit(rng: np.random.Generator, dim: int = DIM) -> np.ndarray:
    v = rng.normal(size=dim).astype(np.float32)
    return v / np.linalg.norm(v)


def near(rng: np.random.Generator, v: np.ndarray, cos: float) -> np.ndarray:
    """A unit vector whose cosine with the unit vector ``v`` is exactly ``cos``."""
    u = unit(rng)
    u -= (u @ v) * v
    u /= np.linalg.norm(u)
    w = cos * v + np.sqrt(1.0 - cos * cos) * u
    return (w / np.linalg.norm(w)).astype(np.float32)


# tests/support: the scripts some tests run as subprocesses (by path), and the modules they import
SUPPORT = Path(__file__).resolve().parent / "support"
