"""A test-only device backend: kernels run on a worker thread behind an in-order queue.

It declares a backend id of its own (``threaded`` by default) and registers through the
public API, so the executor's asynchronous paths (Pending handles, waits, the drain) run
without hardware.
"""

from __future__ import annotations

import queue
import threading
import time
from concurrent.futures import Future

import numpy as np

from fuel.backends.base import Backend
from fuel.dispatch.kernel import KernelBindingTable, KernelCaps
from fuel.ir import dtype as dt
from fuel.ir.device import BackendId, Device
from fuel.ir.ops import OpKind
from fuel.memory import Storage

THREADED = BackendId.register("threaded")
DEVICE = Device(THREADED, 0)


class DeviceFault(RuntimeError):
    """What the worker raises for a kernel that faults on the 'device'."""


class ThreadedCompletion:
    """A marker enqueued behind the node's work: its future completes when the work did."""

    def __init__(self, device: Device, marker: Future) -> None:
        self.device = device
        self.marker = marker

    def wait(self) -> None:
        self.marker.result(timeout=30)


class ThreadedBackend(Backend):
    """Serves ``backend_id`` (``threaded`` by default); its device is ``<backend>:0``."""

    kernel_source = "test-thread"

    def __init__(self, delay: float = 0.0, backend_id: BackendId = THREADED) -> None:
        self.backend_id = backend_id
        self.device = Device(backend_id, 0)
        self.dense_layouts: list = []
        self.delay = delay
        self.queue: queue.Queue = queue.Queue()
        self.fault: BaseException | None = None
        self.completions_recorded = 0
        self.available = True
        self.rejected = None  # a NumPy function whose launches raise (failures in a replay)
        self.worker = threading.Thread(target=self._run, daemon=True)
        self.worker.start()

    # ---------------------------------------------------------------- the in-order queue
    def _run(self) -> None:
        while True:
            work, future = self.queue.get()
            try:
                if self.fault is not None and future is not None:
                    raise DeviceFault(f"queue is faulted: {self.fault}")
                if work is not None:
                    if self.delay:
                        time.sleep(self.delay)
                    work()
                if future is not None:
                    future.set_result(None)
            except BaseException as error:  # a device fault: sticky, like CUDA's
                if self.fault is None:
                    self.fault = error
                if future is not None:
                    future.set_exception(error)

    def enqueue(self, work) -> None:
        self.queue.put((work, None))

    def marker(self) -> Future:
        future: Future = Future()
        self.queue.put((None, future))
        return future

    # ---------------------------------------------------------------- Backend contract
    def is_available(self) -> bool:
        return self.available

    def unavailable_reason(self) -> str:
        return "" if self.available else "test device unplugged"

    def devices(self) -> list[Device]:
        return [self.device]

    def describe_device(self, device: Device) -> str:
        return "worker-thread test device"

    def allocate(self, device, dtype, size) -> Storage:
        return Storage(np.zeros(size, dtype=dtype.numpy), dtype, size, self.device, self)

    def upload(self, device, array) -> Storage:
        flat = np.array(array, copy=True).reshape(-1)
        return Storage(flat, dt.from_numpy(flat.dtype), flat.size, self.device, self)

    def write_from_host(self, storage, array) -> None:
        data = np.array(array, copy=True).reshape(-1)
        self.enqueue(lambda: storage.buffer.__setitem__(slice(0, data.size), data))

    def download(self, storage, layout) -> np.ndarray:
        # No synchronization on purpose: the executor's drain must make results visible.
        from fuel.backends.cpu.arrays import view

        return view(storage, layout)

    def record_completion(self, storage) -> ThreadedCompletion:
        self.completions_recorded += 1
        return ThreadedCompletion(self.device, self.marker())

    def synchronize(self, device) -> None:
        self.marker().result(timeout=30)

    def register(self, table: KernelBindingTable) -> None:
        strided = KernelCaps(strided_input=True)
        for d in (dt.float32, dt.int64):
            table.register(OpKind.ADD, (d, d, d), self.backend_id, self._binary(np.add),
                           strided, self.kernel_source)
            table.register(OpKind.MUL, (d, d, d), self.backend_id, self._binary(np.multiply),
                           strided, self.kernel_source)
            table.register(OpKind.COPY, (d, d), self.backend_id, self._copy_out, strided,
                           self.kernel_source)
            table.register(OpKind.CONTIGUOUS, (d, d), self.backend_id, self._contiguous,
                           strided, self.kernel_source)
        table.register(OpKind.SQRT, (dt.float32, dt.float32), self.backend_id,
                       self._faulting_on_device, strided, self.kernel_source)
        table.register(OpKind.EXP, (dt.float32, dt.float32), self.backend_id,
                       self._failing_at_launch, strided, self.kernel_source)
        table.register(OpKind.NEG, (dt.float32, dt.float32), self.backend_id, self._dense_neg,
                       KernelCaps(), self.kernel_source)

    # ---------------------------------------------------------------- kernels
    def _binary(self, function):
        def kernel(inputs, outputs, layouts, params):
            from fuel.backends.cpu.arrays import output, view

            if function is self.rejected:
                raise ValueError(f"{function.__name__} launch rejected")
            a, b = (view(s, layout) for s, layout in zip(inputs, layouts))
            out = output(outputs[0], layouts[-1])
            self.enqueue(lambda: function(a, b, out=out))

        return kernel

    def _contiguous(self, inputs, outputs, layouts, params):
        from fuel.backends.cpu.arrays import output, view

        source = view(inputs[0], layouts[0])
        out = output(outputs[0], layouts[-1])
        self.enqueue(lambda: out.__setitem__(Ellipsis, source))

    def _copy_out(self, inputs, outputs, layouts, params):
        from fuel.backends.cpu.arrays import view

        self.marker().result(timeout=30)  # the source's queued work must have landed
        target = outputs[0]
        target.backend.write_from_host(target, np.ascontiguousarray(view(inputs[0], layouts[0])))

    def _dense_neg(self, inputs, outputs, layouts, params):
        """A kernel without strided_input: it reads its input as dense from element 0."""
        self.dense_layouts.append(layouts[0])
        source, out = inputs[0].buffer, outputs[0].buffer
        count = outputs[0].size
        self.enqueue(lambda: np.negative(source[:count], out=out))

    def _faulting_on_device(self, inputs, outputs, layouts, params):
        def fault():
            raise DeviceFault("illegal address in sqrt")

        self.enqueue(fault)

    def _failing_at_launch(self, inputs, outputs, layouts, params):
        raise ValueError("exp kernel rejected its launch configuration")


_SHARED: dict = {}


def shared_backend(name: str = "threaded", delay: float = 0.0) -> ThreadedBackend:
    """The one test backend registered under the backend id ``name`` in this process.

    The binding table is append-only and the first registered kernel wins, so a second
    backend object for the same id would never see its own kernels run: share one.
    """
    from fuel.backends import register_backend

    backend = _SHARED.get(name)
    if backend is None:
        backend = _SHARED[name] = ThreadedBackend(delay, BackendId.register(name))
        register_backend(backend)
    backend.delay = delay
    backend.available = True
    return backend
