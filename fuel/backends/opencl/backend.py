"""OpenClBackend: storage on cl.Buffer, host transfers with events, completions and drain."""

from __future__ import annotations

import threading

import numpy as np

from fuel.backends.base import Backend, DeviceTimerStop
from fuel.backends.opencl import runtime
from fuel.backends.opencl.runtime import DeviceContext, cl, wrap_errors
from fuel.dispatch.kernel import BackendRecord, KernelBindingTable
from fuel.ir import dtype as dt
from fuel.ir.device import BackendId, Device
from fuel.ir.dtype import DType
from fuel.ir.errors import DeviceError
from fuel.ir.layout import Layout
from fuel.ir.ops import OpKind
from fuel.memory import Storage


class OpenClCompletion:
    """A marker event on a device's in-order queue: done when all earlier work is done."""

    __slots__ = ("device", "event", "context")

    def __init__(self, device: Device, event, context: DeviceContext) -> None:
        self.device = device
        self.event = event
        self.context = context

    def wait(self) -> None:
        """Block until the marker completes; raise DeviceError (or an index fault) on error."""
        with wrap_errors(f"OpenCL work on {self.device} failed"):
            self.event.wait()
            status = self.event.command_execution_status
        if status < 0:
            raise DeviceError(f"OpenCL work on {self.device} failed with status {status}")
        self.context.check_faults()


