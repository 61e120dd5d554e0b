"""Lifecycle kernels over 10M memories against reading the same bytes."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import record
from numba import njit

from tierstore.kernels import classify, decayed_weight, due_times

N = 10_000_000
NOW = 1_700_000_000.0 + 30 * 86400


@njit(nogil=True, cache=True)
def read_same_bytes(a, b, c):
    """The baseline: read three float64 columns and write one (a + b + c),
    the memory traffic of decayed_weight without its arithmetic."""
    out = np.empty(a.shape[0])
    for i in range(a.shape[0]):
        out[i] = a[i] + b[i] + c[i]
    return out


@pytest.fixture(scope="module")
def columns():
    rng = np.random.default_rng(0)
    w = rng.uniform(0.01, 5.0, N)
    t = 1_700_000_000.0 + rng.uniform(0, 30 * 86400, N)
    h = rng.choice([3600.0, 2 * 86400.0, 7 * 86400.0, 14 * 86400.0], N)
    exp = t + rng.choice([3600.0, 30 * 86400.0, np.inf], N)
    conf = rng.uniform(0, 1, N)
    tier = rng.integers(0, 3, N).astype(np.int64)
    pinned = (rng.random(N) < 0.01).astype(np.int64)
    deletes = (rng.random(N) < 0.8).astype(np.int64)  # a fifth of the memories of a type never deleted
    th = np.array([0.3, 0.1, 0.01, 0.3])
    # compile outside the timings
    read_same_bytes(w[:10], t[:10], h[:10])
    decayed_weight(w[:10], t[:10], h[:10], NOW)
    return w, t, h, exp, conf, tier, pinned, deletes, th


@pytest.mark.benchmark(group="decay-10m")
def test_read_same_bytes(benchmark, columns):
    w, t, h, *_ = columns
    benchmark.pedantic(read_same_bytes, args=(w, t, h), rounds=10, warmup_rounds=1)
    record("decay-10m", "read_same_bytes", benchmark)


@pytest.mark.benchmark(group="decay-10m")
def test_kernel_decayed_weight(benchmark, columns):
    w, t, h, *_ = columns
    out = benchmark.pedantic(decayed_weight, args=(w, t, h, NOW), rounds=10, warmup_rounds=1)
    record("decay-10m", "kernel_decayed_weight", benchmark)
    i = 12345
    assert out[i] == pytest.approx(w[i] * 2 ** (-(NOW - t[i]) / h[i]))


@pytest.mark.benchmark(group="decay-10m")
def test_kernel_due_times(benchmark, columns):
    w, t, h, exp, conf, tier, pinned, deletes, th = columns
    benchmark.pedantic(
        due_times, args=(tier, pinned, deletes, w, t, h, exp, conf, t, 180 * 86400.0, th), rounds=5, warmup_rounds=1
    )
    record("decay-10m", "kernel_due_times", benchmark)


@pytest.mark.benchmark(group="decay-10m")
def test_kernel_classify(benchmark, columns):
    w, t, h, exp, conf, tier, pinned, deletes, th = columns
    benchmark.pedantic(
        classify, args=(NOW, tier, pinned, deletes, w, t, h, exp, conf, t, 180 * 86400.0, th), rounds=5, warmup_rounds=1
    )
    record("decay-10m", "kernel_classify", benchmark)
