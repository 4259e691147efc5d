"""The wgpu device the model and ONNX tests run on, or a skip naming why there is none."""

from __future__ import annotations

import pytest


def wgpu_device():
    """The first available wgpu device (``vulkan:0`` or ``metal:0``); skips otherwise."""
    from fuel.backends import find_backend
    from fuel.ir.device import BackendId

    reasons = []
    for backend_id in (BackendId.VULKAN, BackendId.METAL):
        backend = find_backend(backend_id)
        if backend is not None and backend.is_available():
            return backend.devices()[0]
        reasons.append(f"{backend_id.value}: "
                       f"{backend.unavailable_reason() if backend else 'not loaded'}")
    pytest.skip(f"no wgpu adapter ({'; '.join(reasons)})")
