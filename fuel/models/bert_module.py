"""BERT as a trainable ``fuel.nn.Module`` (fine-tuning MiniLM): Hugging Face's parameter names
and layout, so ``load_state_dict`` takes a ``model.safetensors`` as it is and the weights are
``Parameter``s an optimizer updates. ``fuel.models.bert.BertEncoder`` stays the inference
path (fused, pre-scaled, transposed weights); this one keeps transformers' parametrization,
so a fine-tuning step matches transformers' step for step.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

import fuel.nn as nn
import fuel.nn.functional as F
from fuel.models.bert import BertConfig
from fuel.models.common import require
from fuel.tensor import Tensor


class _SelfAttention(nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.query, self.key, self.value = (nn.Linear(hidden, hidden) for _ in range(3))


class _AttentionOutput(nn.Module):
    def __init__(self, hidden: int, eps: float, dropout: float) -> None:
        super().__init__()
        self.dense = nn.Linear(hidden, hidden)
        self.LayerNorm = nn.LayerNorm(hidden, eps=eps)
        self.dropout = nn.Dropout(dropout)


class _Attention(nn.Module):
    def __init__(self, config: BertConfig, dropout: float) -> None:
        super().__init__()
        self.self = _SelfAttention(config.hidden_size)
        self.output = _AttentionOutput(config.hidden_size, config.layer_norm_eps, dropout)


class _Dense(nn.Module):
    def __init__(self, size_in: int, size_out: int) -> None:
        super().__init__()
        self.dense = nn.Linear(size_in, size_out)


class _Layer(nn.Module):
    def __init__(self, config: BertConfig, dropout: float) -> None:
        super().__init__()
        self.attention = _Attention(config, dropout)
        self.intermediate = _Dense(config.hidden_size, config.intermediate_size)
        self.output = _AttentionOutput(config.hidden_size, config.layer_norm_eps, dropout)
        self.output.dense = nn.Linear(config.intermediate_size, config.hidden_size)


class _Embeddings(nn.Module):
    def __init__(self, config: BertConfig, dropout: float, type_vocab_size: int,
                 pad_token_id: int | None) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size,
                                            padding_idx=pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings,
                                                config.hidden_size)
        self.token_type_embeddings = nn.Embedding(type_vocab_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(dropout)


class _Encoder(nn.Module):
    def __init__(self, config: BertConfig, dropout: float) -> None:
        super().__init__()
        self.layer = nn.ModuleList(_Layer(config, dropout) for _ in range(config.num_layers))


class BertModule(nn.Module):
    """BERT's embeddings and encoder stack with transformers' names; ``forward(ids, mask)``
    gives the last hidden states, ``mean_pooled`` sentence-transformers' pooling."""

    def __init__(self, config: BertConfig, dropout: float = 0.1,
                 type_vocab_size: int = 2, pad_token_id: int | None = 0) -> None:
        super().__init__()
        self.config = config
        # The padding token's row gets no gradient (transformers' padding_idx).
        self.embeddings = _Embeddings(config, dropout, type_vocab_size, pad_token_id)
        self.encoder = _Encoder(config, dropout)

    @classmethod
    def from_pretrained(cls, folder: str | os.PathLike, dropout: float = 0.1) -> BertModule:
        """Load ``folder``'s ``model.safetensors`` and ``config.json`` (MiniLM's layout)."""
        numpy_io = require("safetensors.numpy", "loading BERT weights")
        folder = Path(folder)
        import json

        raw = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        model = cls(BertConfig.from_file(folder / "config.json"), dropout,
                    raw.get("type_vocab_size", 2), raw.get("pad_token_id", 0))
        arrays = numpy_io.load_file(str(folder / "model.safetensors"))
        arrays = {name[len("bert."):] if name.startswith("bert.") else name: value
                  for name, value in arrays.items()}
        model.load_state_dict({k: v for k, v in arrays.items() if k in model.state_dict()})
        return model

    def forward(self, ids: Tensor, mask: Tensor) -> Tensor:
        """Last hidden states ``(batch, length, hidden)`` for int ``ids`` and a 0/1 ``mask``."""
        c = self.config
        batch, length = ids.shape
        heads, width = c.num_heads, c.hidden_size // c.num_heads
        e = self.embeddings
        x = e.word_embeddings(ids) + e.position_embeddings.weight[:length] + \
            e.token_type_embeddings.weight[0]
        x = e.dropout(e.LayerNorm(x))
        additive = (1.0 - mask.to(x.dtype)) * float(np.finfo(np.float32).min)
        additive = additive.reshape(batch, 1, 1, length)
        scale = 1.0 / float(np.sqrt(width))
        for layer in self.encoder.layer:
            attention = layer.attention

            def heads_of(linear, x=x):
                return linear(x).reshape(batch, length, heads, width).transpose(1, 2)

            q = heads_of(attention.self.query)
            k = heads_of(attention.self.key)
            v = heads_of(attention.self.value)
            scores = (q @ k.transpose(-2, -1)) * scale + additive
            context = (F.softmax(scores, -1) @ v).transpose(1, 2).reshape(
                batch, length, c.hidden_size)
            out = attention.output
            x = out.LayerNorm(out.dropout(out.dense(context)) + x)
            up = F.gelu(layer.intermediate.dense(x),
                        approximate="none" if c.hidden_act == "gelu" else "tanh")
            out = layer.output
            x = out.LayerNorm(out.dropout(out.dense(up)) + x)
        return x

    def mean_pooled(self, ids: Tensor, mask: Tensor) -> Tensor:
        """``(batch, hidden)``: the hidden states averaged over the unmasked tokens."""
        hidden = self.forward(ids, mask)
        weights = mask.to(hidden.dtype).unsqueeze(-1)
        return (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
