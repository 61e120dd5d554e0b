"""Plain references for :mod:`tierstore.embedding.minilm`, and a tiny random model in its layout.

Written from the published formulas, not from the code they check: BERT's
word-piece tokenizer as its paper's reference implementation describes it
(clean, split CJK characters, strip accents, lower-case, split on whitespace and
punctuation, greedy longest-match word-pieces), and the encoder as a float64
NumPy loop over one text at a time (no padding, no fused operators), then mean
pooling and unit length. Slow by design; only the tests use them.

:func:`write_tiny_model` writes a BERT of random weights (hidden 32, 2 layers,
window 16 word-pieces) with its tokenizer in the folder layout of
sentence-transformers' models, so the ONNX path can be checked against these
references without the real model's package.
"""

from __future__ import annotations

import json
import math
import unicodedata
from collections.abc import Mapping
from pathlib import Path

import numpy as np

_CJK = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B820, 0x2CEAF),
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
)


def _is_control(c: str) -> bool:
    return c not in "\t\n\r" and unicodedata.category(c).startswith("C")


def _is_whitespace(c: str) -> bool:
    return c in "\t\n\r " or c.isspace()


def _is_punctuation(c: str) -> bool:
    cp = ord(c)
    return (
        33 <= cp <= 47
        or 58 <= cp <= 64
        or 91 <= cp <= 96
        or 123 <= cp <= 126
        or unicodedata.category(c).startswith("P")
    )


def basic_tokens(text: str) -> list[str]:
    """BERT's basic tokenizer (uncased): the words and punctuation marks of ``text``."""
    cleaned = "".join(
        " " if _is_whitespace(c) else c for c in text if not (c == "\0" or c == "\ufffd" or _is_control(c))
    )
    spaced = "".join(f" {c} " if any(lo <= ord(c) <= hi for lo, hi in _CJK) else c for c in cleaned)
    stripped = "".join(c for c in unicodedata.normalize("NFD", spaced) if unicodedata.category(c) != "Mn")
    out: list[str] = []
    for word in stripped.lower().split():
        current = ""
        for c in word:
            if _is_punctuation(c):
                if current:
                    out.append(current)
                out.append(c)
                current = ""
            else:
                current += c
        if current:
            out.append(current)
    return out


def wordpiece_ids(
    text: str, vocab: Mapping[str, int], max_tokens: int | None = None, max_chars_per_word: int = 100
) -> list[int]:
    """``[CLS]`` + the word-pieces of ``text`` + ``[SEP]``, as ids; with ``max_tokens``,
    the word-pieces are cut so that the whole fits (the two markers included)."""
    ids: list[int] = []
    for word in basic_tokens(text):
        if len(word) > max_chars_per_word:
            ids.append(vocab["[UNK]"])
            continue
        pieces: list[int] = []
        start = 0
        while start < len(word):
            end = len(word)
            while end > start and (("##" if start else "") + word[start:end]) not in vocab:
                end -= 1
            if end == start:  # no piece matches: the whole word is unknown
                pieces = [vocab["[UNK]"]]
                break
            pieces.append(vocab[("##" if start else "") + word[start:end]])
            start = end
        ids += pieces
    if max_tokens is not None:
        ids = ids[: max_tokens - 2]
    return [vocab["[CLS]"], *ids, vocab["[SEP]"]]


def _layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * gamma + beta


_erf = np.vectorize(math.erf)


def encode_one(weights: Mapping[str, np.ndarray], config: Mapping[str, object], ids: list[int]) -> np.ndarray:
    """The sentence vector of one tokenized text: BERT's encoder in float64,
    the mean of its token vectors, scaled to unit length."""
    w = {k: np.asarray(v, np.float64) for k, v in weights.items()}
    heads = int(config["num_attention_heads"])  # type: ignore[call-overload]
    eps = float(config["layer_norm_eps"])  # type: ignore[arg-type]
    n = len(ids)
    x = (
        w["embeddings.word_embeddings.weight"][ids]
        + w["embeddings.position_embeddings.weight"][:n]
        + w["embeddings.token_type_embeddings.weight"][0]
    )
    x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], eps)
    for i in range(int(config["num_hidden_layers"])):  # type: ignore[call-overload]
        p = f"encoder.layer.{i}."

        def dense(v: np.ndarray, name: str, p: str = p) -> np.ndarray:
            return v @ w[p + name + ".weight"].T + w[p + name + ".bias"]

        q, k, v = (dense(x, f"attention.self.{m}") for m in ("query", "key", "value"))
        d = x.shape[1] // heads
        context = np.empty_like(x)
        for h in range(heads):
            cols = slice(h * d, (h + 1) * d)
            scores = q[:, cols] @ k[:, cols].T / math.sqrt(d)
            scores = np.exp(scores - scores.max(axis=1, keepdims=True))
            context[:, cols] = (scores / scores.sum(axis=1, keepdims=True)) @ v[:, cols]
        x = _layer_norm(
            x + dense(context, "attention.output.dense"),
            w[p + "attention.output.LayerNorm.weight"],
            w[p + "attention.output.LayerNorm.bias"],
            eps,
        )
        inner = dense(x, "intermediate.dense")
        inner = 0.5 * inner * (1.0 + _erf(inner / math.sqrt(2.0)))
        x = _layer_norm(
            x + dense(inner, "output.dense"), w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"], eps
        )
    mean = x.mean(axis=0)
    return mean / np.linalg.norm(mean)


