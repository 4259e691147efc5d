"""A test-only backend that registers exactly the primitive set (``PRIMITIVE_OPS``).

Its kernels are the CPU backend's NumPy kernels for the primitive ops and nothing else, so
every other op must reach it through a decomposition: the proof that the primitive set is
enough for the front end, ONNX and the models.
"""

from __future__ import annotations

import numpy as np

from fuel.backends.cpu import KERNEL_MODULES, CpuBackend
from fuel.dispatch.kernel import KernelBindingTable
from fuel.ir.device import BackendId, Device
from fuel.ir.dtype import DType, from_numpy
from fuel.ir.ops import PRIMITIVE_OPS
from fuel.memory import Storage

PRIMITIVE_BACKEND_ID = BackendId.register("primitive")
DEVICE = Device(PRIMITIVE_BACKEND_ID, 0)


class PrimitiveBackend(CpuBackend):
    """NumPy buffers, every kernel synchronous; only the primitive ops have kernels."""

    backend_id = PRIMITIVE_BACKEND_ID
    kernel_source = "primitive-numpy"

    def devices(self) -> list[Device]:
        return [DEVICE]

    def describe_device(self, device: Device) -> str:
        return "NumPy kernels for the primitive ops only (test backend)"

    def allocate(self, device: Device, dtype: DType, size: int) -> Storage:
        return Storage(np.empty(size, dtype=dtype.numpy), dtype, size, DEVICE, self)

    def upload(self, device: Device, array: np.ndarray) -> Storage:
        flat = np.array(array, copy=True).reshape(-1)
        return Storage(flat, from_numpy(flat.dtype), flat.size, DEVICE, self)

    def register(self, table: KernelBindingTable) -> None:
        for module in KERNEL_MODULES:
            for op, dtypes, function, caps in module.KERNELS.rows:
                if op in PRIMITIVE_OPS:
                    table.register(op, dtypes, PRIMITIVE_BACKEND_ID, function, caps,
                                   self.kernel_source)


_BACKEND: list = []


def primitive_backend() -> PrimitiveBackend:
    """The one primitive backend of this process, registered on first use."""
    from fuel.backends import find_backend, register_backend

    if not _BACKEND:
        _BACKEND.append(PrimitiveBackend())
    if find_backend(PRIMITIVE_BACKEND_ID) is not _BACKEND[0]:
        register_backend(_BACKEND[0])
    return _BACKEND[0]


if __name__ == "__main__":  # python -m tests.backends.primitive_backend [conformance args]
    import sys

    from fuel.conformance.onnx import main

    primitive_backend()
    sys.exit(main(sys.argv[1:] + ["--device", str(DEVICE)]))
