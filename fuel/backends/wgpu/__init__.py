"""The wgpu backend: WGSL kernels in deferred command batches, on Vulkan (Linux, Windows;
lavapipe on machines without a GPU) or Metal (macOS) through one code path.

The adapter's API decides the backend id: ``vulkan:0`` or ``metal:0`` (``BACKENDS`` holds
both; the one the adapter does not speak reports itself unavailable with the reason).
Optional: without ``wgpu`` (``pip install pyfuel[wgpu]``) or an adapter, the backend loads,
reports itself unavailable and registers nothing.

Dtypes: kernels take float32, int32, uint32 and bool (a 32-bit word each), and float16 (two
bytes, computed in f32 and rounded as NumPy rounds) where the adapter has ``shader-f16``
(``WgpuBackend.kernel_dtypes``; without it float16 only moves). WGSL has no
64-bit integers, so int64 tensors are held as 32-bit integers: uploads refuse values outside
+-2**31, and integer arithmetic on them wraps at 32 bits. Index tensors (token ids, gather
indices, shapes) fit; a model needing wider integers keeps those tensors on the CPU. Every
other dtype is stored as raw bytes and only moves (Copy to and from other devices); an op on
it raises NoBackendForOp naming the dtype.
"""

from __future__ import annotations

from fuel.backends.wgpu.backend import WgpuBackend, WgpuCompletion
from fuel.ir.device import BackendId

BACKENDS = {
    BackendId.VULKAN: WgpuBackend(BackendId.VULKAN, "Vulkan"),
    BackendId.METAL: WgpuBackend(BackendId.METAL, "Metal"),
}
BACKEND = BACKENDS[BackendId.VULKAN]

__all__ = ["BACKEND", "BACKENDS", "WgpuBackend", "WgpuCompletion"]
