"""A BERT encoder (the architecture of all-MiniLM-L6-v2) as an ONNX graph, built from its weights.

No exporter and no torch: the graph is written node by node with ``onnx.helper``
from the tensors of the model's ``model.safetensors`` (Hugging Face ``BertModel``
names), using ONNX Runtime's fused transformer operators (``com.microsoft``
domain: ``EmbedLayerNormalization``, ``Attention``, ``SkipLayerNormalization``,
``BiasGelu``), which compute exactly BERT's formulas in float32:

- embeddings: ``LN(word[id] + position[p] + token_type[0])``;
- each layer: ``x1 = LN(x + Attn(x) Wo + bo)``, ``x2 = LN(x1 + GELU(x1 Wi + bi) W2 + b2)``
  with ``Attn`` scaled dot-product attention over the unpadded tokens, GELU the
  exact (erf) one and LN the layer norm with the config's epsilon.

Inputs: ``input_ids`` and ``attention_mask``, int32 ``(batch, seq)``, padding on
the right (mask 1 for a token, 0 for padding). Output ``hidden``: float32
``(batch, seq, hidden_size)``; rows of padding are meaningless (pool with the mask).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

MS = "com.microsoft"  # ONNX Runtime's contrib operators


@dataclass(frozen=True)
class BertConfig:
    """The shape of a BERT encoder (``config.json`` of a Hugging Face ``BertModel``)."""

    hidden_size: int
    num_attention_heads: int
    num_hidden_layers: int
    intermediate_size: int
    max_position_embeddings: int
    layer_norm_eps: float

    @classmethod
    def from_json(cls, cfg: Mapping[str, Any]) -> BertConfig:
        """From a parsed ``config.json``; ValueError if it is not a BERT this graph computes."""
        if cfg.get("model_type") != "bert" or cfg.get("hidden_act") != "gelu":
            raise ValueError(
                f"not a BERT with exact GELU (model_type={cfg.get('model_type')!r}, "
                f"hidden_act={cfg.get('hidden_act')!r})"
            )
        if cfg.get("position_embedding_type", "absolute") != "absolute":
            raise ValueError(f"position_embedding_type {cfg.get('position_embedding_type')!r} is not 'absolute'")
        out = cls(
            int(cfg["hidden_size"]),
            int(cfg["num_attention_heads"]),
            int(cfg["num_hidden_layers"]),
            int(cfg["intermediate_size"]),
            int(cfg["max_position_embeddings"]),
            float(cfg["layer_norm_eps"]),
        )
        if out.hidden_size % out.num_attention_heads:
            raise ValueError(f"hidden_size {out.hidden_size} is not a multiple of {out.num_attention_heads} heads")
        return out


def build_graph(weights: Mapping[str, np.ndarray], cfg: BertConfig) -> bytes:
    """The serialized ONNX model of the encoder, its weights included as initializers.

    ``weights``: the safetensors tensors by their ``BertModel`` names (with or without
    a ``bert.`` prefix); the pooler, if present, is not used. KeyError names a missing tensor."""
    from onnx import TensorProto, helper, numpy_helper

    prefix = "bert." if any(k.startswith("bert.") for k in weights) else ""
    inits: list[Any] = []
    nodes: list[Any] = []

    def w(name: str) -> np.ndarray:
        return np.asarray(weights[prefix + name], np.float32)

    def const(name: str, arr: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(np.ascontiguousarray(arr, np.float32), name))
        return name

    eps = cfg.layer_norm_eps
    # Every token has type 0, so the token-type row is folded into the position
    # table (they are summed before the layer norm): no segment input needed.
    nodes.append(
        helper.make_node(
            "EmbedLayerNormalization",
            [
                "input_ids",
                "",
                const("word_embeddings", w("embeddings.word_embeddings.weight")),
                const(
                    "position_embeddings",
                    w("embeddings.position_embeddings.weight") + w("embeddings.token_type_embeddings.weight")[0],
                ),
                "",
                const("embeddings_ln_gamma", w("embeddings.LayerNorm.weight")),
                const("embeddings_ln_beta", w("embeddings.LayerNorm.bias")),
                "attention_mask",
            ],
            ["x0", "mask_index"],
            domain=MS,
            epsilon=eps,
        )
    )
    x = "x0"
    for i in range(cfg.num_hidden_layers):
        p, n = f"encoder.layer.{i}.", f"l{i}_"
        # Attention takes the three projections side by side: (hidden, 3 hidden), q | k | v.
        wqkv = np.concatenate([w(f"{p}attention.self.{m}.weight") for m in ("query", "key", "value")]).T
        bqkv = np.concatenate([w(f"{p}attention.self.{m}.bias") for m in ("query", "key", "value")])
        nodes += [
            helper.make_node(
                "Attention",
                [x, const(n + "wqkv", wqkv), const(n + "bqkv", bqkv), "mask_index"],
                [n + "attention"],
                domain=MS,
                num_heads=cfg.num_attention_heads,
            ),
            helper.make_node(
                "MatMul",
                [n + "attention", const(n + "wo", w(f"{p}attention.output.dense.weight").T)],
                [n + "attention_out"],
            ),
            helper.make_node(
                "SkipLayerNormalization",
                [
                    n + "attention_out",
                    x,
                    const(n + "ln1_gamma", w(f"{p}attention.output.LayerNorm.weight")),
                    const(n + "ln1_beta", w(f"{p}attention.output.LayerNorm.bias")),
                    const(n + "bo", w(f"{p}attention.output.dense.bias")),
                ],
                [n + "x1"],
                domain=MS,
                epsilon=eps,
            ),
            helper.make_node(
                "MatMul", [n + "x1", const(n + "wi", w(f"{p}intermediate.dense.weight").T)], [n + "inner"]
            ),
            helper.make_node(
                "BiasGelu",
                [n + "inner", const(n + "bi", w(f"{p}intermediate.dense.bias"))],
                [n + "inner_gelu"],
                domain=MS,
            ),
            helper.make_node(
                "MatMul", [n + "inner_gelu", const(n + "w2", w(f"{p}output.dense.weight").T)], [n + "out"]
            ),
            helper.make_node(
                "SkipLayerNormalization",
                [
                    n + "out",
                    n + "x1",
                    const(n + "ln2_gamma", w(f"{p}output.LayerNorm.weight")),
                    const(n + "ln2_beta", w(f"{p}output.LayerNorm.bias")),
                    const(n + "b2", w(f"{p}output.dense.bias")),
                ],
                [n + "x2"],
                domain=MS,
                epsilon=eps,
            ),
        ]
        x = n + "x2"
    nodes.append(helper.make_node("Identity", [x], ["hidden"]))
    graph = helper.make_graph(
        nodes,
        "bert_encoder",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT32, ["batch", "seq"]),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT32, ["batch", "seq"]),
        ],
        [helper.make_tensor_value_info("hidden", TensorProto.FLOAT, ["batch", "seq", cfg.hidden_size])],
        inits,
    )
    # IR version 8 (the first with opset 17), not onnx's newest: an onnx newer than
    # the installed onnxruntime would otherwise write a model it refuses to load.
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)],
        producer_name="tierstore",
        ir_version=8,
    )
    return model.SerializeToString()
