"""WgpuBackend: storage on wgpu buffers, host transfers through the batch, completions, drain."""

from __future__ import annotations

import threading
import weakref

import numpy as np

from fuel.backends.base import Backend, DeviceTimerStop
from fuel.backends.wgpu import runtime
from fuel.backends.wgpu.elements import (
    ALIGNMENT_BYTES,
    ELEMENTS,
    FEATURE_DTYPES,
    WGPU_DTYPES,
    buffer_bytes,
    device_bytes,
)
from fuel.backends.wgpu.runtime import CommandBatch, DeviceContext
from fuel.dispatch.kernel import KernelBindingTable
from fuel.ir import dtype as dt
from fuel.ir.device import BackendId, Device
from fuel.ir.dtype import DType
from fuel.ir.errors import DeviceError
from fuel.ir.layout import Layout
from fuel.memory import Storage


class WgpuCompletion:
    """A command batch (open or submitted): done when its fence buffer maps."""

    __slots__ = ("device", "context", "batch")

    def __init__(self, device: Device, context: DeviceContext, batch: CommandBatch) -> None:
        self.device = device
        self.context = context
        self.batch = batch

    def wait(self) -> None:
        """Submit the batch if it is still open, then block until it has run."""
        self.context.wait(self.batch)
        self.context.check_faults()


