"""A BERT encoder on fuel (inference): weights from a Hugging Face ``model.safetensors``.

Node economy: q, k and v come from one fused matmul plus one bias add, the attention scale is
folded into the q weights, padding is an additive mask broadcast over heads and queries, and
mean pooling over the mask is one batched matmul. A batch shape seen twice is captured with
fuel.jit and replayed afterwards (no graph building or planning).
"""

from __future__ import annotations

import json
import os
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import fuel
from fuel.models.common import ModelFormatError, require
from fuel.models.file_checks import check_bert_config, check_bert_weights, read_safetensors
from fuel.nn.functional import gelu, layer_norm, softmax
from fuel.runtime.replay import HeldArena
from fuel.tensor import Tensor

MAX_CAPTURED_SHAPES = 8  # (batch, length) shapes whose captured plans are kept for replay


@dataclass(frozen=True)
class BertConfig:
    """The hyper-parameters BERT's ``config.json`` holds (the ones inference needs)."""

    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    intermediate_size: int
    max_position_embeddings: int
    layer_norm_eps: float
    hidden_act: str

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> BertConfig:
        try:
            values = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError) as error:
            raise ModelFormatError(f"cannot read the BERT config {path}: {error}") from None
        check_bert_config(path, values)
        if values.get("hidden_act", "gelu") not in ("gelu", "gelu_new", "gelu_pytorch_tanh"):
            raise ModelFormatError(f"unsupported BERT activation {values['hidden_act']!r}")
        try:
            return cls(values["vocab_size"], values["hidden_size"], values["num_hidden_layers"],
                       values["num_attention_heads"], values["intermediate_size"],
                       values["max_position_embeddings"], values.get("layer_norm_eps", 1e-12),
                       values.get("hidden_act", "gelu"))
        except KeyError as error:
            raise ModelFormatError(f"the BERT config {path} lacks {error}") from None


@dataclass
class BertLayer:
    """One encoder layer; matrices transposed to (in, out)."""

    qkv_t: Tensor
    qkv_bias: Tensor
    o_t: Tensor
    o_bias: Tensor
    attn_norm: tuple[Tensor, Tensor]
    up_t: Tensor
    up_bias: Tensor
    down_t: Tensor
    down_bias: Tensor
    ffn_norm: tuple[Tensor, Tensor]


def _strip(name: str) -> str:
    return name[len("bert."):] if name.startswith("bert.") else name


