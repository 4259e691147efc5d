"""The wgpu device fixture of the backend tests."""

from __future__ import annotations

import pytest

from fuel.dispatch.completion import in_flight


@pytest.fixture
def wgpu_device():
    """(backend, device, context); afterwards the device works and nothing is in flight."""
    from fuel.backends import find_backend
    from fuel.ir.device import BackendId

    backend = None
    for backend_id in (BackendId.VULKAN, BackendId.METAL):
        candidate = find_backend(backend_id)
        if candidate is not None and candidate.is_available():
            backend = candidate
    if backend is None:
        reason = find_backend(BackendId.VULKAN)
        pytest.skip(f"no wgpu adapter: {reason.unavailable_reason() if reason else 'no module'}")
    device = backend.devices()[0]
    yield backend, device, backend.context(device)
    backend.restore_device()
    assert in_flight(device) == 0
