"""The OpenCL backend: asynchronous kernels on in-order queues (PoCL on CPUs, any GPU driver).

Optional: without pyopencl or a working OpenCL device the backend loads, reports itself
unavailable with a reason, and registers nothing. ``FUEL_OPENCL_DEVICE`` (an index into the
working devices, or part of a platform/device name) restricts it to one device.
"""

from __future__ import annotations

from fuel.backends.opencl.backend import OpenClBackend, OpenClCompletion

BACKEND = OpenClBackend()

__all__ = ["BACKEND", "OpenClBackend", "OpenClCompletion"]
