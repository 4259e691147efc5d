"""The CUDA backend: NVIDIA GPUs through CuPy (the ``cuda`` extra): kernels rendered from the
kernel IR into CUDA C and compiled by NVRTC, matmul on cuBLAS, one stream per device with CUDA
events as completion handles.

Optional: without CuPy, an NVIDIA driver or a device, the backend loads, reports itself
unavailable with the reason (``fuel backends``), and registers nothing.
"""

from __future__ import annotations

from fuel.backends.cuda.backend import CudaBackend, CudaCompletion

BACKEND = CudaBackend()

__all__ = ["BACKEND", "CudaBackend", "CudaCompletion"]