class WgpuBackend(Backend):
    """One wgpu adapter as ``vulkan:0`` or ``metal:0``: whichever API the adapter speaks."""

    kernel_source = "wgsl"

    def __init__(self, backend_id: BackendId, api: str) -> None:
        self.backend_id = backend_id
        self.api = api  # the adapter backend_type this id serves: "Vulkan" or "Metal"
        self._lock = threading.Lock()
        self._detected = False
        self._context: DeviceContext | None = None
        self._reason = ""

    # ------------------------------------------------------------------ detection

    def _detect(self) -> None:
        if self._detected:
            return
        with self._lock:
            if self._detected:
                return
            try:
                adapter, reason = runtime.detect()
                context = None
                if adapter is not None:
                    found = str(adapter.info.get("backend_type", ""))
                    if found != self.api:
                        reason = (f"the wgpu adapter here speaks {found or 'an unknown API'}, "
                                  f"not {self.api}")
                    else:
                        context = DeviceContext(adapter)
            except Exception as error:  # noqa: BLE001 - detection never raises
                context, reason = None, f"wgpu detection failed: {error}"
            self._context, self._reason = context, reason
            self._detected = True

    def is_available(self) -> bool:
        try:
            self._detect()
        except Exception:  # noqa: BLE001
            return False
        return self._context is not None

    def unavailable_reason(self) -> str:
        self._detect()
        return "" if self._context is not None else self._reason

    def devices(self) -> list[Device]:
        self._detect()
        return [Device(self.backend_id, 0)] if self._context is not None else []

    def context(self, device: Device) -> DeviceContext:
        """The DeviceContext of ``device``; DeviceError when it is unknown or lost."""
        self._detect()
        if self._context is None:
            raise DeviceError(f"device {device} is unavailable: {self._reason}")
        if device.backend is not self.backend_id or device.index != 0:
            raise DeviceError(f"device {device} does not exist; {self.backend_id.value} has: "
                              f"{self.backend_id.value}:0")
        self._context.check()
        return self._context

    def describe_device(self, device: Device) -> str:
        context = self.context(device)
        names = {dt.int64: "int64 (as int32)"}
        dtypes = ", ".join(names.get(d, d.name) for d in WGPU_DTYPES if d in self.kernel_dtypes(
            device))
        missing = "; ".join(f"no {d.name} kernels (the adapter lacks {feature})"
                            for d, feature in FEATURE_DTYPES.items()
                            if feature not in context.features)
        return f"{context.describe()}; kernels for {dtypes}" + (f"; {missing}" if missing else "")

    def kernel_dtypes(self, device: Device) -> frozenset[DType]:
        """The dtypes this device's kernels take: float16 only where the adapter has
        ``shader-f16`` (other dtypes are stored and moved, never computed on)."""
        features = self.context(device).features
        return frozenset(d for d in WGPU_DTYPES
                         if d not in FEATURE_DTYPES or FEATURE_DTYPES[d] in features)

    def lose_device(self, reason: str) -> None:
        """Mark the device lost (as wgpu reports a lost device): the open and in-flight
        batches are dropped and every later use raises DeviceError naming ``reason``."""
        context = self._context
        if context is not None:
            context.lost = reason or "lost"
            context.drop_open()

    def restore_device(self) -> None:
        """Undo ``lose_device`` (tests)."""
        if self._context is not None:
            self._context.lost = ""

    # ------------------------------------------------------------------ storage

    def allocate(self, device: Device, dtype: DType, size: int) -> Storage:
        context = self.context(device)
        nbytes = buffer_bytes(dtype, size)
        limit = context.max_buffer
        if nbytes > limit:
            raise DeviceError(
                f"cannot allocate {size} x {dtype.name} on {device} ({nbytes} bytes): above the "
                f"adapter's max-storage-buffer-binding-size / max-buffer-size ({limit} bytes)")
        buffer = context.buffers.take(nbytes)
        storage = Storage(buffer, dtype, size, device, self)
        weakref.finalize(storage, context.buffers.give_back, buffer, nbytes)
        return storage

    def upload(self, device: Device, array: np.ndarray) -> Storage:
        flat = np.ascontiguousarray(array).reshape(-1)
        storage = self.allocate(device, dt.from_numpy(flat.dtype), flat.size)
        self.write_from_host(storage, flat)
        return storage

    def write_from_host(self, storage: Storage, array: np.ndarray) -> None:
        """Record a copy of ``array`` (converted to the device's elements) into ``storage``:
        ordered with the recorded kernels, the host array copied at once."""
        data = device_bytes(np.asarray(array).reshape(-1), storage.dtype, storage.device)
        self.context(storage.device).write(storage.buffer, data)

    def download(self, storage: Storage, layout: Layout) -> np.ndarray:
        """The elements ``layout`` views (submits the open batch and waits for it)."""
        context = self.context(storage.device)
        if layout.numel == 0:
            return np.empty(layout.shape, storage.dtype.numpy)
        computed = storage.dtype in self.kernel_dtypes(storage.device)
        if computed and not layout.is_contiguous():  # gathered on the device: fewer bytes move
            from fuel.backends.wgpu.loops import strided_copy

            dense = self.allocate(storage.device, storage.dtype, layout.numel)
            strided_copy(storage, layout, dense, Layout.contiguous(layout.shape))
            storage, layout = dense, Layout.contiguous(layout.shape)
        # The bytes the layout spans (widened to whole words), viewed on the host.
        element = ELEMENTS.get(storage.dtype, storage.dtype.numpy)
        itemsize = element.itemsize
        low, high = layout.span()
        start = low * itemsize // ALIGNMENT_BYTES * ALIGNMENT_BYTES
        end = -(-high * itemsize // ALIGNMENT_BYTES) * ALIGNMENT_BYTES
        data = context.read(storage.buffer, start, end - start)
        context.check_faults()
        held = np.ndarray(layout.shape, element, data, layout.offset * itemsize - start,
                          tuple(s * itemsize for s in layout.strides))
        return held.astype(storage.dtype.numpy)

    def record_completion(self, storage: Storage) -> WgpuCompletion | None:
        """The batch holding the work recorded so far (None when nothing is pending)."""
        context = self.context(storage.device)
        with context.lock:
            batch = context.batch or (context.in_flight[-1] if context.in_flight else None)
        return None if batch is None else WgpuCompletion(storage.device, context, batch)

    def device_timer(self) -> DeviceTimerStop | None:
        """Timestamp the compute passes the current launch records (where the adapter has
        timestamp queries); read when the profile is taken."""
        context = self._context
        return runtime.device_timer() if context is not None and context.timestamps else None

    def synchronize(self, device: Device) -> None:
        """The drain: submit the open batch and wait for every submitted one."""
        context = self.context(device)
        context.finish()
        context.check_faults()

    def submit(self, device: Device) -> None:
        """Submit the open batch now (a backend boundary) without waiting for it."""
        self.context(device).submit()

    def memory_stats(self, device: Device) -> dict[str, int]:
        return self.context(device).buffers.stats()

    def register(self, table: KernelBindingTable) -> None:
        from fuel.backends.wgpu import kernels

        device = self.devices()[0]
        dtypes = self.kernel_dtypes(device)
        kernels.register(table, self.backend_id, dtypes)
        for dtype, feature in FEATURE_DTYPES.items():
            if dtype not in dtypes:
                table.note_missing_dtype(
                    self.backend_id, dtype, f"{device}'s adapter lacks the {feature} feature, "
                    f"which {dtype.name} kernels need: move the tensor to another device or "
                    f"cast it to float32.")
