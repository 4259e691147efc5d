"""Batched decoding: one step advances several generations by a token each, every one on its own
KV cache. The matmuls with the weights (most of a step's memory traffic) run once for the whole
batch; attention runs per generation over its own cache."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

import fuel
from fuel.dispatch import op_profile
from fuel.ir.errors import InvalidArgument
from fuel.models.kv_cache import KVCache
from fuel.models.llama_graph import (
    LayerWeights,
    attention_mask,
    embed,
    feed_forward,
    project,
    rope_matrices,
)
from fuel.nn.functional import rms_norm, softmax
from fuel.tensor import Tensor

if TYPE_CHECKING:
    from fuel.models.llama import LlamaModel

CAPTURED_BATCHES = 16  # captured steps kept, one per combination of caches


def batched_attention(model: LlamaModel, x: Tensor, layer: LayerWeights, index: int,
                      rope: Tensor, positions: Sequence[Tensor], masks: Sequence[Tensor],
                      caches: Sequence[KVCache]) -> Tensor:
    """Self-attention of row ``b`` of ``x`` (batch, hidden) over ``caches[b]``."""
    config = model.config
    d, heads, kv_heads = config.head_dim, config.num_heads, config.num_kv_heads
    group = heads // kv_heads
    count = len(caches)
    h = rms_norm(x, (config.hidden_size,), layer.attn_norm, config.rms_eps)
    qkv = project(h, layer.qkv_t)
    rotated = qkv[:, :(heads + kv_heads) * d].reshape(count, heads + kv_heads, d) @ rope
    values_in = qkv[:, (heads + kv_heads) * d:].reshape(count, kv_heads, d)
    rows = []
    for b, cache in enumerate(caches):
        q = rotated[b, :heads].reshape(kv_heads, group, d)
        k = rotated[b:b + 1, heads:].permute(1, 0, 2)
        v = values_in[b:b + 1].permute(1, 0, 2)
        keys, values = cache.write(index, positions[b], k, v)
        scores = q @ keys.transpose(1, 2)
        if model.weights.query_scale != 1.0:
            scores = scores * model.weights.query_scale
        scores = scores + masks[b]
        rows.append((softmax(scores, -1) @ values).reshape(1, heads * d))
    return project(fuel.cat(rows, 0), layer.o_t)


def batched_step(model: LlamaModel, caches: Sequence[KVCache], ids: Tensor, rope: Tensor,
                 *positions_and_masks: Tensor) -> Tensor:
    """The lazy ``(batch, vocab)`` logits of one token per cache."""
    count = len(caches)
    positions, masks = positions_and_masks[:count], positions_and_masks[count:]
    weights, config = model.weights, model.config
    x = embed(weights, ids)
    for index, layer in enumerate(weights.layers):
        x = x + batched_attention(model, x, layer, index, rope, positions, masks, caches)
        x = x + feed_forward(x, layer, config)
    return project(rms_norm(x, (config.hidden_size,), weights.norm, config.rms_eps),
                   weights.output_t)


def _leaves(caches: Sequence[KVCache]) -> list:
    return [[tensor._node for tensor in cache.tensors()] for cache in caches]


def _restore(caches: Sequence[KVCache], leaves: list) -> None:
    for cache, nodes in zip(caches, leaves):
        for tensor, node in zip(cache.tensors(), nodes):
            tensor._node = node


class BatchDecoder:
    """Runs batched decode steps for ``model``; each combination of caches is captured
    (fuel.jit) the first time and replayed afterwards."""

    def __init__(self, model: LlamaModel) -> None:
        self.model = model
        self._captures: OrderedDict = OrderedDict()

    def step(self, tokens: Sequence[int], caches: Sequence[KVCache]) -> np.ndarray:
        """Logits ``(len(tokens), vocab)``: ``tokens[b]`` run at the next position of
        ``caches[b]`` (whose length then grows by one)."""
        if len(tokens) != len(caches) or not caches:
            raise InvalidArgument("a batched step needs one token per cache")
        if len({id(cache) for cache in caches}) != len(caches):
            raise InvalidArgument("a batched step needs distinct caches")
        for cache in caches:
            if cache.length >= cache.capacity:
                raise InvalidArgument(f"a KV cache of {cache.capacity} positions is full")
        model = self.model
        config, device = model.config, model.device
        group = config.num_heads // config.num_kv_heads
        ids = fuel.from_numpy(np.asarray(tokens, np.int64), device=device)
        rope = fuel.from_numpy(np.concatenate([
            rope_matrices(model._inverse_frequencies, cache.length, 1) for cache in caches]),
            device=device)
        positions = [fuel.from_numpy(np.array([cache.length], np.int64), device=device)
                     for cache in caches]
        masks = [fuel.from_numpy(attention_mask(cache.length, 1, group, cache.capacity),
                                 device=device) for cache in caches]
        arguments = (ids, rope, *positions, *masks)
        if op_profile.enabled() or not model.use_jit:
            leaves = _leaves(caches)
            try:
                logits = batched_step(model, caches, *arguments)
                fuel.realize(logits, *(t for cache in caches for t in cache.tensors()))
            except BaseException:  # leave the caches as they were, not holding half a step
                _restore(caches, leaves)
                raise
        else:
            logits = self._capture(caches)(*arguments)
        for cache in caches:
            cache.length += 1
        return logits.numpy()

    def _capture(self, caches: Sequence[KVCache]):
        key = tuple(id(cache) for cache in caches)
        entry = self._captures.get(key)
        if entry is None or any(a is not b for a, b in zip(entry[0], caches)):
            model = self.model
            bound = tuple(caches)

            def traced(*arguments: Tensor) -> Tensor:
                leaves = _leaves(bound)
                try:
                    return batched_step(model, bound, *arguments)
                finally:  # the capture writes the caches in place; keep them realized leaves
                    _restore(bound, leaves)

            entry = (bound, fuel.jit(traced))
            self._captures[key] = entry
        self._captures.move_to_end(key)
        while len(self._captures) > CAPTURED_BATCHES:
            self._captures.popitem(last=False)
        return entry[1]

    def clear(self) -> None:
        """Drop every captured step (they are captured again when needed)."""
        self._captures.clear()

    def forget(self, cache: KVCache) -> None:
        """Drop the captured steps that involve ``cache`` (before it is discarded)."""
        for key in [key for key, entry in self._captures.items()
                    if any(c is cache for c in entry[0])]:
            del self._captures[key]
