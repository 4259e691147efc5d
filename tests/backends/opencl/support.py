"""Helpers of the OpenCL tests: the backend (or a skip with the reason it is unavailable) and
the count of live OpenCL buffers."""

from __future__ import annotations

import gc

import pytest

import fuel
from fuel.backends import get_backend
from fuel.backends.base import Backend
from fuel.ir.device import BackendId, Device
from fuel.ir.errors import DeviceError


def opencl_backend() -> Backend:
    """The OpenCL backend, or a skip naming why it is unavailable."""
    try:
        return get_backend(Device(BackendId.OPENCL, 0))
    except DeviceError as error:
        pytest.skip(f"OpenCL is unavailable: {error}")


def opencl_device() -> str:
    """The default OpenCL device (the first one detection accepted, whatever its number), or a
    skip naming why there is none."""
    return str(opencl_backend().devices()[0])


def live_buffers(backend, device) -> int:
    """OpenCL buffers fuel still holds on ``device`` once idle pooled buffers are released."""
    fuel.empty_cache()
    gc.collect()
    return backend.memory_stats(device)["live_buffers"]
