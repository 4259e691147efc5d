"""CudaBackend: storage on CuPy device memory, pinned host transfers, CUDA events as
completions, the stream drain, and registration of the CUDA kernels."""

from __future__ import annotations

import threading
import weakref

import numpy as np

from fuel.backends.base import Backend, DeviceTimerStop
from fuel.backends.cuda import runtime
from fuel.backends.cuda.runtime import DeviceContext
from fuel.dispatch.kernel import BackendRecord, KernelBindingTable
from fuel.ir import dtype as dt
from fuel.ir.device import BackendId, Device
from fuel.ir.dtype import DType
from fuel.ir.errors import DeviceError
from fuel.ir.layout import Layout
from fuel.ir.ops import OpKind
from fuel.memory import Storage


class CudaCompletion:
    """A CUDA event recorded on a device's stream: done when all earlier work is done."""

    __slots__ = ("device", "event", "context")

    def __init__(self, device: Device, event, context: DeviceContext) -> None:
        self.device = device
        self.event = event
        self.context = context

    def wait(self) -> None:
        """Block until the event passes; DeviceError (or an index fault) on error."""
        try:
            self.event.synchronize()
        except Exception as error:  # noqa: BLE001 - CUDARuntimeError
            raise DeviceError(f"CUDA work on {self.device} failed: {error}") from error
        self.context.check_faults()


class CudaBackend(Backend):
    """The CUDA backend: devices ``cuda:0..n``, one stream each."""

    backend_id = BackendId.CUDA
    kernel_source = "cuda"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._detection: runtime.Detection | None = None
        self._contexts: dict[int, DeviceContext] = {}

    def _detect(self) -> runtime.Detection:
        if self._detection is None:
            with self._lock:
                if self._detection is None:
                    try:
                        self._detection = runtime.detect()
                    except Exception as error:  # noqa: BLE001 - detection never raises
                        self._detection = runtime.Detection([], f"CUDA detection failed: "
                                                                f"{error}")
        return self._detection

    def is_available(self) -> bool:
        """Whether CuPy, a driver, NVRTC and at least one device are here."""
        try:
            return bool(self._detect().indices)
        except Exception:  # noqa: BLE001
            return False

    def unavailable_reason(self) -> str:
        found = self._detect()
        return "" if found.indices else found.reason

    def devices(self) -> list[Device]:
        return [Device(BackendId.CUDA, index) for index in self._detect().indices]

    def context(self, device: Device) -> DeviceContext:
        """The DeviceContext of ``device`` (made on first use); DeviceError when unknown."""
        found = self._contexts.get(device.index)
        if found is not None:
            return found
        if device.backend is not BackendId.CUDA or device.index not in self._detect().indices:
            names = ", ".join(str(d) for d in self.devices()) or "none"
            raise DeviceError(f"device {device} does not exist; cuda has: {names}")
        with self._lock:
            found = self._contexts.get(device.index)
            if found is None:
                try:
                    found = self._contexts[device.index] = DeviceContext(device.index)
                except DeviceError:
                    raise
                except Exception as error:  # noqa: BLE001 - CUDA errors of any kind
                    raise DeviceError(f"cannot set up {device}: {error}") from error
        return found

    def describe_device(self, device: Device) -> str:
        return runtime.describe(device.index)

    # ------------------------------------------------------------------ storage

    def allocate(self, device: Device, dtype: DType, size: int) -> Storage:
        context = self.context(device)
        nbytes = size * dtype.itemsize
        buffer = context.allocate(nbytes, f"{size} x {dtype.name} on {device}")
        storage = Storage(buffer, dtype, size, device, self)
        context.track(nbytes)
        weakref.finalize(storage, context.release, nbytes)
        return storage

    def upload(self, device: Device, array: np.ndarray) -> Storage:
        flat = np.ascontiguousarray(array).reshape(-1)
        storage = self.allocate(device, dt.from_numpy(flat.dtype), flat.size)
        self.write_from_host(storage, flat)
        return storage

    def write_from_host(self, storage: Storage, array: np.ndarray) -> None:
        """Enqueue a copy of ``array`` into ``storage`` through pinned staging memory (the
        caller may reuse ``array`` at once)."""
        host = np.ascontiguousarray(array).reshape(-1)
        if host.dtype.itemsize != storage.dtype.itemsize:
            host = host.astype(storage.dtype.numpy)
        self.context(storage.device).upload(storage.buffer, host)

    def download(self, storage: Storage, layout: Layout) -> np.ndarray:
        """The elements ``layout`` views, as a host array (waits for the queued work)."""
        if layout.numel == 0:
            return np.empty(layout.shape, storage.dtype.numpy)
        context = self.context(storage.device)
        if not layout.is_contiguous():
            from fuel.backends.cuda.kernels import loop_kernel
            from fuel.backends.cuda.loops import copy_loop

            dense_layout = Layout.contiguous(layout.shape)
            dense = self.allocate(storage.device, storage.dtype, layout.numel)
            loop_kernel(copy_loop(storage.dtype, layout, dense_layout)).prepare(
                [storage], [dense], [layout, dense_layout], None)()
            storage, layout = dense, dense_layout
        itemsize = storage.dtype.itemsize
        raw = context.download(storage.buffer, layout.offset * itemsize, layout.numel * itemsize)
        return raw.view(storage.dtype.numpy).reshape(layout.shape)

    def record_completion(self, storage: Storage) -> CudaCompletion:
        """An event after the work enqueued so far on the storage's stream."""
        context = self.context(storage.device)
        return CudaCompletion(storage.device, context.record(), context)

    def device_timer(self) -> DeviceTimerStop:
        """Time the launches of the current step with event pairs (see ``op_profile``)."""
        return runtime.device_timer()

    def synchronize(self, device: Device) -> None:
        """The realize-end drain: synchronize the device's stream, then report index faults."""
        self.context(device).finish()

    def memory_stats(self, device: Device) -> dict[str, int]:
        """Live buffers and bytes fuel holds on ``device``, their peak, and the pool's
        cached bytes."""
        return self.context(device).stats()

    def empty_cache(self) -> None:
        """Give every cached (freed, kept for reuse) block back to the driver."""
        for context in list(self._contexts.values()):
            context.pool.free_all_blocks()

    def register(self, table: KernelBindingTable) -> None:
        """Add every kernel module's bindings, the fused-kernel generator and the fusion
        target."""
        from fuel.backends.cuda import kernels, matmul, ops

        for module in (ops, matmul):
            module.KERNELS.register_into(table)
        table.register(OpKind.FUSED, (), BackendId.CUDA, kernels.generate_cuda_kernel,
                       kernels.GENERATED, kernels.KERNEL_SOURCE)
        table.declare_backend(BackendId.CUDA, BackendRecord(
            fusion=kernels.fusion_target(PREFERS_DECOMPOSED)))


# The composites decomposed so they fuse with their neighbours: their per-op CUDA kernels
# render the same expressions, so decomposing costs nothing alone and saves a memory pass per
# neighbour they fuse with (as on OpenCL). The row ops keep their kernels until measured on a
# device (docs/cuda.md).
PREFERS_DECOMPOSED = frozenset({OpKind.GELU, OpKind.GELU_TANH, OpKind.SILU, OpKind.SIGMOID})
