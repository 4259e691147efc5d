"""Device buffers of one OpenCL device: a caching allocator with live/peak accounting.

A buffer whose Storage died goes to a free list keyed by its byte size (up to a bound) and
serves the next allocation of that size: no driver call, and no first-touch page faults on
CPU devices. Reuse is safe because each device has one in-order queue: work enqueued later
on a recycled buffer runs after everything already queued on it.
"""

from __future__ import annotations

import threading
import weakref

from fuel.ir.errors import DeviceError

MINIMUM_BUFFER_BYTES = 8  # OpenCL rejects empty buffers
CACHE_FRACTION = 4  # cache at most 1/4 of the device's memory ...
CACHE_CEILING = 1 << 30  # ... and at most 1 GiB


class BufferCache:
    """Allocates ``cl.Buffer``s for Storages of one device and recycles released ones."""

    def __init__(self, cl, context, device) -> None:
        self.cl = cl
        self.context = context
        self.limit = min(CACHE_CEILING, int(device.global_mem_size) // CACHE_FRACTION)
        self.max_allocation = int(device.max_mem_alloc_size)
        self.free: dict[int, list] = {}
        self.lock = threading.Lock()
        self.live_buffers = 0
        self.live_bytes = 0
        self.peak_bytes = 0
        self.cached_bytes = 0

    def buffer(self, nbytes: int, what: str):
        """A buffer of at least ``nbytes`` (recycled when one of that size is free)."""
        if nbytes > self.max_allocation:
            raise DeviceError(f"cannot allocate {what} ({nbytes} bytes): the device's largest "
                              f"single allocation is {self.max_allocation} bytes")
        size = max(nbytes, MINIMUM_BUFFER_BYTES)
        with self.lock:
            bucket = self.free.get(size)
            if bucket:
                self.cached_bytes -= size
                return bucket.pop()
        try:
            return self.cl.Buffer(self.context, self.cl.mem_flags.READ_WRITE, size)
        except (self.cl.Error, MemoryError):
            self.release_cached()  # the cache may be what fills the device: retry without it
        try:
            return self.cl.Buffer(self.context, self.cl.mem_flags.READ_WRITE, size)
        except (self.cl.Error, MemoryError) as error:
            raise DeviceError(f"cannot allocate {what} ({nbytes} bytes): {error}") from error

    def track(self, storage, nbytes: int) -> None:
        """Count ``storage`` as live until it is garbage-collected, then recycle its buffer."""
        with self.lock:
            self.live_buffers += 1
            self.live_bytes += nbytes
            self.peak_bytes = max(self.peak_bytes, self.live_bytes)
        weakref.finalize(storage, self._release, storage.buffer, nbytes)

    def _release(self, buffer, nbytes: int) -> None:
        size = max(nbytes, MINIMUM_BUFFER_BYTES)
        with self.lock:
            self.live_buffers -= 1
            self.live_bytes -= nbytes
            if self.cached_bytes + size <= self.limit:
                self.free.setdefault(size, []).append(buffer)
                self.cached_bytes += size

    def release_cached(self) -> None:
        """Give every cached buffer back to the driver."""
        with self.lock:
            self.free.clear()
            self.cached_bytes = 0

    def stats(self) -> dict[str, int]:
        return {"live_buffers": self.live_buffers, "live_bytes": self.live_bytes,
                "peak_bytes": self.peak_bytes, "cached_bytes": self.cached_bytes}
