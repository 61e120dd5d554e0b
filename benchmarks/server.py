"""The server's cost: RemoteStore against in-process search on the same store, and text ingest with MiniLM.

    .venv/bin/python benchmarks/server.py                          # every part
    .venv/bin/python benchmarks/server.py latency cpu throughput   # without MiniLM (no embed extra needed)

- ``latency``: one store of ``--n`` memories (384 dims, one namespace, so an
  hnswlib index) served by ``tierstore serve`` in a child process; this
  process opens the same store read-only beside it. Each query runs once in
  process (``TierStore.search``) and once through ``RemoteStore.search``,
  interleaved (the order alternates), ``k=5``, ``record_access=False`` (a
  read-only store cannot record, and the two must do the same work); both
  must return the same ids. Reports p50/p90/p99 of each and of the paired
  difference (remote - local).
- ``cpu``: CPU time per search: this process's (the client, or the
  in-process search) and the server process's (from /proc), to split a
  remote search's cost into the search, the client's and the server's own
  work; the rest of the wall time is waiting (wake-ups, scheduling). Sides,
  in blocks of queries with the order rotating: in process,
  ``RemoteStore.search`` with msgpack bodies (its default), the same with
  JSON bodies (what any other HTTP client sends), ``search_batch`` of 32
  queries per request, and ``GET /health`` (what any call costs both
  processes before it does anything); and ``TierStore.search_in_memory`` in
  process, the call the server makes for a search on its event loop. The last column is each side's CPU,
  both processes, over the in-process search's.
- ``throughput``: searches per second, rounds alternating: in process with 2
  threads, then 8 client processes each with its own RemoteStore, all for
  ``--seconds``; the ratio per pair of rounds and its median.
- ``ingest``: ``add_batch`` of 100 texts at a time into a store opened with
  ``embedder="minilm"`` (in process), memories per second and the share of
  the time spent in the model (its calls timed); the same texts with their
  vectors given (the store's own share); and the texts through a server
  started with ``--embedder minilm`` (RemoteStore.add_batch, text in).

The machine's load average is printed before and after: on a shared
machine the absolute numbers move; the ratios are measured side by side.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

TOKEN = "bench-token-0123456789abcdef0123"
DIM = 384


def load() -> str:
    return "load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())


def pct(xs: list[float], p: float) -> float:
    return float(np.percentile(np.asarray(xs), p))


def make_store(path: Path, n: int, seed: int = 0) -> np.ndarray:
    """A store of n clustered unit vectors in namespace "bench"; returns the vectors."""
    from tierstore import TierStore

    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(max(n // 50, 1), DIM)).astype(np.float32)
    X = centres[rng.integers(0, len(centres), n)] + 0.35 * rng.normal(size=(n, DIM)).astype(np.float32)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    with TierStore.open(path, dim=DIM) as store:
        for start in range(0, n, 1000):
            store.add_batch(
                "bench", [{"content": f"memory {i}", "embedding": X[i]} for i in range(start, min(start + 1000, n))]
            )
    return X


def queries(X: np.ndarray, m: int, seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    Q = X[rng.integers(0, len(X), m)] + 0.2 * rng.normal(size=(m, DIM)).astype(np.float32)
    return (Q / np.linalg.norm(Q, axis=1, keepdims=True)).astype(np.float32)


class Server:
    """``tierstore serve`` in a child process."""

    def __init__(self, path: Path, *args: str) -> None:
        env = {**os.environ, "TIERSTORE_TOKEN": TOKEN}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tierstore.tools.cli", "serve", str(path), "--port", "0", "--no-migrator", *args],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=path.parent,
        )
        line = self.proc.stdout.readline()  # type: ignore[union-attr]
        if not line.startswith("serving"):
            raise SystemExit(f"server did not start: {line!r}")
        self.url = line.split(" at ", 1)[1].split()[0]
        import urllib3

        for _ in range(1200):
            try:
                if urllib3.request("GET", self.url + "/ready", retries=False).status == 200:
                    return
            except urllib3.exceptions.HTTPError:
                pass
            time.sleep(0.05)
        raise SystemExit("server not ready")

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=120)


def bench_latency(path: Path, X: np.ndarray, server: Server, n_queries: int) -> None:
    from tierstore import TierStore
    from tierstore.remote.client import RemoteStore

    Q = queries(X, n_queries + 200)
    local = TierStore.open(path, readonly=True)
    remote = RemoteStore(server.url, token=TOKEN)
    for q in Q[:200]:  # warm up both: index loaded, kernels compiled, connections open
        local.search("bench", q, k=5, record_access=False)
        remote.search("bench", q, k=5, record_access=False)
    t_local, t_remote, diff = [], [], []
    clock = time.perf_counter
    for i, q in enumerate(Q[200:]):
        order = (0, 1) if i % 2 == 0 else (1, 0)
        took = [0.0, 0.0]
        ids = [None, None]
        for which in order:
            t0 = clock()
            hits = (local if which == 0 else remote).search("bench", q, k=5, record_access=False)
            took[which] = clock() - t0
            ids[which] = [h.id for h in hits]
        assert ids[0] == ids[1], (ids, i)
        t_local.append(took[0] * 1e3)
        t_remote.append(took[1] * 1e3)
        diff.append((took[1] - took[0]) * 1e3)
    local.close()
    remote.close()
    print(f"\nlatency: {len(Q) - 200} queries, k=5, {len(X)} memories x {DIM} dims (hnswlib), interleaved")
    print(f"{'':24}{'p50 ms':>9}{'p90 ms':>9}{'p99 ms':>9}")
    for name, xs in (("in process", t_local), ("RemoteStore", t_remote), ("remote - local (paired)", diff)):
        print(f"{name:24}{pct(xs, 50):9.3f}{pct(xs, 90):9.3f}{pct(xs, 99):9.3f}")


def proc_cpu(pid: int | None) -> float:
    """CPU seconds (user + system) of process ``pid`` so far, from /proc (0 for None)."""
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


Side = tuple[str, Callable[[np.ndarray], Any], "int | None"]


def cpu_rotation(sides: list[Side], Q: np.ndarray, block: int) -> list[tuple[str, float, float, float]]:
    """Per query: wall ms, this process's CPU ms and its server's CPU ms of each side, run in blocks of
    ``block`` queries with the sides' order rotating per block (a side: name, a call taking a block of
    queries, its server's pid or None). The blocks interleave, so the machine's load falls on every
    side alike; /proc counts in clock ticks (10 ms), so a side needs a few seconds in all."""
    acc = {name: [0.0, 0.0, 0.0] for name, _, _ in sides}
    n = 0
    for b, start in enumerate(range(0, len(Q) - block + 1, block)):
        qs = Q[start : start + block]
        for j in range(len(sides)):
            name, call, pid = sides[(b + j) % len(sides)]
            c0, s0, w0 = time.process_time(), proc_cpu(pid), time.perf_counter()
            call(qs)
            c1, s1, w1 = time.process_time(), proc_cpu(pid), time.perf_counter()
            a = acc[name]
            a[0] += w1 - w0
            a[1] += c1 - c0
            a[2] += s1 - s0
        n += len(qs)
    return [(name, *(x / n * 1e3 for x in acc[name])) for name, _, _ in sides]  # type: ignore[misc]


def print_cpu(rows: list[tuple[str, float, float, float]], title: str) -> None:
    """The table of :func:`cpu_rotation`, with each side's CPU (both processes) over the first row's."""
    print(f"\n{title}   {load()}")
    print(f"{'':34}{'wall':>8}{'this process':>14}{'server process':>16}{'both':>8}{'/ in process':>14}")
    base = rows[0][2] + rows[0][3]
    for name, wall, this, server in rows:
        print(f"{name:34}{wall:8.3f}{this:14.3f}{server:16.3f}{this + server:8.3f}{(this + server) / base:14.2f}")


def bench_cpu(path: Path, X: np.ndarray, server: Server, n: int = 3000, block: int = 96, batch: int = 32) -> None:
    from tierstore import TierStore
    from tierstore.remote.client import RemoteStore

    Q = queries(X, n + 200, seed=4)
    local = TierStore.open(path, readonly=True)
    remote = RemoteStore(server.url, token=TOKEN)  # msgpack searches, the default with a server that takes them
    plain = RemoteStore(server.url, token=TOKEN)
    plain._packed = False  # JSON, as any other HTTP client sends
    for q in Q[:200]:
        local.search("bench", q, k=5, record_access=False)
        remote.search("bench", q, k=5, record_access=False)
        plain.search("bench", q, k=5, record_access=False)
    pid = server.proc.pid

    def each(store: Any) -> Callable[[np.ndarray], Any]:
        return lambda qs: [store.search("bench", q, k=5, record_access=False) for q in qs]

    def batched(qs: np.ndarray) -> None:
        for i in range(0, len(qs), batch):
            remote.search_batch("bench", qs[i : i + batch], k=5, record_access=False)

    def in_memory(qs: np.ndarray) -> None:  # the call the server makes on its event loop
        for q in qs:
            assert local.search_in_memory("bench", q, k=5, record_access=False) is not None

    sides: list[Side] = [
        ("in process", each(local), None),
        ("in process, search_in_memory", in_memory, None),
        ("RemoteStore.search (msgpack)", each(remote), pid),
        ("RemoteStore.search (JSON)", each(plain), pid),
        (f"RemoteStore.search_batch of {batch}", batched, pid),
        # the floor of any call through the stack: one keep-alive GET of a tiny JSON body
        ("GET /health (the floor)", lambda qs: [remote._request("GET", "/health") for _ in qs], pid),
    ]
    rows = cpu_rotation(sides, Q[200:], block)
    print_cpu(rows, f"cpu: ms per search (per call for /health), {n} each, blocks of {block} rotating")
    local.close()
    remote.close()
    plain.close()


CLIENT = r"""
import os, sys, time
import numpy as np
from tierstore.remote.client import RemoteStore
url, token, seconds, go, seed = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4], int(sys.argv[5])
Q = np.load(sys.argv[6])
r = RemoteStore(url, token=token)
r.search("bench", Q[0], k=5, record_access=False)
print("ready", flush=True)
while not os.path.exists(go):
    time.sleep(0.001)
