"""How long a shard takes to take over one slot, with the log read ahead or one record at a time.

    .venv/bin/python benchmarks/cluster_take.py [--records 10,40,80] [--get-ms 0,20] [--rounds 3] [--json OUT]

A failover's survivors take the dead shard's slots: each take reads the
slot's newest snapshot and replays its log from there, one object per
acknowledged write batch (up to ``snapshot_every`` = 100 between snapshots).
On S3 every GET is a round trip of tens of milliseconds, so reading the
records one after another costs the take records × round trip; the take now
reads up to ``bucket.READ_AHEAD`` of them at once (:meth:`Bucket.get_many`).

Without Ray: moto's standalone server on loopback (the tests' fixture
class); shard ``a`` writes ``--records`` log records into each of 8 slots (an
``add`` of one 64-d memory each, no snapshot); shard ``b`` takes the slots,
one at a time, as a failover does (no shard is closed: a clean release
would snapshot the slot, so each take replays the whole log, plus one fence
record per earlier take), with ``--get-ms`` added before each GET (a remote
store's latency; ``Shard.set_get_delay``), alternately with the log read one record
at a time (``get_many`` with one in flight: the code before) and read ahead.
Each take is timed from the call to the slot being served. Prints the median
take per (records, latency, reading).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "support"))

from s3_fixtures import _AWS_ENV, MotoServer, _free_port  # noqa: E402

SLOTS = 8


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", default="10,40,80", help="log records per slot, comma-separated")
    ap.add_argument("--get-ms", default="0,20", help="milliseconds added before each GET, comma-separated")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    try:
        records = [int(x) for x in args.records.split(",")]
        delays = [float(x) / 1000.0 for x in args.get_ms.split(",")]
    except ValueError:
        ap.error("--records and --get-ms: comma-separated numbers")
    if any(r < 1 or r > 90 for r in records) or any(d < 0 or d > 1 for d in delays) or args.rounds < 1:
        ap.error(
            "--records in 1..90 (the takes add fence records; at 100 the taker snapshots), "
            "--get-ms in 0..1000, --rounds at least 1"
        )

    os.environ.update(_AWS_ENV)
    os.environ["NO_PROXY"] = os.environ["no_proxy"] = "127.0.0.1,localhost"
    from tierstore.cluster.bucket import Bucket, BucketConfig
    from tierstore.cluster.shard import Shard

    root = Path(tempfile.mkdtemp(prefix="tierstore-take-"))
    server = MotoServer(_free_port(MotoServer.host), root / "moto.log")
    server.start()
    rows = []
    try:
        server.client().create_bucket(Bucket="take")
        rng = np.random.default_rng(0)
        for n in records:
            cfg = BucketConfig("take", f"r{n}", {"endpoint_url": server.endpoint_url, "region_name": "us-east-1"})
            a = Shard("a", cfg, dim=64, num_slots=SLOTS, root=str(root / f"a{n}"))
            a.acquire(list(range(SLOTS)))
            for s in range(SLOTS):
                for i in range(n):
                    a.write(s, f"w{s}-{i}", "add", f"ns{s}", [f"memory {i}", rng.standard_normal(64)], {})
            # a is not closed: a clean release would snapshot the slots, and a failover's dead shard made none
            taker = 0
            for delay in delays:
                times: dict[str, list[float]] = {"one at a time": [], "read ahead": []}
                for _ in range(args.rounds):
                    for reading in times:
                        for s in range(SLOTS):
                            taker += 1
                            b = Shard(f"b{taker}", cfg, dim=64, num_slots=SLOTS, root=str(root / f"b{taker}"))
                            if reading == "one at a time":
                                plain = b.bucket

                                def one(keys, ahead=1, plain=plain):  # noqa: ANN001
                                    return Bucket.get_many(plain, keys, 1)

                                plain.get_many = one  # type: ignore[method-assign]
                            b.set_get_delay(delay)
                            t = time.perf_counter()
                            b.acquire([s])
                            times[reading].append(time.perf_counter() - t)
                for reading, ts in times.items():
                    row = {
                        "records": n,
                        "get_ms": delay * 1000,
                        "reading": reading,
                        "take_ms_p50": round(statistics.median(ts) * 1000, 1),
                        "takes": len(ts),
                    }
                    rows.append(row)
                    print(" ".join(f"{k}={v}" for k, v in row.items()), flush=True)
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