class OpenClBackend(Backend):
    """The OpenCL backend: devices ``opencl:0..n``, one in-order queue each."""

    backend_id = BackendId.OPENCL
    kernel_source = "opencl"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._detected = False
        self._candidates: list = []  # runtime.Candidate of each working device
        self._contexts: dict[int, DeviceContext] = {}  # made on a device's first use
        self._numbers: list[int] = []  # the N of opencl:N for each candidate
        self._devices: list[Device] = []
        self._rejected: list = []  # devices the probe turned down
        self._reason = ""
        self._offline = ""

    # ------------------------------------------------------------------ detection

    def _detect(self) -> None:
        if self._detected:
            return
        with self._lock:
            if self._detected:
                return
            try:
                found = runtime.detect_devices()
                candidates, reason, rejected = found.working, found.reason, found.rejected
            except Exception as error:  # detection must never raise
                candidates, reason, rejected = [], f"OpenCL detection failed: {error}", []
            self._candidates = candidates
            self._numbers = [c.number for c in candidates]
            self._devices = [Device(BackendId.OPENCL, n) for n in self._numbers]
            self._rejected = rejected
            self._reason = reason
            self._detected = True

    def is_available(self) -> bool:
        """Whether at least one OpenCL device works (and the backend is online)."""
        try:
            self._detect()
        except Exception:
            return False
        return bool(self._candidates) and not self._offline

    def unavailable_reason(self) -> str:
        self._detect()
        return self._offline or ("" if self._candidates else self._reason)

    def unusable_devices(self) -> list[tuple[str, str]]:
        """(device, why) for each device the probe turned down."""
        self._detect()
        return [(candidate.label, candidate.error) for candidate in self._rejected]

    def take_offline(self, reason: str) -> None:
        """Make the backend unavailable, as when its devices disappear: every later use of an
        OpenCL device or storage raises DeviceError with ``reason``."""
        self._offline = reason or "taken offline"

    def bring_online(self) -> None:
        """Undo ``take_offline``."""
        self._offline = ""

    def devices(self) -> list[Device]:
        self._detect()
        return list(self._devices)

    def _candidate(self, device: Device):
        """The detected device behind ``device``; DeviceError when it is gone or unknown."""
        if self._offline:
            raise DeviceError(f"device {device} is unavailable: {self._offline}")
        self._detect()
        if device.backend is not BackendId.OPENCL or device.index not in self._numbers:
            names = ", ".join(str(d) for d in self._devices) or "none"
            raise DeviceError(f"device {device} does not exist; opencl has: {names}")
        return self._candidates[self._numbers.index(device.index)]

    def context(self, device: Device) -> DeviceContext:
        """The DeviceContext of ``device`` (made on its first use); DeviceError when it is gone
        or unknown."""
        candidate = self._candidate(device)
        found = self._contexts.get(device.index)
        if found is None:
            with self._lock:
                found = self._contexts.get(device.index)
                if found is None:
                    with wrap_errors(f"cannot set up {device}"):
                        found = self._contexts[device.index] = DeviceContext(candidate)
        return found

    def describe_device(self, device: Device) -> str:
        return runtime.describe(self._candidate(device))

    def supports_fp64(self) -> bool:
        """Whether every device runs float64 kernels (cl_khr_fp64)."""
        self._detect()
        return bool(self._candidates) and all(runtime.has_fp64(c.device)
                                              for c in self._candidates)

    # ------------------------------------------------------------------ storage

    def allocate(self, device: Device, dtype: DType, size: int) -> Storage:
        context = self.context(device)
        nbytes = size * dtype.itemsize
        buffer = context.buffers.buffer(nbytes, f"{size} x {dtype.name} on {device}")
        storage = Storage(buffer, dtype, size, device, self)
        context.buffers.track(storage, nbytes)
        return storage

    def upload(self, device: Device, array: np.ndarray) -> Storage:
        flat = np.ascontiguousarray(array).reshape(-1)
        storage = self.allocate(device, dt.from_numpy(flat.dtype), flat.size)
        self.write_from_host(storage, flat)
        return storage

    def write_from_host(self, storage: Storage, array: np.ndarray) -> None:
        """Enqueue a non-blocking copy of ``array`` into ``storage``. The copy reads a private
        snapshot of ``array`` (kept alive by the transfer's event), so the caller may reuse
        its memory at once: a pooled CPU buffer, a NumPy array the user keeps writing."""
        host = np.array(array, copy=True, order="C").reshape(-1)
        if host.size == 0:
            return
        context = self.context(storage.device)
        with wrap_errors(f"upload to {storage.device} failed"), context.lock:
            event = cl.enqueue_copy(context.queue, storage.buffer, host, is_blocking=False)
            context.keep_host_transfer(runtime.note_event(event))

    def download(self, storage: Storage, layout: Layout) -> np.ndarray:
        """The elements ``layout`` views, as a host array (waits for the queued work)."""
        context = self.context(storage.device)
        if layout.numel == 0:
            return np.empty(layout.shape, storage.dtype.numpy)
        if not layout.is_contiguous():
            from fuel.backends.opencl.movement import strided_copy

            dense = self.allocate(storage.device, storage.dtype, layout.numel)
            strided_copy(storage, layout, dense, Layout.contiguous(layout.shape))
            storage, layout = dense, Layout.contiguous(layout.shape)
        host = np.empty(layout.numel, storage.dtype.numpy)
        with wrap_errors(f"download from {storage.device} failed"):
            with context.lock:
                event = runtime.note_event(cl.enqueue_copy(
                    context.queue, host, storage.buffer,
                    src_offset=layout.offset * storage.dtype.itemsize, is_blocking=False))
            event.wait()
        context.check_faults()
        return host.reshape(layout.shape)

    def record_completion(self, storage: Storage) -> OpenClCompletion:
        """A marker after the work enqueued so far on the storage's queue."""
        context = self.context(storage.device)
        with wrap_errors(f"cannot record an event on {storage.device}"), context.lock:
            event = cl.enqueue_marker(context.queue)
        return OpenClCompletion(storage.device, event, context)

    def device_timer(self) -> DeviceTimerStop:
        """Time the OpenCL commands the current launch enqueues (see ``op_profile``)."""
        return runtime.device_timer()

    def synchronize(self, device: Device) -> None:
        """The realize-end drain: ``finish()`` the device's queue, then report index faults."""
        self.context(device).finish()

    def memory_stats(self, device: Device) -> dict[str, int]:
        """Live buffers and bytes fuel holds on ``device``, their peak, and the bytes of
        released buffers kept for reuse."""
        return self.context(device).buffers.stats()

    def empty_cache(self) -> None:
        """Give every cached (released, kept for reuse) buffer back to the driver."""
        for context in list(self._contexts.values()):
            context.buffers.release_cached()

    def register(self, table: KernelBindingTable) -> None:
        """Add each kernel module's bindings; float64 ones only where every device runs
        double precision."""
        from fuel.backends.opencl import elementwise, matmul, movement, quantized, reduce, rows

        keep = None if self.supports_fp64() else _without_float64
        for module in (elementwise, movement, reduce, rows, matmul, quantized):
            module.KERNELS.register_into(table, keep)
        from fuel.backends.opencl import fused

        # Fused nodes: a generator rendering each node's LoopKernel into OpenCL C, and the
        # renderer as this backend's fusion target (read by the resolution pass).
        table.register(OpKind.FUSED, (), BackendId.OPENCL, fused.generate_opencl_kernel,
                       fused.GENERATED, fused.KERNEL_SOURCE)
        table.declare_backend(BackendId.OPENCL, BackendRecord(
            fusion=fused.fusion_target(self.supports_fp64(), PREFERS_DECOMPOSED)))


# The composites whose hand-written kernel loses to the fused rendering of their decomposition
# here (float32/float64; a row op over the last dim only): they are decomposed so they fuse
# with their neighbours. On PoCL (opencl:0, bench/fusion.py --only opencl), (4096, 4096)
# float32, fused / hand-written: softmax 0.70x, layer_norm 0.73x, gelu 0.90x (its per-op
# kernel renders the same expression: decomposing costs nothing alone and saves a pass per
# neighbour it fuses with; so for gelu_tanh, silu, sigmoid); rms_norm 1.14x (slower: it keeps
# its kernel); log_softmax not measured (keeps its kernel).
PREFERS_DECOMPOSED = frozenset({
    OpKind.SOFTMAX, OpKind.LAYER_NORM, OpKind.GELU, OpKind.GELU_TANH, OpKind.SILU,
    OpKind.SIGMOID})


def _without_float64(dtypes: tuple[DType, ...]) -> bool:
    return dt.float64 not in dtypes

