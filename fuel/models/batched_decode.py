"""Batched decoding: one step advances several generations by a token each, every one on its own
KV cache. The matmuls with the weights (most of a step's memory traffic) run once for the whole
batch; attention runs per generation over its own cache. The step's graph is
``llama_graph.batched_decoder_step``; BatchDecoder makes its inputs and captures and replays it."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

import fuel
from fuel.dispatch import op_profile
from fuel.frontend.snapshot import NodeSnapshot
from fuel.ir.errors import InvalidArgument
from fuel.models.kv_cache import KVCache
from fuel.models.llama_graph import BatchedStepInputs, batched_decoder_step
from fuel.tensor import Tensor

if TYPE_CHECKING:
    from fuel.models.llama import LlamaModel

CAPTURED_BATCHES = 16  # captured steps kept, one per combination of caches


def _batched_logits(model: LlamaModel, caches: Sequence[KVCache], *leaves: Tensor) -> Tensor:
    """The lazy ``(batch, vocab)`` logits of one token per cache, from the step's leaves as one
    argument list (``BatchedStepInputs.flat``, what a captured step takes)."""
    steps = BatchedStepInputs.from_flat(leaves)
    return batched_decoder_step(model.weights, model.config, steps, caches)


def _snapshot(caches: Sequence[KVCache]) -> NodeSnapshot:
    return NodeSnapshot(t for cache in caches for t in cache.tensors())


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
        arguments = BatchedStepInputs.create(tokens, caches, model.config,
                                             model._inverse_frequencies, model.device).flat()
        if op_profile.enabled() or not model.use_jit:
            snapshot = _snapshot(caches)
            try:
                logits = _batched_logits(model, caches, *arguments)
                fuel.realize(logits, *(t for cache in caches for t in cache.tensors()))
            except BaseException:  # leave the caches as they were, not holding half a step
                snapshot.restore()
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
                # the capture writes the caches in place; keep them realized leaves
                with _snapshot(bound):
                    return _batched_logits(model, bound, *arguments)

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
