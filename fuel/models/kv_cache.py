"""A preallocated key/value cache whose new entries are written in place at their position."""

from __future__ import annotations

import mmap
from collections import OrderedDict

import numpy as np

import fuel
from fuel.ir.errors import InvalidArgument
from fuel.runtime.replay import HeldArena
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
        # the model's captured steps (fuel.jit) bound to this cache, by (tokens, all_logits);
        # they run one at a time, so their intermediates share one arena
        self.replays: OrderedDict = OrderedDict()
        self.arena = HeldArena()
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


class PagedKVPool:
    """One pool of fixed-size key/value blocks shared by every request of a server: per layer,
    keys and values of shape ``(blocks * block_size, kv_heads, head_dim)`` (a request's block
    table says which blocks hold its positions; ``fuel.nn.functional.paged_attention`` reads
    them as ``(blocks, block_size, kv_heads, head_dim)``). The memory is mapped lazily: a
    block costs resident memory once written, and ``release`` hands written blocks' pages
    back (``lazy_zeros``)."""

    def __init__(self, num_layers: int, kv_heads: int, head_dim: int, blocks: int,
                 block_size: int, device=None) -> None:
        if blocks < 2 or block_size < 1:
            raise InvalidArgument(f"a paged KV pool needs at least 2 blocks of at least one "
                                  f"position, got {blocks} blocks of {block_size}")
        self.blocks = blocks
        self.block_size = block_size
        self.kv_heads = kv_heads
        self.head_dim = head_dim
        shape = (blocks * block_size, kv_heads, head_dim)
        self._arrays = [lazy_zeros(shape) for _ in range(2 * num_layers)]
        tensors = [fuel.from_numpy(array, device=device) for array in self._arrays]
        self.keys, self.values = tensors[:num_layers], tensors[num_layers:]

    @property
    def block_bytes(self) -> int:
        """Bytes one block holds over all layers, keys and values."""
        return 4 * self.block_size * self.kv_heads * self.head_dim * len(self._arrays)

    def tensors(self) -> list[Tensor]:
        """Every pool tensor, keys then values (a step's in-place writes land in them)."""
        return self.keys + self.values

    def release(self, blocks) -> None:
        """Give the pages of ``blocks`` (free ones) back to the system: they read as zeros and
        cost no memory until written again. Consecutive blocks are released as one run, whole
        pages inside it (a block of a few positions is smaller than a page); on the CPU
        without POSIX ``madvise`` this does nothing."""
        advise = getattr(mmap, "MADV_DONTNEED", None)
        page = mmap.PAGESIZE
        stride = self.block_bytes // len(self._arrays)
        runs: list[list[int]] = []  # [first, last] of each run of consecutive blocks
        for block in sorted(set(blocks)):
            if runs and block == runs[-1][1] + 1:
                runs[-1][1] = block
            else:
                runs.append([block, block])
        for array in self._arrays:
            base = array
            while isinstance(base, np.ndarray):
                base = base.base
            base = base.obj if isinstance(base, memoryview) else base
            if advise is None or not isinstance(base, mmap.mmap):
                return
            for first, last in runs:
                start = -(-first * stride // page) * page
                stop = (last + 1) * stride // page * page
                if stop > start:
                    base.madvise(advise, start, stop - start)
