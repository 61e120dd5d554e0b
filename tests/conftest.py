"""Shared pytest fixtures for the tierstore tests."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from s3_fixtures import *  # noqa: F401,F403

from tierstore import ManualClock, TierStore

# wide enough that random unit vectors are unrelated (cosine ~ N(0, 1/8)), as real embeddings of unrelated texts
# are; automatic supersession would otherwise pair them
DIM = 64
T0 = 1_700_000_000.0


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)


@pytest.fixture
def store(tmp_path, clock) -> Iterator[TierStore]:
    s = TierStore.open(tmp_path / "store", dim=DIM, clock=clock)
    yield s
    s.close()


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
