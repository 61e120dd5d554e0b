"""Shared pytest fixtures for the tierstore tests (helper functions and constants: tests/helpers.py)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from helpers import DIM, T0
from s3_fixtures import *  # noqa: F401,F403

from tierstore import ManualClock, TierStore


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