n, i, end = 0, seed, time.perf_counter() + seconds
while time.perf_counter() < end:
    r.search("bench", Q[i % len(Q)], k=5, record_access=False)
    n += 1
    i += 7
print(n, flush=True)
"""


def in_process_rate(store: Any, Q: np.ndarray, seconds: float, threads: int) -> float:
    """Searches per second of ``threads`` threads searching ``store`` in this process for ``seconds``."""
    counts = [0] * threads
    end = time.perf_counter() + seconds

    def work(t: int) -> None:
        i = t
        while time.perf_counter() < end:
            store.search("bench", Q[i % len(Q)], k=5, record_access=False)
            counts[t] += 1
            i += 7

    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    t0 = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return sum(counts) / (time.perf_counter() - t0)


def remote_rate(url: str, qfile: Path, seconds: float, clients: int, env: dict[str, str] | None = None) -> float:
    """Searches per second of ``clients`` RemoteStore processes (:data:`CLIENT`) against ``url``, started
    together once all are ready; the queries are read from ``qfile``."""
    go = qfile.parent / f"go-{time.monotonic_ns()}"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CLIENT, url, TOKEN, str(seconds), str(go), str(c), str(qfile)],
            stdout=subprocess.PIPE,
            text=True,
            cwd=qfile.parent,
            env=env,
        )
        for c in range(clients)
    ]
    for p in procs:
        assert p.stdout.readline().strip() == "ready"  # type: ignore[union-attr]
    go.write_text("")
    return sum(int(p.communicate()[0].strip()) for p in procs) / seconds


def bench_throughput(
    path: Path, X: np.ndarray, server: Server, seconds: float, rounds: int, local_threads: int = 2, clients: int = 8
) -> None:
    from tierstore import TierStore

    Q = queries(X, 2000, seed=3)
    qfile = path.parent / "queries.npy"
    np.save(qfile, Q)
    local = TierStore.open(path, readonly=True)
    for q in Q[:100]:
        local.search("bench", q, k=5, record_access=False)

    print(f"\nthroughput: searches/s, k=5, {seconds:g} s per round, rounds alternating")
    left, right = f"in process, {local_threads} threads", f"{clients} RemoteStore clients"
    print(f"{'round':>6}{left:>26}{right:>24}{'ratio':>8}   {load()}")
    ratios = []
    for r in range(rounds):
        a = in_process_rate(local, Q, seconds, local_threads)
        b = remote_rate(server.url, qfile, seconds, clients)
        ratios.append(b / a)
        print(f"{r + 1:>6}{a:26.0f}{b:24.0f}{b / a:8.2f}   {load()}")
    print(f"median ratio {statistics.median(ratios):.2f}")
    local.close()


SUBJECTS = ["Alice", "Bob", "The user", "My sister", "Our team lead", "The landlord", "Grandpa", "The dentist"]
VERBS = ["prefers", "booked", "asked about", "is allergic to", "moved to", "cancelled", "recommended", "forgot"]
OBJECTS = [
    "green tea",
    "a flight to Osaka",
    "the quarterly report",
    "peanuts",
    "a flat in Lisbon",
    "the gym membership",
    "a sushi place downtown",
    "the passport renewal",
    "Python type hints",
    "a hiking trip in the Alps",
    "the 9am standup",
    "oat milk",
]
WHEN = [
    "yesterday",
    "last week",
    "every Monday",
    "since March",
    "this morning",
    "for the third time",
    "again",
    "before the holidays",
]


def texts(n: int) -> list[str]:
    rng = np.random.default_rng(5)
    out = []
    for i in range(n):
        out.append(
            f"{SUBJECTS[rng.integers(len(SUBJECTS))]} {VERBS[rng.integers(len(VERBS))]} "
            f"{OBJECTS[rng.integers(len(OBJECTS))]} {WHEN[rng.integers(len(WHEN))]} (note {i})"
        )
    return out


def bench_ingest(workdir: Path, n: int, batch: int = 100) -> None:
    from tierstore import TierStore
    from tierstore.remote.client import RemoteStore

    T = texts(n)
    with TierStore.open(workdir / "ingest-text", embedder="minilm") as store:
        emb = store.embedder
        model_s = 0.0
        inner = emb._embed_batch

        def timed(batch_texts: list[str]):  # the model's own time, inside the store's add_batch
            nonlocal model_s
            t0 = time.perf_counter()
            out = inner(batch_texts)
            model_s += time.perf_counter() - t0
            return out

        emb._embed_batch = timed  # type: ignore[method-assign]
        store.add_batch("warm", [{"content": t} for t in T[:64]])  # first calls of the model are slower
        model_s = 0.0
        t0 = time.perf_counter()
        for start in range(0, n, batch):
            store.add_batch("u", [{"content": t} for t in T[start : start + batch]])
        total = time.perf_counter() - t0
        in_model = model_s
        V = emb.embed(T)
    with TierStore.open(workdir / "ingest-vectors", dim=DIM) as store:
        store.add_batch("warm", [{"content": t, "embedding": V[i]} for i, t in enumerate(T[:64])])
        t0 = time.perf_counter()
        for start in range(0, n, batch):
            store.add_batch(
                "u", [{"content": t, "embedding": V[start + j]} for j, t in enumerate(T[start : start + batch])]
            )
        vectors_s = time.perf_counter() - t0
    server = Server(workdir / "ingest-remote", "--embedder", "minilm")
    try:
        remote = RemoteStore(server.url, token=TOKEN, timeout=300)
        remote.add_batch("warm", [{"content": t} for t in T[:64]])
        t0 = time.perf_counter()
        for start in range(0, n, batch):
            remote.add_batch("u", [{"content": t} for t in T[start : start + batch]])
        remote_s = time.perf_counter() - t0
        remote.close()
    finally:
        server.stop()
    print(
        f"\ningest: {n} texts (~{statistics.mean(len(t) for t in T):.0f} characters), add_batch of {batch}, "
        f"MiniLM on CPU   {load()}"
    )
    print(f"{'':40}{'memories/s':>12}{'seconds':>10}")
    print(
        f"{'text in, in process (embedder=minilm)':40}{n / total:12.0f}{total:10.2f}   model: {in_model:.2f} s = "
        f"{100 * in_model / total:.0f} % of the time"
    )
    print(f"{'vectors given, in process':40}{n / vectors_s:12.0f}{vectors_s:10.2f}")
    print(f"{'text in, RemoteStore (serve --embedder)':40}{n / remote_s:12.0f}{remote_s:10.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("parts", nargs="*", default=["latency", "cpu", "throughput", "ingest"])
    ap.add_argument("--n", type=int, default=20_000, help="memories in the searched store")
    ap.add_argument("--queries", type=int, default=2000)
    ap.add_argument("--seconds", type=float, default=3.0, help="per throughput round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--ingest", type=int, default=2000, help="texts to ingest")
    ap.add_argument("--server-args", default="", help="extra arguments for tierstore serve (e.g. '--workers 2')")
    args = ap.parse_args()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores; {load()}")
    with tempfile.TemporaryDirectory(prefix="tierstore-bench-server-") as tmp:
        workdir = Path(tmp)
        if {"latency", "cpu", "throughput"} & set(args.parts):
            path = workdir / "store"
            X = make_store(path, args.n)
            server = Server(path, *args.server_args.split())
            try:
                if "latency" in args.parts:
                    bench_latency(path, X, server, args.queries)
                if "cpu" in args.parts:
                    bench_cpu(path, X, server)
                if "throughput" in args.parts:
                    bench_throughput(path, X, server, args.seconds, args.rounds)
            finally:
                server.stop()
        if "ingest" in args.parts:
            bench_ingest(workdir, args.ingest)
    print(f"\n{load()}")


if __name__ == "__main__":
    main()