TINY_WORDS = (
    "the",
    "cat",
    "sat",
    "on",
    "mat",
    "alice",
    "lives",
    "in",
    "tokyo",
    "where",
    "does",
    "live",
    "report",
    "is",
    "due",
    "friday",
    "run",
    "##ning",
    "##s",
    "##ed",
    "play",
    "un",
    "##known",
    "cafe",
    "東",
    "京",
)


def write_tiny_model(folder: str | Path, seed: int = 0, max_tokens: int = 16) -> dict[str, np.ndarray]:
    """A BERT of random weights (hidden 32, 4 heads, 2 layers, inner 64, window
    ``max_tokens``) and its uncased word-piece tokenizer (:data:`TINY_WORDS`,
    the letters and punctuation), in sentence-transformers' layout; returns the weights."""
    from safetensors.numpy import save_file
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

    folder = Path(folder)
    (folder / "1_Pooling").mkdir(parents=True, exist_ok=True)
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    vocab_list = (
        specials
        + list(TINY_WORDS)
        + letters
        + ["##" + c for c in letters]
        + list("!?.,'-:")
        + [str(d) for d in range(10)]
        + ["##" + str(d) for d in range(10)]
    )
    vocab = {t: i for i, t in enumerate(dict.fromkeys(vocab_list))}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=True
    )
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
    )
    tok.enable_padding(length=max_tokens)  # as the real file: the embedder must turn it off
    tok.save(str(folder / "tokenizer.json"))

    hidden, inner, layers, positions = 32, 64, 2, 64
    config = {
        "model_type": "bert",
        "hidden_act": "gelu",
        "hidden_size": hidden,
        "num_attention_heads": 4,
        "num_hidden_layers": layers,
        "intermediate_size": inner,
        "max_position_embeddings": positions,
        "layer_norm_eps": 1e-12,
        "type_vocab_size": 2,
        "vocab_size": len(vocab),
    }
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": max_tokens}))
    (folder / "1_Pooling" / "config.json").write_text(
        json.dumps(
            {
                "word_embedding_dimension": hidden,
                "pooling_mode_cls_token": False,
                "pooling_mode_mean_tokens": True,
                "pooling_mode_max_tokens": False,
                "pooling_mode_mean_sqrt_len_tokens": False,
            }
        )
    )

    rng = np.random.default_rng(seed)

    def r(*shape: int, scale: float = 0.3) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    w = {
        "embeddings.word_embeddings.weight": r(len(vocab), hidden, scale=1.0),
        "embeddings.position_embeddings.weight": r(positions, hidden),
        "embeddings.token_type_embeddings.weight": r(2, hidden),
        "embeddings.LayerNorm.weight": 1 + r(hidden, scale=0.1),
        "embeddings.LayerNorm.bias": r(hidden, scale=0.1),
    }
    for i in range(layers):
        p = f"encoder.layer.{i}."
        for name, (rows, cols) in {
            "attention.self.query": (hidden, hidden),
            "attention.self.key": (hidden, hidden),
            "attention.self.value": (hidden, hidden),
            "attention.output.dense": (hidden, hidden),
            "intermediate.dense": (inner, hidden),
            "output.dense": (hidden, inner),
        }.items():
            w[p + name + ".weight"] = r(rows, cols)
            w[p + name + ".bias"] = r(rows, scale=0.1)
        for ln in ("attention.output.LayerNorm", "output.LayerNorm"):
            w[p + ln + ".weight"] = 1 + r(hidden, scale=0.1)
            w[p + ln + ".bias"] = r(hidden, scale=0.1)
    save_file(w, str(folder / "model.safetensors"))
    return w
