"""CUDA through CuPy: device detection, and one ``DeviceContext`` per device (made on its first
use): its stream, its memory pool, its compiled modules and its launches.

Every command of a device goes to its one stream (non-blocking, so it never waits on the legacy
default stream); a CUDA event recorded on it is the Pending completion handle. Buffers come from
a per-device CuPy ``MemoryPool`` allocated on that stream (the pool is stream-ordered: a freed
block is handed out again only to work queued after it on the same stream). Host transfers go
through pinned staging buffers, kept until an event after the copy has passed. Kernels are
CUDA C compiled by NVRTC (``fuel.compiler.nvrtc``, cached by source digest) for the device's
architecture (a cubin; PTX for the newest NVRTC knows when the device is newer) and loaded once
per device. Index kernels report an out-of-range index in a fault word checked at the next wait.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import NamedTuple

import numpy as np

from fuel.extras import install_command
from fuel.ir.errors import DeviceError, KernelIndexError

FAULT_WORDS = 4  # code, the index's low and high words, spare
THREADS = 256  # threads per block of a one-dimensional launch
_capture = threading.local()  # the device timer's event pairs on this thread


def cupy():
    """The CuPy module; DeviceError naming the extra when it is missing."""
    try:
        import cupy as module
    except Exception as error:  # noqa: BLE001 - an import of a native package can fail anyhow
        raise DeviceError(f"CuPy is not installed ({error}); install the cuda extra: "
                          f"{install_command('cuda')}") from error
    return module


class Detection(NamedTuple):
    """The CUDA devices fuel can use (indices), or why there is none."""

    indices: list[int]
    reason: str


def detect() -> Detection:
    """The usable devices, or the reason CUDA is unavailable: no CuPy, no driver (or one too
    old for CuPy's CUDA 12 runtime), no device, no NVRTC. Never raises."""
    try:
        import cupy as module
    except Exception as error:  # noqa: BLE001
        return Detection([], f"CuPy is not installed ({type(error).__name__}: {error}); "
                             f"install the cuda extra: {install_command('cuda')}")
    try:
        count = int(module.cuda.runtime.getDeviceCount())
    except Exception as error:  # noqa: BLE001 - CUDARuntimeError, or a missing libcuda
        return Detection([], _driver_reason(error))
    if count == 0:
        return Detection([], "no CUDA device found (the driver reports none)")
    from fuel.compiler import nvrtc

    reason = nvrtc.unavailable_reason()
    if reason is not None:
        return Detection([], reason)
    return Detection(list(range(count)), "")


def _driver_reason(error: Exception) -> str:
    text = str(error)
    if "NoDevice" in text or "no CUDA-capable device" in text:
        return f"no CUDA device found ({text})"
    if "InsufficientDriver" in text or "libcuda" in text or "driver" in text.lower():
        return (f"no usable NVIDIA driver ({text}): CUDA needs an NVIDIA GPU and a driver for "
                f"CUDA 12")
    return f"CUDA initialization failed ({type(error).__name__}: {text})"


class Properties(NamedTuple):
    name: str
    major: int
    minor: int
    memory: int  # bytes
    multiprocessors: int
    shared_per_block: int  # bytes


def properties(index: int) -> Properties:
    """The device's name, compute capability, memory and limits."""
    found = cupy().cuda.runtime.getDeviceProperties(index)
    name = found["name"]
    name = name.decode() if isinstance(name, bytes) else str(name)
    return Properties(name, int(found["major"]), int(found["minor"]),
                      int(found["totalGlobalMem"]), int(found["multiProcessorCount"]),
                      int(found["sharedMemPerBlock"]))


def describe(index: int) -> str:
    """``NVIDIA H200 (compute capability 9.0, 139.8 GiB)``."""
    found = properties(index)
    return (f"{found.name} (compute capability {found.major}.{found.minor}, "
            f"{found.memory / 2**30:.1f} GiB)")


def target(major: int, minor: int) -> str:
    """What NVRTC compiles for a device of compute capability major.minor: its cubin
    (``sm_90``) where this NVRTC knows the architecture, else PTX of the newest one it knows
    below it (``compute_90``), which the driver compiles on load."""
    from fuel.compiler import nvrtc

    capability = major * 10 + minor
    known = nvrtc.supported_architectures()
    if capability in known:
        return f"sm_{capability}"
    older = [a for a in known if a <= capability]
    if not older:
        raise DeviceError(f"NVRTC {nvrtc.version()} compiles for none of compute capability "
                          f"{major}.{minor}'s architectures (it knows {known})")
    return f"compute_{max(older)}"


class Fault(NamedTuple):
    what: str
    dim: int
    size: int


class DeviceContext:
    """One CUDA device: its stream, pool, modules, staging transfers and fault word."""

    def __init__(self, index: int) -> None:
        cp = cupy()
        self.cp = cp
        self.index = index
        self.device = cp.cuda.Device(index)
        self.properties = properties(index)
        self.arch = target(self.properties.major, self.properties.minor)
        self.lock = threading.RLock()
        with self.device:
            self.stream = cp.cuda.Stream(non_blocking=True)
            self.pool = cp.cuda.MemoryPool()
            self.fault_buffer = self._malloc(4 * FAULT_WORDS)
            self.fault_buffer.memset_async(0, 4 * FAULT_WORDS, self.stream)
        self.fault_host = cp.cuda.alloc_pinned_memory(4 * FAULT_WORDS)
        self.faults: dict[int, Fault] = {}
        self.functions: dict[str, tuple[object, int]] = {}  # source digest -> (module, ptr)
        self.transfers: deque = deque()  # (event, pinned buffer) of copies in flight
        self.live_buffers = self.live_bytes = self.peak_bytes = 0

    def cublas(self) -> int:
        """This device's cuBLAS handle, bound to its stream (made on first use)."""
        handle = getattr(self, "_cublas", None)
        if handle is None:
            try:
                from cupy_backends.cuda.libs import cublas
            except ImportError as error:
                raise DeviceError(f"cuBLAS is not available ({error}); install the cuda "
                                  f"extra: {install_command('cuda')}") from error
            with self.lock, self.device:
                handle = getattr(self, "_cublas", None)
                if handle is None:
                    handle = cublas.create()
                    cublas.setStream(handle, self.stream.ptr)
                    self._cublas = handle
        return handle

    # ------------------------------------------------------------------ memory

    def _malloc(self, nbytes: int):
        with self.stream:
            return self.pool.malloc(max(nbytes, 1))

    def allocate(self, nbytes: int, what: str):
        """A device buffer (a CuPy MemoryPointer) of ``nbytes``, from the pool."""
        try:
            with self.device:
                return self._malloc(nbytes)
        except self.cp.cuda.memory.OutOfMemoryError:
            self.pool.free_all_blocks()
            try:
                with self.device:
                    return self._malloc(nbytes)
            except self.cp.cuda.memory.OutOfMemoryError as error:
                raise DeviceError(f"cannot allocate {what} ({nbytes} bytes): {error}") from error

    def track(self, nbytes: int) -> None:
        with self.lock:
            self.live_buffers += 1
            self.live_bytes += nbytes
            self.peak_bytes = max(self.peak_bytes, self.live_bytes)

    def release(self, nbytes: int) -> None:
        with self.lock:
            self.live_buffers -= 1
            self.live_bytes -= nbytes

    def stats(self) -> dict[str, int]:
        cached = int(self.pool.total_bytes() - self.pool.used_bytes())
        return {"live_buffers": self.live_buffers, "live_bytes": self.live_bytes,
                "peak_bytes": self.peak_bytes, "cached_bytes": cached}

    # ------------------------------------------------------------------ transfers

    def upload(self, buffer, host: np.ndarray) -> None:
        """Enqueue a copy of ``host`` (contiguous) into ``buffer`` through a pinned staging
        buffer; the caller may reuse ``host`` at once."""
        nbytes = host.nbytes
        if nbytes == 0:
            return
        pinned = self.cp.cuda.alloc_pinned_memory(nbytes)
        np.frombuffer(pinned, np.uint8, nbytes)[:] = host.reshape(-1).view(np.uint8)
        with self.device:
            buffer.copy_from_host_async(pinned.ptr, nbytes, self.stream)
            event = self.stream.record()
        with self.lock:
            self.transfers.append((event, pinned))
            while self.transfers and self.transfers[0][0].done:
                self.transfers.popleft()

    def download(self, buffer, offset_bytes: int, nbytes: int) -> np.ndarray:
        """``nbytes`` from ``buffer`` + ``offset_bytes`` (waits for the queued work)."""
        pinned = self.cp.cuda.alloc_pinned_memory(max(nbytes, 1))
        with self.device:
            (buffer + offset_bytes).copy_to_host_async(pinned.ptr, nbytes, self.stream)
            self.stream.synchronize()
        self.check_faults()
        return np.frombuffer(pinned, np.uint8, nbytes).copy()

    # ------------------------------------------------------------------ kernels

    def function(self, source: str, digest: str) -> int:
        """The loaded ``fuel_kernel`` of ``source`` on this device (compiled and loaded once)."""
        found = self.functions.get(digest)
        if found is None:
            from fuel.compiler import nvrtc
            from fuel.compiler.render_cuda import CUDA_OPTIONS, KERNEL_NAME

            image = nvrtc.compile_cuda(source, self.arch, CUDA_OPTIONS)
            with self.lock, self.device:
                found = self.functions.get(digest)
                if found is None:
                    module = self.cp.cuda.function.Module()
                    module.load(image)
                    function = module.get_function(KERNEL_NAME)
                    found = self.functions[digest] = (module, function.ptr, function)
        return found[1]

    def launcher(self, function: int, blocks: int, threads: int, shared: int,
                 pointers: list[int], arguments) -> callable:
        """A no-argument launch of ``function`` (pointers, then the 64-bit argument struct)
        on ``blocks`` x ``threads`` with ``shared`` bytes of dynamic shared memory."""
        values = np.array([*pointers, *arguments], np.int64)
        base = values.ctypes.data
        slots = [base + 8 * k for k in range(len(pointers))]
        if len(arguments):
            slots.append(base + 8 * len(pointers))
        parameters = np.array(slots, np.uint64)
        launch = self.cp.cuda.driver.launchKernel
        stream = self.stream
        address = parameters.ctypes.data

        def call() -> None:
            launch(function, blocks, 1, 1, threads, 1, 1, shared, stream.ptr, address, 0)

        def run() -> None:
            _ = values  # the arguments live as long as the launcher
            if blocks > 0:
                self.enqueue(call)

        return run

    def enqueue(self, call: callable) -> None:
        """Run ``call`` (which enqueues work on this device's stream) with the device
        current; between two events when the device timer is on. DeviceError on failure."""
        timing = getattr(_capture, "pairs", None)
        with self.device:
            if timing is not None:
                start = self.stream.record(self.cp.cuda.Event())
            try:
                call()
            except DeviceError:
                raise
            except Exception as error:  # noqa: BLE001 - CUDADriverError, CUBLASError
                raise DeviceError(f"CUDA launch on cuda:{self.index} failed: "
                                  f"{error}") from error
            if timing is not None:
                timing.append((start, self.stream.record(self.cp.cuda.Event())))

    def fault_code(self, what: str, dim: int, size: int) -> int:
        """A code an index kernel writes on an out-of-range index, checked at the next wait."""
        with self.lock:
            code = len(self.faults) + 1
            self.faults[code] = Fault(what, dim, size)
            return code

    def check_faults(self) -> None:
        """After a finished wait: raise the first index fault recorded since the last check."""
        if not self.faults:
            return
        with self.lock, self.device:
            self.fault_buffer.copy_to_host_async(self.fault_host.ptr, 4 * FAULT_WORDS,
                                                 self.stream)
            self.stream.synchronize()
            words = np.frombuffer(self.fault_host, np.int32, FAULT_WORDS).copy()
            faults, self.faults = self.faults, {}
            if words[0] == 0:
                return
            self.fault_buffer.memset_async(0, 4 * FAULT_WORDS, self.stream)
        fault = faults.get(int(words[0]), Fault("index kernel", -1, -1))
        value = int(words[1:3].view(np.int64)[0])
        raise KernelIndexError(f"{fault.what}: index {value} is out of range for dim "
                               f"{fault.dim} of size {fault.size}")

    def record(self):
        """A CUDA event after the work queued so far."""
        with self.device:
            return self.stream.record(self.cp.cuda.Event(disable_timing=True))

    def finish(self) -> None:
        """Block until the stream is empty; then release staging buffers and check faults."""
        try:
            with self.device:
                self.stream.synchronize()
        except Exception as error:  # noqa: BLE001 - CUDARuntimeError
            raise DeviceError(f"CUDA stream on cuda:{self.index} failed: {error}") from error
        with self.lock:
            self.transfers.clear()
        self.check_faults()


def device_timer():
    """Start recording event pairs around this thread's launches; the returned stop function
    gives a callable summing their device seconds once they finish."""
    pairs: list = []
    previous = getattr(_capture, "pairs", None)
    _capture.pairs = pairs

    def stop():
        _capture.pairs = previous
        if previous is not None:
            previous.extend(pairs)
        return lambda: _seconds(pairs) if pairs else None

    return stop


def _seconds(pairs) -> float | None:
    try:
        import cupy as cp

        total = 0.0
        for start, stop in pairs:
            stop.synchronize()
            total += cp.cuda.get_elapsed_time(start, stop) * 1e-3
        return total
    except Exception:  # noqa: BLE001 - a failed launch: no time
        return None
