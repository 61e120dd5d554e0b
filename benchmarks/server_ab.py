"""The server's cost before and after a change, in one run: two servers side by side.

    mkdir /tmp/base && git archive <rev> tierstore kernels | tar -x -C /tmp/base
    mv /tmp/base/kernels /tmp/base/tierstore/
    .venv/bin/python benchmarks/server_ab.py --base /tmp/base

Two stores built alike (``--n`` memories, 384 dims, one namespace: an
hnswlib index). Server A runs the code under ``--base`` (its ``tierstore``
package first on ``PYTHONPATH``), server B this checkout's; A's clients use
A's ``RemoteStore`` (the client is part of what is compared), B's this
one's. The in-process side searches store A, opened read-only.

- ``latency``: each query once in process, once through A and once through
  B, the order rotating per query; ``k=5``, ``record_access=False``; all
  three must return the same ids. p50/p90/p99 of each and of the paired
  differences (remote - in process).
- ``cpu``: CPU per search of each side, this process's and its server's
  (/proc), in blocks of queries with the order rotating; each side's CPU
  (both processes) over the in-process search's.
- ``throughput``: searches per second, rounds rotating through in process
  with 2 threads, 8 client processes on A, 8 on B; the median of each
  per-round ratio to the in-process side.

The load average is printed: the machine is shared, the ratios are measured
side by side.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from server import (  # noqa: E402
    DIM,
    TOKEN,
    Side,
    cpu_rotation,
    in_process_rate,
    load,
    make_store,
    pct,
    print_cpu,
    queries,
    remote_rate,
)


class Server:
    """``tierstore serve`` in a child process, with ``src`` first on its path (None: this checkout)."""

    def __init__(self, path: Path, src: str | None) -> None:
        self.env = {**os.environ, "TIERSTORE_TOKEN": TOKEN}
        if src is not None:
            self.env["PYTHONPATH"] = src
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tierstore.tools.cli", "serve", str(path), "--port", "0", "--no-migrator"],
            stdout=subprocess.PIPE,
            text=True,
            env=self.env,
            cwd=path.parent,
        )
        line = self.proc.stdout.readline()  # type: ignore[union-attr]
        if not line.startswith("serving"):
            raise SystemExit(f"server did not start: {line!r}")
        self.url = line.split(" at ", 1)[1].split()[0]

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=120)


def base_client(src: str) -> type:
    """The RemoteStore class of the code under ``src``, loaded beside this checkout's (with this
    checkout's wire, errors and records: the wire format of both is v1)."""
    path = Path(src) / "tierstore" / "remote" / "client.py"  # since issue 30's layout
    if not path.exists():
        path = Path(src) / "tierstore" / "client.py"
    spec = importlib.util.spec_from_file_location("tierstore._base_client", path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    module.__package__ = "tierstore.remote" if path.parent.name == "remote" else "tierstore"
    sys.modules[spec.name] = module  # type: ignore[union-attr]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module.RemoteStore  # type: ignore[no-any-return]


def bench_latency(path: Path, X: np.ndarray, a: Server, b: Server, base_cls: type, n_queries: int) -> None:
    from tierstore import TierStore
    from tierstore.remote.client import RemoteStore

    Q = queries(X, n_queries + 200)
    local = TierStore.open(path, readonly=True)
    sides = [lambda q: local.search("bench", q, k=5, record_access=False)]
    ra, rb = base_cls(a.url, token=TOKEN), RemoteStore(b.url, token=TOKEN)
    sides += [
        lambda q: ra.search("bench", q, k=5, record_access=False),
        lambda q: rb.search("bench", q, k=5, record_access=False),
    ]
    for q in Q[:200]:
        for side in sides:
            side(q)
    took: list[list[float]] = [[], [], []]
    clock = time.perf_counter
    for i, q in enumerate(Q[200:]):
        ids = []
        for j in range(3):
            which = (i + j) % 3
            t0 = clock()
            hits = sides[which](q)
            took[which].append((clock() - t0) * 1e3)
            ids.append((which, [h.id for h in hits]))
        assert len({tuple(x) for _, x in ids}) == 1, (i, ids)
    local.close()
    ra.close()
    rb.close()
    print(f"\nlatency: {n_queries} queries, k=5, {len(X)} memories x {DIM} dims (hnswlib), order rotating   {load()}")
    print(f"{'':28}{'p50 ms':>9}{'p90 ms':>9}{'p99 ms':>9}")
    rows = [
        ("in process", took[0]),
        ("A (base)", took[1]),
        ("B (this checkout)", took[2]),
        ("A - in process (paired)", [x - y for x, y in zip(took[1], took[0])]),
        ("B - in process (paired)", [x - y for x, y in zip(took[2], took[0])]),
        ("B - A (paired)", [x - y for x, y in zip(took[2], took[1])]),
    ]
    for name, xs in rows:
        print(f"{name:28}{pct(xs, 50):9.3f}{pct(xs, 90):9.3f}{pct(xs, 99):9.3f}")


def bench_cpu(path: Path, X: np.ndarray, a: Server, b: Server, base_cls: type, n: int, block: int = 96) -> None:
    """CPU per search of in process, A and B (client and server), blocks rotating (server.cpu_rotation)."""
    from tierstore import TierStore
    from tierstore.remote.client import RemoteStore

    Q = queries(X, n + 200, seed=4)
    local = TierStore.open(path, readonly=True)
    ra, rb = base_cls(a.url, token=TOKEN), RemoteStore(b.url, token=TOKEN)
    for q in Q[:200]:
        for s in (local, ra, rb):
            s.search("bench", q, k=5, record_access=False)

    def each(store: object) -> object:
        return lambda qs: [store.search("bench", q, k=5, record_access=False) for q in qs]  # type: ignore[attr-defined]

    sides: list[Side] = [
        ("in process", each(local), None),  # type: ignore[list-item]
        ("A (base) RemoteStore.search", each(ra), a.proc.pid),  # type: ignore[list-item]
        ("B (this) RemoteStore.search", each(rb), b.proc.pid),  # type: ignore[list-item]
    ]
    print_cpu(cpu_rotation(sides, Q[200:], block), f"cpu: ms per search, {n} each, blocks of {block} rotating")
    local.close()
    ra.close()
    rb.close()


def bench_throughput(
    path: Path,
    X: np.ndarray,
    a: Server,
    b: Server,
    seconds: float,
    rounds: int,
    clients: int = 8,
    local_threads: int = 2,
) -> None:
    from tierstore import TierStore

    Q = queries(X, 2000, seed=3)
    qfile = path.parent / "queries.npy"
    np.save(qfile, Q)
    local = TierStore.open(path, readonly=True)
    for q in Q[:100]:
        local.search("bench", q, k=5, record_access=False)

    print(
        f"\nthroughput: searches/s, k=5, {seconds:g} s per round; in process {local_threads} threads, "
        f"{clients} client processes per server"
    )
    print(f"{'round':>6}{'in process':>12}{'A (base)':>10}{'B (this)':>10}{'A/in':>7}{'B/in':>7}{'B/A':>7}   load")
    ra, rb, rba = [], [], []
    sides = [
        ("l", lambda: in_process_rate(local, Q, seconds, local_threads)),
        ("a", lambda: remote_rate(a.url, qfile, seconds, clients, a.env)),
        ("b", lambda: remote_rate(b.url, qfile, seconds, clients, b.env)),
    ]
    for r in range(rounds):
        got = {}
        for j in range(3):  # rotating order: no side always runs after the same one
            name, fn = sides[(r + j) % 3]
            got[name] = fn()
        ra.append(got["a"] / got["l"])
        rb.append(got["b"] / got["l"])
        rba.append(got["b"] / got["a"])
        print(
            f"{r + 1:>6}{got['l']:12.0f}{got['a']:10.0f}{got['b']:10.0f}{ra[-1]:7.2f}{rb[-1]:7.2f}{rba[-1]:7.2f}"
            f"   {load()}"
        )
    print(
        f"median ratios: A/in process {statistics.median(ra):.2f}, B/in process {statistics.median(rb):.2f}, "
        f"B/A {statistics.median(rba):.2f}"
    )
    local.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("parts", nargs="*", default=["latency", "cpu", "throughput"])
    ap.add_argument("--base", required=True, help="a directory holding the base revision's tierstore package")
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--queries", type=int, default=1500)
    ap.add_argument("--cpu-queries", type=int, default=3000, help="searches per side in the cpu part")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--rounds", type=int, default=4)
    args = ap.parse_args()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores; {load()}")
    with tempfile.TemporaryDirectory(prefix="tierstore-bench-server-ab-") as tmp:
        pa, pb = Path(tmp) / "a" / "store", Path(tmp) / "b" / "store"
        pa.parent.mkdir()
        X = make_store(pa, args.n)
        shutil.copytree(pa, pb)  # the same memories under the same ids
        a, b = Server(pa, args.base), Server(pb, None)
        try:
            time.sleep(1.0)
            if "latency" in args.parts:
                bench_latency(pa, X, a, b, base_client(args.base), args.queries)
            if "cpu" in args.parts:
                bench_cpu(pa, X, a, b, base_client(args.base), args.cpu_queries)
            if "throughput" in args.parts:
                bench_throughput(pa, X, a, b, args.seconds, args.rounds)
        finally:
            a.stop()
            b.stop()
    print(f"\n{load()}")


if __name__ == "__main__":
    main()
