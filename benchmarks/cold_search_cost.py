"""What a search that goes cold costs, over 100 000 archived memories (issue 15).

    .venv/bin/python benchmarks/cold_search_cost.py                 # 100 000 archived, local and S3 (moto)
    .venv/bin/python benchmarks/cold_search_cost.py --n 5000 --queries 50 --no-s3   # smoke run
    .venv/bin/python benchmarks/cold_search_cost.py --json out.json
    .venv/bin/python benchmarks/cold_search_cost.py --no-s3 --ab becfaf2   # against an older revision

One namespace ``u``: ``--n`` clustered 384-d vectors (``conftest.clustered_vectors``,
seed 1) added as ``conversation`` memories ``m0``, ``m1``, ... on a
``ManualClock``, the clock moved past their TTL and ``sweep`` run until
nothing is due (all archived: objects of ``Settings.sweep_batch`` records);
then ``--hot`` ``fact`` memories ``h0``, ... (random directions, far from the
queries) stay hot. Queries are drawn around the same centres (draw seed 2).

Per query, in one loop (the order of the queries shuffled, seed 3):

(a) recall@10: the ids of ``search(k=10, include_cold=True)`` that are
    archived (``m*``) against the exact cosine top 10 over the archived
    vectors (brute force, numpy);
(b) local object store (a directory): ``search(include_cold=False)`` then
    ``search(include_cold=True)`` with the store's vector cache cleared first
    (every candidate read from the archive objects: the honest cold case; the
    OS page cache stays warm), then the same cold search again (cache hits).
    "Time added" is the cold search minus the hot-only search of the same
    query, per query; p50 and p90 of those differences. The fetch part
    (``fetch_vectors`` inside the search, timed by a wrapper) and the distinct
    objects it touched are recorded too;
(c) S3 (moto's standalone server on a loopback port, a second store with the
    same memories): the same cold search, cache cleared, with the fetch part
    timed, then one raw boto3 ``get_object(Range=...)`` of one of the records
    it read, on its own client. Ratios: fetch / (raw GET × distinct objects
    touched) and fetch / raw GET, per query, and of the medians.

Layout (issue 31; ``--no-layout`` skips it): once built, the local store is
closed and copied as the sweeps left it (``asis``), and the original laid
out by code (``compact_cold``, timed); per query both run (b)'s sequence, in
a random order, with this checkout's code: "time added" as swept and laid
out side by side, with the objects each read, and the queries whose hits
both agree on. (b)'s rows are the laid-out store's. The S3 store is laid out
too before its queries.

``--keep DIR --no-s3 --reuse``: search the local stores (laid out, and the
copy as swept) that an earlier run with ``--keep DIR`` left there, without
building them (the same memories; the build and the layout take minutes).

``--ab REV``: the local store is closed, copied (store and archive), the copy
opened by REV's code (``git archive``, as ``benchmarks/search_ab.py`` does)
and, unless ``--no-layout``, laid out by it as this checkout lays out the
original (timed), and the original reopened; per query, each version runs
(b)'s sequence on its own copy, the two versions in a random order, so both
time a query's first cold search on their store (this checkout's are (b)'s
rows); each version's recall@10 and distinct objects read per search (REV's
``fetch_vectors`` wrapped as this checkout's is), and the queries whose hits
(ids, scores to 1e-6, order) both versions agree on.

Targets (issue 31, item 3): recall@10 >= 0.95; time added p50 <= 2.5 ms
(local; issue 15's was 5 ms); fetch <= 2 x one raw ranged GET per distinct
object touched (S3). Nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.append(str(ROOT / "tests" / "support"))  # s3_fixtures
import numpy as np  # noqa: E402
from conftest import clustered_vectors  # noqa: E402  (also sets one BLAS thread)
from search_ab import export_old  # noqa: E402

from tierstore import ManualClock, TierStore  # noqa: E402
from tierstore.progress import Progress  # noqa: E402
from tierstore.tiers import cold_index  # noqa: E402

DIM = 384
K = 10
NS = "u"
START = 1_700_000_000.0


class FetchTimer:
    """Wraps ``cold_index.fetch_vectors`` (what ``fetch_row_vectors`` calls): the seconds of the last call and the
    distinct objects it read (cache misses only)."""

    def __init__(self, inner: Callable[..., np.ndarray]) -> None:
        self.inner = inner
        self.seconds = 0.0
        self.objects = 0
        self.locations: list[Any] = []

    def __call__(self, cold: Any, locations: Any, cache: Any = None, *args: Any, **kw: Any) -> np.ndarray:
        locs = list(locations)
        misses = [loc for loc in locs if cache is None or cache.get(loc.key, loc.offset) is None]
        t0 = time.perf_counter()
        out = self.inner(cold, locs, cache, *args, **kw)
        self.seconds = time.perf_counter() - t0
        self.objects = len({loc.key for loc in misses})
        self.locations = misses
        return out


def build_store(path: Path, X: np.ndarray, hot: np.ndarray, label: str, **open_kw: Any) -> TierStore:
    """A store at ``path`` with ``X`` archived (``m*``) and ``hot`` hot (``h*``)."""
    clock = ManualClock(START)
    store = TierStore.open(path, dim=DIM, clock=clock, **open_kw)
    bar = Progress(len(X), f"{label}: add", unit="")
    chunk = 5000
    for s in range(0, len(X), chunk):
        e = min(len(X), s + chunk)
        store.add_batch(
            NS,
            [
                {"content": f"conversation m{i}", "embedding": X[i], "id": f"m{i}", "memory_type": "conversation"}
                for i in range(s, e)
            ],
        )
        bar.update(e - s)
    bar.close()
    clock.advance(2 * 3600)  # conversation: TTL 1 h
    bar = Progress(len(X), f"{label}: sweep", unit="")
    while True:  # until nothing is due
        rep = store.sweep(max_items=5000)
        if rep.errors:
            raise SystemExit(f"{label}: the sweep failed: {rep.errors[:3]}")
        bar.update(rep.archived, note=f"{rep.remaining_due} due")
        if rep.remaining_due == 0 and rep.examined == 0:
            break
    bar.close()
    store.add_batch(
        NS, [{"content": f"fact h{i}", "embedding": v, "id": f"h{i}", "memory_type": "fact"} for i, v in enumerate(hot)]
    )
    return store


def quantiles(xs: list[float]) -> dict[str, float]:
    a = np.asarray(xs, np.float64)
    return {"p50": float(np.quantile(a, 0.5)), "p90": float(np.quantile(a, 0.9)), "mean": float(a.mean())}


def check_args(args: argparse.Namespace) -> None:
    for name in ("n", "queries", "hot"):
        v = getattr(args, name)
        if v < 1:
            raise SystemExit(f"--{name} must be a positive integer, got {v}")
    if args.n < K:
        raise SystemExit(f"--n must be at least k = {K}, got {args.n}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=100_000, help="archived memories in the namespace")
    ap.add_argument("--hot", type=int, default=50, help="hot memories in the namespace")
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--no-s3", action="store_true", help="skip the S3 (moto) part")
    ap.add_argument("--json", type=Path, help="also write the figures here as JSON")
    ap.add_argument(
        "--ab",
        metavar="REV",
        help="also time the local cold search of revision REV (git archive) on a copy of the store",
    )
    ap.add_argument("--keep", type=Path, help="build the stores under this directory and keep them")
    ap.add_argument(
        "--no-layout",
        action="store_true",
        help="search the archive as the sweeps left it (no compact_cold, no side-by-side copy)",
    )
    ap.add_argument(
        "--reuse",
        action="store_true",
        help="with --keep DIR --no-s3: search the stores an earlier run kept there (laid out, and as swept) "
        "instead of building them",
    )
    args = ap.parse_args(argv)
    check_args(args)
    if args.reuse and (args.keep is None or not args.no_s3 or args.no_layout or args.ab):
        raise SystemExit("--reuse goes with --keep DIR and --no-s3 (and neither --no-layout nor --ab)")
    # a SIGTERM unwinds like Ctrl-C, so the finally below stops the moto server
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    X = clustered_vectors(args.n, DIM, seed=1)
    Q = clustered_vectors(args.queries, DIM, seed=1, draw_seed=2)
    H = np.random.default_rng(4).normal(size=(args.hot, DIM)).astype(np.float32)
    H /= np.linalg.norm(H, axis=1, keepdims=True)
    truth = [set(np.argsort(-(X @ q), kind="stable")[:K].tolist()) for q in Q]

    root = args.keep or Path(tempfile.mkdtemp(prefix="tierstore-coldcost-"))
    root.mkdir(parents=True, exist_ok=True)
    server = None
    stores: list[TierStore] = []
    timer = FetchTimer(cold_index.fetch_vectors)
    cold_index.fetch_vectors = timer  # type: ignore[assignment]
    try:
        t0 = time.perf_counter()
        at = START + 2 * 3600  # build_store's clock at its end: nothing becomes due
        layout_objects, layout_s, old_layout_s = 0, float("nan"), float("nan")
        old_timer = None
        if args.reuse:  # the laid-out store and its copy as swept, kept by an earlier run
            local = TierStore.open(root / "local", cold=str(root / "local-cold"), clock=ManualClock(at))
        else:
            local = build_store(root / "local", X, H, "local", cold=str(root / "local-cold"))
        build_local_s = time.perf_counter() - t0
        old = asis = None
        copies = [] if args.reuse else (["ab"] if args.ab else []) + ([] if args.no_layout else ["asis"])
        if copies:  # copies of the store as the sweeps left it
            local.close()
            for name in copies:
                for part in ("local", "local-cold"):
                    shutil.rmtree(root / f"{name}-{part}", ignore_errors=True)
                    shutil.copytree(root / part, root / f"{name}-{part}")
            local = TierStore.open(root / "local", cold=str(root / "local-cold"), clock=ManualClock(at))
        if not args.no_layout:
            asis = TierStore.open(root / "asis-local", cold=str(root / "asis-local-cold"), clock=ManualClock(at))
            stores.append(asis)
            if not args.reuse:
                t = time.perf_counter()
                layout_objects = local.compact_cold()
                layout_s = time.perf_counter() - t
        if args.ab:  # a copy of the store, opened by REV's code
            export_old(args.ab, root / "ab-code")
            sys.path.insert(0, str(root / "ab-code"))
            import tierstore_old  # type: ignore[import-not-found]

            old = tierstore_old.TierStore.open(
                root / "ab-local", cold=str(root / "ab-local-cold"), clock=tierstore_old.ManualClock(at)
            )
            stores.append(old)
            old_index = sys.modules["tierstore_old.tiers.cold_index"]
            old_timer = FetchTimer(old_index.fetch_vectors)
            old_index.fetch_vectors = old_timer
            if not args.no_layout:  # laid out as the original is, by REV's own code
                t = time.perf_counter()
                old.compact_cold()
                old_layout_s = time.perf_counter() - t
        stores.append(local)
        s3 = raw = None
        prefix = "mem"
        if not args.no_s3:
            from s3_fixtures import _AWS_ENV, MotoServer, _free_port

            os.environ.update(_AWS_ENV)
            os.environ["NO_PROXY"] = os.environ["no_proxy"] = "127.0.0.1,localhost"
            server = MotoServer(_free_port(MotoServer.host), root / "moto.log")
            server.start()
            server.client().create_bucket(Bucket="bench")
            s3 = build_store(
                root / "s3", X, H, "s3", cold=f"s3://bench/{prefix}", cold_options={"endpoint_url": server.endpoint_url}
            )
            stores.append(s3)
            if not args.no_layout:
                s3.compact_cold()
            import boto3
            from botocore.config import Config

            raw = boto3.client(
                "s3",
                endpoint_url=server.endpoint_url,
                region_name="us-east-1",
                config=Config(retries={"max_attempts": 1}),
            )
        build_s = time.perf_counter() - t0
        for st in stores:
            cold_n = st.engine.cold_index.count(NS)
            if cold_n != args.n:
                raise SystemExit(f"{cold_n} of {args.n} memories archived: the sweep did not finish")

        def cold_search(st: TierStore, q: np.ndarray) -> list[Any]:
            return st.search(NS, q, k=K, include_cold=True, record_access=False)

        def hot_search(st: TierStore, q: np.ndarray) -> list[Any]:
            return st.search(NS, q, k=K, include_cold=False, record_access=False)

        for st in stores:  # load the codes, compile, warm up
            for q in Q[:5]:
                hot_search(st, q)
                cold_search(st, q)
        s: dict[str, list[float]] = {
            k: []
            for k in (
                "hot",
                "cold",
                "warm",
                "added",
                "added_warm",
                "fetch_local",
                "objects_local",
                "cold_hits",
                "recall",
                "s3_cold",
                "s3_fetch",
                "s3_objects",
                "raw_get",
                "ratio_per_object",
                "ratio_one_get",
            )
        }
        ab: dict[str, list[float]] = {"this": [], "rev": [], "asis": []}
        rev_objects: list[float] = []
        rev_recall: list[float] = []
        asis_fetch: list[float] = []
        asis_objects: list[float] = []
        same_asis = 0  # queries whose hits (ids, scores to 1e-6, order) the laid-out store and its copy agree on
        same_hits = 0  # queries whose hits (ids, scores to 1e-6, order) both versions agree on
        order = list(range(len(Q)))
        random.Random(3).shuffle(order)
        bar = Progress(len(order), "queries")
        for qi in order:
            q = Q[qi]
            # With --ab, each version runs the same sequence on its own copy, in a random order, so
            # both measure a query's first cold search on their store (caches warmed alike).
            versions = (
                [("this", local)] + ([("rev", old)] if old is not None else []) + ([("asis", asis)] if asis else [])
            )
            random.Random(qi).shuffle(versions)
            got = {}
            for name, st in versions:
                t = time.perf_counter()
                hot_search(st, q)
                t_hot = time.perf_counter() - t
                st.engine.vector_cache.clear()
                t = time.perf_counter()
                hits = cold_search(st, q)
                t_cold = time.perf_counter() - t
                if name == "this":
                    s["fetch_local"].append(timer.seconds)
                    s["objects_local"].append(timer.objects)
                elif name == "asis":
                    asis_fetch.append(timer.seconds)
                    asis_objects.append(timer.objects)
                elif name == "rev" and old_timer is not None:
                    rev_objects.append(old_timer.objects)
                    rev_recall.append(len({int(h.id[1:]) for h in hits if h.id.startswith("m")} & truth[qi]) / K)
                t = time.perf_counter()
                cold_search(st, q)
                t_warm = time.perf_counter() - t
                got[name] = [(h.id, round(h.score, 6)) for h in hits]
                if name != "this":
                    ab[name].append(t_cold - t_hot)
                    continue
                ab["this"].append(t_cold - t_hot)
                s["hot"].append(t_hot)
                s["cold"].append(t_cold)
                s["warm"].append(t_warm)
                s["added"].append(t_cold - t_hot)
                s["added_warm"].append(t_warm - t_hot)
                cold_ids = {int(h.id[1:]) for h in hits if h.id.startswith("m")}
                s["cold_hits"].append(len(cold_ids))
                s["recall"].append(len(cold_ids & truth[qi]) / K)
            if old is not None:
                same_hits += got["this"] == got["rev"]
            if asis is not None:
                same_asis += got["this"] == got["asis"]
            if s3 is not None:
                s3.engine.vector_cache.clear()
                t = time.perf_counter()
                cold_search(s3, q)
                s["s3_cold"].append(time.perf_counter() - t)
                fetch, objs, loc = timer.seconds, timer.objects, timer.locations[0]
                rng_hdr = f"bytes={loc.offset}-{loc.offset + loc.length - 1}"
                t = time.perf_counter()
                body = raw.get_object(Bucket="bench", Key=f"{prefix}/{loc.key}", Range=rng_hdr)["Body"].read()
                t_raw = time.perf_counter() - t
                if len(body) != loc.length:
                    raise SystemExit(f"raw GET returned {len(body)} bytes, expected {loc.length}")
                s["s3_fetch"].append(fetch)
                s["s3_objects"].append(objs)
                s["raw_get"].append(t_raw)
                s["ratio_per_object"].append(fetch / (t_raw * objs))
                s["ratio_one_get"].append(fetch / t_raw)
            bar.update()
        bar.close()
    finally:
        cold_index.fetch_vectors = timer.inner  # type: ignore[assignment]
        if old_timer is not None:
            sys.modules["tierstore_old.tiers.cold_index"].fetch_vectors = old_timer.inner
        for st in stores:
            st.close()
        if server is not None:
            server.stop()
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)

    ms = lambda xs: {k: v * 1e3 for k, v in quantiles(xs).items()}  # noqa: E731
    out: dict[str, Any] = {
        "n_archived": args.n,
        "hot": args.hot,
        "queries": len(Q),
        "k": K,
        "dim": DIM,
        "cpus": os.cpu_count(),
        "load": os.getloadavg(),
        "python": platform.python_version(),
        "build_s": build_s,
        "build_local_s": build_local_s,
        "recall_at_10": float(np.mean(s["recall"])),
        "recall_min": float(np.min(s["recall"])),
        "cold_hits_mean": float(np.mean(s["cold_hits"])),
        "local_ms": {name: ms(s[name]) for name in ("hot", "cold", "warm", "added", "added_warm", "fetch_local")},
        "objects_local": quantiles(s["objects_local"]),
    }
    if asis is not None:
        out["layout_s"] = layout_s
        out["layout_objects"] = layout_objects
        out["asis_ms"] = {"added": ms(ab["asis"]), "fetch_local": ms(asis_fetch)}
        out["asis_objects"] = quantiles(asis_objects)
        out["same_hits_asis"] = same_asis
    if s["s3_cold"]:
        p50 = statistics.median
        out["s3_ms"] = {name: ms(s[name]) for name in ("s3_cold", "s3_fetch", "raw_get")}
        out["s3_objects"] = quantiles(s["s3_objects"])
        out["s3_ratio_per_object"] = quantiles(s["ratio_per_object"])
        out["s3_ratio_one_get"] = quantiles(s["ratio_one_get"])
        out["s3_ratio_of_medians_per_object"] = p50(s["s3_fetch"]) / (p50(s["raw_get"]) * p50(s["s3_objects"]))
        out["s3_ratio_of_medians_one_get"] = p50(s["s3_fetch"]) / p50(s["raw_get"])

    L = out["local_ms"]
    print(
        f"\n# cold_search_cost: {args.n} archived + {args.hot} hot memories in one namespace, dim {DIM}, "
        f"k = {K}, {len(Q)} queries; {os.cpu_count()} cpus, load {os.getloadavg()[0]:.1f}; "
        f"build {build_s:.0f} s\n"
    )
    print("| row | p50 | p90 | mean | target |")
    print("|---|---|---|---|---|")
    print(
        f"| (a) recall@10 of the cold hits vs exact cosine over the archived vectors "
        f"(mean; min {out['recall_min']:.2f}; {out['cold_hits_mean']:.1f} of 10 hits cold) "
        f"| | | {out['recall_at_10']:.3f} | >= 0.95 |"
    )
    rows = [
        ("hot-only search (`include_cold=False`), ms", "hot", ""),
        ("cold search, vector cache cleared, ms", "cold", ""),
        ("cold search again (cache hits), ms", "warm", ""),
        ("(b) time added: cold (cache cleared) − hot-only, per query, ms", "added", "<= 2.5 ms p50"),
        ("(b) time added, cache hits: warm − hot-only, ms", "added_warm", ""),
        ("  of which `fetch_vectors` (cache cleared), ms", "fetch_local", ""),
    ]
    for label, key, target in rows:
        v = L[key]
        print(f"| {label} | {v['p50']:.2f} | {v['p90']:.2f} | {v['mean']:.2f} | {target} |")
    o = out["objects_local"]
    print(f"| distinct objects read per cold search (local) | {o['p50']:.0f} | {o['p90']:.0f} | {o['mean']:.1f} | |")
    if "s3_ms" in out:
        S = out["s3_ms"]
        for label, key in (
            ("S3: cold search, cache cleared, ms", "s3_cold"),
            ("S3: `fetch_vectors` part, ms", "s3_fetch"),
            ("S3: one raw boto3 ranged GET, ms", "raw_get"),
        ):
            v = S[key]
            print(f"| {label} | {v['p50']:.2f} | {v['p90']:.2f} | {v['mean']:.2f} | |")
        o = out["s3_objects"]
        print(f"| S3: distinct objects touched | {o['p50']:.0f} | {o['p90']:.0f} | {o['mean']:.1f} | |")
        r = out["s3_ratio_per_object"]
        print(
            f"| (c) fetch / (raw GET × distinct objects), per query | {r['p50']:.3f} | {r['p90']:.3f} | "
            f"{r['mean']:.3f} | <= 2 |"
        )
        print(f"| (c) the same, of the medians | {out['s3_ratio_of_medians_per_object']:.3f} | | | <= 2 |")
        r = out["s3_ratio_one_get"]
        print(f"| (c) fetch / one raw GET, per query | {r['p50']:.2f} | {r['p90']:.2f} | {r['mean']:.2f} | |")
    if asis is not None:
        A, this = out["asis_ms"], L["added"]
        print(
            "\n| local, cache cleared, same queries interleaved: the archive as swept (a copy) and laid out by "
            + (
                f"`compact_cold` ({out['layout_objects']} objects written in {out['layout_s']:.1f} s) "
                if not args.reuse
                else "`compact_cold` (the stores of an earlier run: `--reuse`) "
            )
            + "| time added p50 ms | p90 | mean | `fetch_vectors` p50 ms | objects read p50 | mean |"
        )
        print("|---|---|---|---|---|---|---|")
        for name, d, f, o in (
            ("as swept", A["added"], A["fetch_local"], out["asis_objects"]),
            ("laid out by code", this, L["fetch_local"], out["objects_local"]),
        ):
            print(
                f"| {name} | {d['p50']:.2f} | {d['p90']:.2f} | {d['mean']:.2f} | {f['p50']:.2f} "
                f"| {o['p50']:.0f} | {o['mean']:.1f} |"
            )
        print(f"| laid out / as swept, time added p50 | {this['p50'] / A['added']['p50']:.3f} | | | | | |")
        print(f"| the same hits (ids, scores, order) from both | {same_asis} of {len(Q)} queries | | | | | |")
    if args.ab:
        out["ab_rev"] = args.ab
        out["ab_ms"] = {name: ms(v) for name, v in ab.items() if v}  # (no "asis" with --no-layout)
        out["ab_same_hits"] = same_hits
        out["ab_layout_s"] = old_layout_s
        out["ab_objects"] = {"this": quantiles(s["objects_local"]), "rev": quantiles(rev_objects)}
        out["ab_recall_at_10"] = {"this": out["recall_at_10"], "rev": float(np.mean(rev_recall))}
        this, rev = out["ab_ms"]["this"], out["ab_ms"]["rev"]
        print(
            f"\n| local cold search, cache cleared (`--ab {args.ab}`: a copy of the store"
            + ("" if args.no_layout else f", laid out by {args.ab} in {old_layout_s:.1f} s")
            + ", same queries, interleaved) | time added p50 ms | p90 | mean | objects read p50 | mean "
            "| recall@10 |"
        )
        print("|---|---|---|---|---|---|---|")
        for name, d, key in ((args.ab, rev, "rev"), ("this checkout", this, "this")):
            o = out["ab_objects"][key]
            print(
                f"| {name} | {d['p50']:.2f} | {d['p90']:.2f} | {d['mean']:.2f} | {o['p50']:.0f} | {o['mean']:.1f} "
                f"| {out['ab_recall_at_10'][key]:.3f} |"
            )
        print(f"| this / {args.ab}, p50 | {this['p50'] / rev['p50']:.3f} | | | | | |")
        print(f"| the same hits (ids, scores, order) from both | {same_hits} of {len(Q)} queries | | | | | |")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
