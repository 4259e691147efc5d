"""A preallocated key/value cache whose new entries are written in place at their position."""

from __future__ import annotations

import mmap
from collections import OrderedDict

import numpy as np

import fuel
from fuel.ir.errors import InvalidArgument
from fuel.tensor import Tensor


class KVCache:
    """Per layer, keys and values of shape ``(kv_heads, capacity, head_dim)``: realized
    tensors that each step updates in place with ``index_copy_`` at its positions (no
    concatenation, no reallocation). ``length`` counts the positions written so far."""

    def __init__(self, num_layers: int, kv_heads: int, capacity: int, head_dim: int,
                 device=None) -> None:
        if capacity < 1:
            raise InvalidArgument(f"KV cache capacity must be positive, got {capacity}")
        self.capacity = capacity
        self.length = 0
        self.in_use = False
        # the model's captured steps (fuel.jit) bound to this cache, by (tokens, all_logits)
        self.replays: OrderedDict = OrderedDict()
        # the input leaves of the short captured steps, by the same keys, refilled in place
        self.step_inputs: dict = {}
        shape = (kv_heads, capacity, head_dim)
        self.keys = [fuel.from_numpy(lazy_zeros(shape), device=device)
                     for _ in range(num_layers)]
        self.values = [fuel.from_numpy(lazy_zeros(shape), device=device)
                       for _ in range(num_layers)]

    def write(self, layer: int, positions: Tensor, keys: Tensor, values: Tensor
              ) -> tuple[Tensor, Tensor]:
        """Record ``keys``/``values`` (``(kv_heads, n, head_dim)``) at the ``n`` cache
        ``positions`` (an int64 tensor: positions are data, so every decode step builds the
        same graph); returns the layer's whole (lazy, updated) key and value tensors."""
        self.keys[layer].index_copy_(1, positions, keys)
        self.values[layer].index_copy_(1, positions, values)
        return self.keys[layer], self.values[layer]

    def tensors(self) -> list[Tensor]:
        """Every cache tensor: realize them with the step's logits so the writes land."""
        return self.keys + self.values

    def reset(self) -> None:
        """Forget the written positions (the stale values are masked until overwritten)."""
        self.length = 0

    def copy_prefix(self, source: KVCache, length: int) -> None:
        """Take the first ``length`` positions of ``source`` (a smaller cache of the same
        model) into this one, e.g. to grow a conversation's cache."""
        if length > min(source.capacity, self.capacity):
            raise InvalidArgument(f"cannot copy {length} positions between caches of "
                                  f"{source.capacity} and {self.capacity}")
        device = self.keys[0].device if self.keys else None
        for mine, theirs in ((self.keys, source.keys), (self.values, source.values)):
            for layer, tensor in enumerate(theirs):
                array = lazy_zeros(mine[layer].shape)
                array[:, :length] = tensor.numpy()[:, :length]
                mine[layer] = fuel.from_numpy(array, device=device)
        self.replays.clear()
        self.length = length


def lazy_zeros(shape: tuple[int, ...]) -> np.ndarray:
    """A float32 array of zeros over an anonymous memory map of its own: the pages become
    resident only where positions are written (reading the rest maps the kernel's shared zero
    page), so a cache costs memory for the positions it holds, not its capacity. ``np.zeros``
    may instead take reused, already-resident heap memory and clear it."""
    count = int(np.prod(shape))
    private = getattr(mmap, "MAP_PRIVATE", None)
    if count == 0 or private is None:  # no POSIX mmap flags (Windows): plain zeros
        return np.zeros(shape, np.float32)
    # private: a shared anonymous map is shared memory, whose pages are made when read
    pages = mmap.mmap(-1, count * 4, flags=private | mmap.MAP_ANONYMOUS)
    return np.frombuffer(pages, np.float32, count).reshape(shape)
