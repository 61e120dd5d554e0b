"""Restore-by-id latency over S3 against one raw boto3 ranged GET of the same
bytes on the same endpoint (issue 3; goal: p50 ratio <= 2).

    .venv/bin/python benchmarks/restore_s3.py --memories 2000 --samples 200

Starts moto's standalone server on a free loopback port (the tests' fixture
class), archives ``--memories`` conversation memories (dim 384) of one
namespace, then for ``--samples`` random ids, interleaved: a raw
``get_object(Range=...)`` of the memory's record through a plain boto3 client,
and ``store.restore(ns, ids=[id])`` (catalog lookup, ranged GET, checksum,
decode, catalog commit, insert into the hot index).
"""

from __future__ import annotations

import argparse
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

from tierstore import ManualClock, TierStore  # noqa: E402

DIM = 384


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--memories", type=int, default=2000)
    ap.add_argument("--samples", type=int, default=200)
    args = ap.parse_args(argv)
    os.environ.update(_AWS_ENV)
    os.environ["NO_PROXY"] = os.environ["no_proxy"] = "127.0.0.1,localhost"
    root = Path(tempfile.mkdtemp(prefix="tierstore-restore-"))
    server = MotoServer(_free_port(MotoServer.host), root / "moto.log")
    server.start()
    try:
        client = server.client()
        client.create_bucket(Bucket="bench")
        clock = ManualClock(1_700_000_000.0)
        store = TierStore.open(
            root / "s", dim=DIM, clock=clock, cold="s3://bench/mem", cold_options={"endpoint_url": server.endpoint_url}
        )
        rng = np.random.default_rng(0)
        vecs = rng.normal(size=(args.memories, DIM)).astype(np.float32)
        ids = store.add_batch(
            "u",
            [
                {"content": f"conversation {i} " + "words " * 40, "embedding": v, "memory_type": "conversation"}
                for i, v in enumerate(vecs)
            ],
        )
        clock.advance(2 * 3600)
        report = store.sweep()
        assert report.archived == args.memories, report
        import boto3
        from botocore.config import Config

        raw = boto3.client(
            "s3", endpoint_url=server.endpoint_url, region_name="us-east-1", config=Config(retries={"max_attempts": 1})
        )
        sample = rng.choice(len(ids), size=min(args.samples, len(ids)), replace=False)
        t_raw, t_restore = [], []
        for j in sample.tolist():
            row = store.engine.catalog.get_row("u", ids[j])
            key = "mem/" + row.cold_key
            rng_hdr = f"bytes={row.cold_offset}-{row.cold_offset + row.cold_length - 1}"
            t = time.perf_counter()
            body = raw.get_object(Bucket="bench", Key=key, Range=rng_hdr)["Body"].read()
            t_raw.append(time.perf_counter() - t)
            assert len(body) == row.cold_length
            t = time.perf_counter()
            got = store.restore("u", ids=[ids[j]])
            t_restore.append(time.perf_counter() - t)
            assert got == [ids[j]]
        store.close()
        p50_raw, p50_res = statistics.median(t_raw), statistics.median(t_restore)
        q = lambda xs, p: float(np.quantile(xs, p))  # noqa: E731
        print(
            f"cores {os.cpu_count()}, {args.memories} archived memories (dim {DIM}), {len(sample)} restores by id,"
            f" moto server {server.endpoint_url}"
        )
        print(f"  raw boto3 ranged GET  p50 {p50_raw * 1e3:7.2f} ms   p90 {q(t_raw, 0.9) * 1e3:7.2f} ms")
        print(f"  store.restore(ids=[]) p50 {p50_res * 1e3:7.2f} ms   p90 {q(t_restore, 0.9) * 1e3:7.2f} ms")
        print(f"  ratio p50 restore / raw GET = {p50_res / p50_raw:.2f}")
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