class BertEncoder:
    """BERT's embeddings and encoder stack; ``forward`` gives the last hidden states."""

    def __init__(self, config: BertConfig, arrays: dict[str, np.ndarray], device=None) -> None:
        self.config = config
        self.device = device
        self._replays: OrderedDict = OrderedDict()
        # The shapes' captures share one arena (they never run at once): a new shape reuses
        # the pages earlier shapes faulted in, and the kept captures hold one slab, not eight.
        self._arena = HeldArena()
        # Repeated shapes replay captured plans (fuel.jit); False builds and realizes each time.
        self.use_jit = True
        arrays = {_strip(name): value for name, value in arrays.items()}

        def get(name: str) -> np.ndarray:
            if name not in arrays:
                raise ModelFormatError(f"the BERT weights lack '{name}'")
            return np.asarray(arrays[name], dtype=np.float32)

        def leaf(array: np.ndarray) -> Tensor:
            return fuel.from_numpy(np.asarray(array, dtype=np.float32), device=device,
                                   constant=True)

        def transposed(array: np.ndarray) -> Tensor:
            """``array.T`` as a view of ``array`` stored as given (a Linear weight's (out, in)
            rows: each output's weights contiguous, streamed once by a dot-form matmul)."""
            return leaf(array).transpose(0, 1)

        scale = np.float32(1.0 / np.sqrt(config.hidden_size // config.num_heads))
        self.word_embeddings = leaf(get("embeddings.word_embeddings.weight"))
        # token type 0 for every token (single-segment input), folded into the positions
        self.position_embeddings = leaf(get("embeddings.position_embeddings.weight")
                                        + get("embeddings.token_type_embeddings.weight")[0])
        self.embedding_norm = (leaf(get("embeddings.LayerNorm.weight")),
                               leaf(get("embeddings.LayerNorm.bias")))
        self.layers = []
        for i in range(config.num_layers):
            prefix = f"encoder.layer.{i}."

            def part(name: str, kind: str, prefix: str = prefix) -> np.ndarray:
                return get(f"{prefix}{name}.{kind}")

            attention = "attention.self."
            qkv = np.concatenate([part(attention + "query", "weight") * scale,
                                  part(attention + "key", "weight"),
                                  part(attention + "value", "weight")])
            qkv_bias = np.concatenate([part(attention + "query", "bias") * scale,
                                       part(attention + "key", "bias"),
                                       part(attention + "value", "bias")])
            self.layers.append(BertLayer(
                transposed(qkv), leaf(qkv_bias),
                transposed(part("attention.output.dense", "weight")),
                leaf(part("attention.output.dense", "bias")),
                (leaf(part("attention.output.LayerNorm", "weight")),
                 leaf(part("attention.output.LayerNorm", "bias"))),
                transposed(part("intermediate.dense", "weight")),
                leaf(part("intermediate.dense", "bias")),
                transposed(part("output.dense", "weight")), leaf(part("output.dense", "bias")),
                (leaf(part("output.LayerNorm", "weight")), leaf(part("output.LayerNorm", "bias"))),
            ))

    @classmethod
    def from_safetensors(cls, weights: str | os.PathLike, config: str | os.PathLike,
                         device=None) -> BertEncoder:
        """Load ``model.safetensors`` with its ``config.json``."""
        require("safetensors.numpy", "loading BERT weights")
        arrays = read_safetensors(weights)  # its header checked against its bytes first
        values = BertConfig.from_file(config)
        check_bert_weights(weights, values, arrays)
        return cls(values, arrays, device)

    def forward(self, ids: np.ndarray, mask: np.ndarray) -> Tensor:
        """Lazy last hidden states ``(batch, length, hidden)`` for ``ids`` and its 0/1
        ``mask`` (both ``(batch, length)``)."""
        ids_t, mask_t, _ = self._leaves(ids, mask)
        return self._hidden(ids_t, mask_t)

    def mean_pooled(self, ids: np.ndarray, mask: np.ndarray) -> Tensor:
        """``(batch, hidden)`` means of the hidden states over the unmasked tokens. Each
        (batch, length) shape's plan is captured (fuel.jit) at its first call and replayed from
        then on (the last MAX_CAPTURED_SHAPES shapes are kept); the result may therefore come
        back already realized."""
        leaves = self._leaves(ids, mask)
        replay = self._replay_for(ids.shape)
        return replay(*leaves) if replay is not None else self._pooled(*leaves)

    def _leaves(self, ids: np.ndarray, mask: np.ndarray) -> tuple[Tensor, Tensor, Tensor]:
        """Token ids (flat), the additive attention mask and the pooling weights."""
        batch, length = ids.shape
        if length > self.config.max_position_embeddings:
            raise ModelFormatError(f"{length} tokens exceed BERT's "
                                   f"{self.config.max_position_embeddings} positions")
        additive = np.where(mask.astype(bool), np.float32(0.0), np.float32(-np.inf))
        counts = np.maximum(mask.sum(axis=1, keepdims=True), 1).astype(np.float32)
        weights = (mask.astype(np.float32) / counts).reshape(batch, 1, length)
        return (fuel.from_numpy(np.ascontiguousarray(ids, dtype=np.int64).reshape(-1),
                                device=self.device),
                fuel.from_numpy(additive.reshape(batch, 1, 1, length).astype(np.float32),
                                device=self.device),
                fuel.from_numpy(weights, device=self.device))

    def _replay_for(self, shape: tuple[int, int]):
        """The captured pooled forward for ``shape`` (captured by its first call), or None
        when use_jit is off."""
        if not self.use_jit:
            return None
        replays = self._replays
        if shape not in replays:
            replays[shape] = fuel.jit(self._pooled, arena=self._arena)
        replays.move_to_end(shape)
        while len(replays) > MAX_CAPTURED_SHAPES:
            replays.popitem(last=False)
        return replays[shape]

    def _pooled(self, ids: Tensor, mask: Tensor, weights: Tensor) -> Tensor:
        batch, _, length = weights.shape
        pooled = weights @ self._hidden(ids, mask)
        return pooled.reshape(batch, self.config.hidden_size)

    def _hidden(self, ids: Tensor, mask: Tensor) -> Tensor:
        c = self.config
        batch, length = mask.shape[0], mask.shape[-1]
        heads, width = c.num_heads, c.hidden_size // c.num_heads
        x = self.word_embeddings.index_select(0, ids).reshape(batch, length, c.hidden_size)
        x = x + self.position_embeddings[:length]
        x = layer_norm(x, (c.hidden_size,), *self.embedding_norm, c.layer_norm_eps)
        x = x.reshape(batch * length, c.hidden_size)
        for layer in self.layers:
            qkv = (x @ layer.qkv_t + layer.qkv_bias).reshape(batch, length, 3, heads, width)
            qkv = qkv.permute(2, 0, 3, 1, 4)
            scores = qkv[0] @ qkv[1].transpose(-2, -1) + mask
            context = softmax(scores, -1) @ qkv[2]
            context = context.permute(0, 2, 1, 3).reshape(batch * length, c.hidden_size)
            x = layer_norm(x + (context @ layer.o_t + layer.o_bias), (c.hidden_size,),
                           *layer.attn_norm, c.layer_norm_eps)
            up = gelu(x @ layer.up_t + layer.up_bias,
                      approximate="none" if c.hidden_act == "gelu" else "tanh")
            x = layer_norm(x + (up @ layer.down_t + layer.down_bias), (c.hidden_size,),
                           *layer.ffn_norm, c.layer_norm_eps)
        return x.reshape(batch, length, c.hidden_size)
