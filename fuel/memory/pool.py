"""Per-device buffer pool: freed intermediates are handed to the next allocation of the same
dtype and size, within a realize and across replays.

Policy: a hit reuses an idle buffer; a miss first releases every idle buffer of the device
back to its backend, then allocates. So the bytes a device holds (live + idle) never exceed
the live bytes at some allocation point: a realize's peak stays at its liveness bound.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the backend layer sits above memory: a type only
    from fuel.backends.base import Backend


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
        self.stats = MemoryStats()
        self.lock = threading.Lock()

    def take(self, backend: Backend, device, dtype, size: int):
        """A Storage for (dtype, size): reused when one is idle, else freshly allocated."""
        key = (dtype, size)
        nbytes = size * dtype.itemsize
        with self.lock:
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
        is garbage-collected, and it never comes back to the pool."""
        weakref.finalize(storage, self._forget, storage.nbytes)

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
            self._release_idle()


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

    return pool_for(parse_device(device)).stats.as_dict()


def reset_peak(device="cpu") -> None:
    """Start peak tracking afresh from what the device holds now."""
    from fuel.ir.device import parse_device

    pool = pool_for(parse_device(device))
    with pool.lock:
        pool.stats.peak = pool.stats.allocated + pool.stats.pooled


def empty_cache(device=None) -> None:
    """Release every idle pooled buffer (of one device, or of all) back to its backend."""
    from fuel.ir.device import parse_device

    targets = [pool_for(parse_device(device))] if device is not None else list(_pools.values())
    for pool in targets:
        pool.empty()
