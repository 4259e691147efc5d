"""Helpers of the OpenCL tests: the backend (or a skip with the reason it is unavailable) and
the count of live OpenCL buffers."""

from __future__ import annotations

import gc

import pytest

import fuel
from fuel.backends import find_backend
from fuel.ir.device import BackendId


def opencl_backend():
    backend = find_backend(BackendId.OPENCL)
    if backend is None or not backend.is_available():
        from fuel.backends import _load_errors

        reason = backend.unavailable_reason() if backend is not None else \
            _load_errors.get(BackendId.OPENCL, "not registered")
        pytest.skip(f"OpenCL is unavailable: {reason}")
    return backend


def live_buffers(backend, device) -> int:
    """OpenCL buffers fuel still holds on ``device`` once idle pooled buffers are released."""
    fuel.empty_cache()
    gc.collect()
    return backend.memory_stats(device)["live_buffers"]
