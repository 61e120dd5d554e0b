"""Search overhead of an older version of the code against this checkout,
in one process, call by call.

    .venv/bin/python benchmarks/search_ab.py 83371f4 [--rounds 4] [--read-hits]

On a shared machine the load changes by the minute and one process differs
from the next, so two separate runs of ``search_ratio.py`` cannot tell a few
microseconds apart. This exports ``OLD_REV``'s ``tierstore/`` and ``kernels/``
(``git archive``) as a package ``tierstore_old``, opens two copies of one
saved 100k store (built once under ``.benchmarks/ab-store`` by
``search_ratio.py --keep``), one with each version, and times raw
``knn_query(k=10)`` on each copy's index and each version's ``search`` on
every query in a random order, each call on its own. It prints the medians,
each version's ratio to the raw call on its own index and what its search
adds. (Timed against one shared raw index, identical code came out ~20 µs
apart: the copy the raw calls keep warm flatters its version.) ``--read-hits`` also reads every
hit's id and score; ``--explain`` searches with ``explain=True``. Both
versions must read the store's format.
"""

from __future__ import annotations

import argparse
import io
import random
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from conftest import clustered_vectors  # noqa: E402


def export_old(rev: str, dest: Path) -> None:
    """OLD_REV's package as ``dest/tierstore_old`` (absolute imports renamed)."""
    tar = subprocess.run(
        ["git", "-C", str(ROOT), "archive", rev, "tierstore", "kernels"], check=True, capture_output=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(tar)) as t:
        t.extractall(dest / "src", filter="data")
    pkg = dest / "tierstore_old"
    shutil.copytree(dest / "src" / "tierstore", pkg)
    shutil.copytree(dest / "src" / "kernels", pkg / "kernels")
    for f in pkg.rglob("*.py"):
        f.write_text(re.sub(r"\b(from|import) tierstore\b", r"\1 tierstore_old", f.read_text()))


def forget_policy_key(path: Path, message: str) -> bool:
    """Drop the policy key a PolicyError names ("scoring.keyword_weight: unknown key ...") from the stored
    policy of the store at ``path`` (the old version's copy); whether one was dropped."""
    import json
    import sqlite3

    m = re.match(r"^([\w.]+): unknown key", message)
    if not m:
        return False
    parts = m.group(1).split(".")
    with sqlite3.connect(path / "catalog.sqlite") as conn:
        (text,) = conn.execute("SELECT value FROM meta WHERE key = 'policy'").fetchone()
        policy = json.loads(text)
        d = policy
        for p in parts[:-1]:
            d = d[p]
        if parts[-1] not in d:
            return False
        del d[parts[-1]]
        conn.execute("UPDATE meta SET value = ? WHERE key = 'policy'", (json.dumps(policy, sort_keys=True),))
    return True


def _hot_tier(store):
    """The store's hot tier, in either version (before issue 30: ``store._hot``)."""
    engine = getattr(store, "engine", None)
    return engine.hot if engine is not None else store._hot


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("old_rev")
    ap.add_argument("--rounds", type=int, default=4, help="passes over the 1000 queries")
    ap.add_argument("--read-hits", action="store_true", help="read every hit's id and score")
    ap.add_argument("--explain", action="store_true", help="search(explain=True)")
    ap.add_argument(
        "--far-queries", action="store_true", help="queries around other centres than the data's (weak matches)"
    )
    ap.add_argument(
        "--record-access",
        action="store_true",
        help="search as a caller does by default (record_access=None: the policy's, which counts an access on "
        "every hit); else record_access=False",
    )
    ap.add_argument("--store", type=Path, default=ROOT / ".benchmarks" / "ab-store")
    ap.add_argument(
        "--default-policy",
        action="store_true",
        help="open each copy with its version's Policy.default() (else the policy the store recorded, "
        "read as each version reads it); both copies are then separate from --store",
    )
    args = ap.parse_args(argv)
    if not args.store.exists():
        subprocess.run(
            [
                sys.executable,
                str(ROOT / "benchmarks" / "search_ratio.py"),
                "--n",
                "100000",
                "--rounds",
                "1",
                "--keep",
                str(args.store),
            ],
            check=True,
            capture_output=True,
        )
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        export_old(args.old_rev, tmp)
        sys.path.insert(0, str(tmp))
        shutil.copytree(args.store, tmp / "store-old", ignore=shutil.ignore_patterns("LOCK"))
        new_path = args.store
        if args.default_policy or args.record_access:  # both change the store: never the saved one
            new_path = tmp / "store-new"
            shutil.copytree(args.store, new_path, ignore=shutil.ignore_patterns("LOCK"))
        import tierstore_old  # type: ignore[import-not-found]

        import tierstore

        def open_store(mod, path):
            hot = mod.HotSettings(hnsw_m=16, hnsw_ef_construction=200, hnsw_ef_search=64)
            policy = mod.Policy.default() if args.default_policy else None
            for _ in range(20):
                try:
                    return mod.TierStore.open(
                        path, clock=mod.ManualClock(), settings=mod.Settings(hot=hot), policy=policy
                    )
                except mod.errors.PolicyError as exc:  # a policy key newer than OLD_REV: dropped from its copy
                    if not forget_policy_key(path, str(exc)):
                        raise
            raise RuntimeError("the stored policy still has keys the old version does not know")

        new, old = open_store(tierstore, new_path), open_store(tierstore_old, tmp / "store-old")
        try:
            # Each version is timed against raw calls on its own index: the two
            # copies of the graph sit in different memory, and one warmed by
            # the raw calls would flatter the version that searches it.
            stores = {"old": old, "new": new}
            index = {w: _hot_tier(st).ensure("ns").index for w, st in stores.items()}
            queries = (  # like search_ratio.py's data, or around other centres
                clustered_vectors(1000, 384, seed=2)
                if args.far_queries
                else clustered_vectors(1000, 384, seed=1, draw_seed=2)
            )
            record = None if args.record_access else False
            for q in queries[:30]:
                for st in stores.values():
                    st.search("ns", q, k=10, record_access=record, explain=args.explain)
            tp = time.perf_counter_ns
            res: dict[tuple[str, str], list[int]] = {(w, kind): [] for w in stores for kind in ("raw", "search")}
            rng = random.Random(0)
            for _ in range(args.rounds):
                calls = [(i, key) for i in range(len(queries)) for key in res]
                rng.shuffle(calls)
                for i, (w, kind) in calls:
                    q = queries[i]
                    if kind == "raw":
                        t = tp()
                        index[w].knn_query(q, 10)
                    else:
                        t = tp()
                        hits = stores[w].search("ns", q, k=10, record_access=record, explain=args.explain)
                        if args.read_hits:
                            for h in hits:
                                _ = h.id, h.score
                    res[w, kind].append(tp() - t)
        finally:
            new.close()
            old.close()
    m = {key: float(np.median(v)) / 1e3 for key, v in res.items()}
    print(
        f"{len(queries) * args.rounds} calls of each kind, shuffled"
        f"{', reading every hit' if args.read_hits else ''}{', explain=True' if args.explain else ''}"
        f"{', far queries' if args.far_queries else ''}{', record_access=None' if args.record_access else ''}"
    )
    for w in ("old", "new"):
        raw, search = m[w, "raw"], m[w, "search"]
        print(
            f"  {w} ({args.old_rev if w == 'old' else 'this checkout'}): raw knn_query {raw:.1f} us, "
            f"search {search:.1f} us: ratio {search / raw:.3f}, adds {search - raw:.1f} us"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
