"""Per-device buffer pool: freed intermediates are handed to the next allocation of the same
dtype and size, within a realize and across replays.

Policy: a hit reuses an idle buffer; a miss first releases every idle buffer of the device
back to its backend, then allocates. So the bytes a device holds (live + idle) never exceed
the live bytes at some allocation point: a realize's peak stays at its liveness bound.

A realized root's host buffer belongs to the user's tensor; when the last reference to it dies
(and no NumPy view of the buffer survives it), the buffer comes back to the pool, so a loop
that realizes the same shapes again reuses warm pages instead of faulting in fresh ones.
"""

from __future__ import annotations

import sys
import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from fuel.memory.storage import Storage, StorageBackend


@dataclass
class MemoryStats:
    """Bytes live (handed out and not released), peak of live + pooled, reuses, idle bytes."""

    allocated: int = 0
    peak: int = 0
    reused: int = 0
    pooled: int = 0
    allocations: int = 0

    def as_dict(self) -> dict:
        return {"allocated": self.allocated, "peak": self.peak, "reused": self.reused,
                "pooled": self.pooled, "allocations": self.allocations}


class DevicePool:
    """Idle Storages of one device keyed by (dtype, size), least recently released first."""

    def __init__(self) -> None:
        self.idle: OrderedDict[tuple, list] = OrderedDict()
        self.reclaimed: list[tuple] = []  # buffers of dead user tensors, not yet checked
        self.stats = MemoryStats()
        # Reentrant: a user tensor collected during an allocation gives its buffer back.
        self.lock = threading.RLock()

    def take(self, backend: StorageBackend, device, dtype, size: int):
        """A Storage for (dtype, size): reused when one is idle, else freshly allocated."""
        key = (dtype, size)
        nbytes = size * dtype.itemsize
        with self.lock:
            self._settle_reclaimed()
            bucket = self.idle.get(key)
            if bucket:
                storage = bucket.pop()
                if not bucket:
                    del self.idle[key]
                self.stats.pooled -= nbytes
                self.stats.allocated += nbytes
                self.stats.reused += 1
                return storage
            self._release_idle()
        storage = backend.allocate(device, dtype, size)
        with self.lock:
            self.stats.allocated += nbytes
            self.stats.allocations += 1
            self._update_peak()
        return storage

    def disown(self, storage) -> None:
        """A taken Storage that now belongs to the user: its bytes stay ``allocated`` until it
        is garbage-collected; then a host buffer nothing else references comes back to the
        pool (device buffers are released by their backend)."""
        if isinstance(storage.buffer, np.ndarray):
            weakref.finalize(storage, self._reclaim, [storage.buffer], storage.dtype,
                             storage.size, storage.device, storage.backend)
        else:
            weakref.finalize(storage, self._forget, storage.nbytes)

    def _reclaim(self, holder: list, dtype, size: int, device, backend) -> None:
        # Called while the Storage dies (its slots still hold the buffer): only note it; the
        # next take or statistics read decides whether the buffer can be reused.
        with self.lock:
            self.reclaimed.append((holder.pop(), dtype, size, device, backend))

    def _settle_reclaimed(self) -> None:
        """Pool the buffers of dead user tensors that nothing references any more (called
        with the lock held)."""
        while self.reclaimed:
            buffer, dtype, size, device, backend = self.reclaimed.pop()
            self.stats.allocated -= buffer.nbytes
            # ``buffer`` and getrefcount's argument: any more is a NumPy view (its ``base``)
            # or an exported buffer still reading these bytes. Those are never reused.
            if sys.getrefcount(buffer) == 2:
                self.idle.setdefault((dtype, size), []).append(
                    Storage(buffer, dtype, size, device, backend))
                self.stats.pooled += buffer.nbytes

    def give_back(self, storage) -> None:
        """An intermediate no one references any more: keep it for the next allocation."""
        nbytes = storage.nbytes
        with self.lock:
            self.idle.setdefault((storage.dtype, storage.size), []).append(storage)
            self.stats.allocated -= nbytes
            self.stats.pooled += nbytes

    def _forget(self, nbytes: int) -> None:
        with self.lock:
            self.stats.allocated -= nbytes

    def _release_idle(self) -> None:
        self.idle.clear()
        self.stats.pooled = 0

    def _update_peak(self) -> None:
        held = self.stats.allocated + self.stats.pooled
        if held > self.stats.peak:
            self.stats.peak = held

    def empty(self) -> None:
        with self.lock:
            self._settle_reclaimed()
            self._release_idle()

    def settled_stats(self) -> MemoryStats:
        """The statistics, with the buffers of tensors that died since the last call counted."""
        with self.lock:
            self._settle_reclaimed()
            return self.stats


_pools: dict = {}
_pools_lock = threading.Lock()


def pool_for(device) -> DevicePool:
    """The pool of ``device`` (created on first use)."""
    pool = _pools.get(device)
    if pool is None:
        with _pools_lock:
            pool = _pools.setdefault(device, DevicePool())
    return pool


def memory_stats(device="cpu") -> dict:
    """``{"allocated", "peak", "reused", "pooled", "allocations"}`` for a device, in bytes."""
    from fuel.ir.device import parse_device

    return pool_for(parse_device(device)).settled_stats().as_dict()


def reset_peak(device="cpu") -> None:
    """Start peak tracking afresh from what the device holds now."""
    from fuel.ir.device import parse_device

    pool = pool_for(parse_device(device))
    with pool.lock:
        pool._settle_reclaimed()
        pool.stats.peak = pool.stats.allocated + pool.stats.pooled


def empty_cache(device=None) -> None:
    """Release every idle pooled buffer (of one device, or of all) back to its backend."""
    from fuel.ir.device import parse_device

    targets = [pool_for(parse_device(device))] if device is not None else list(_pools.values())
    for pool in targets:
        pool.empty()
