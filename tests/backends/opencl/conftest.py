"""Fixtures of the backend tests."""

from __future__ import annotations

import pytest

from fuel.dispatch.completion import in_flight
from tests.backends.opencl.support import opencl_backend


@pytest.fixture
def opencl():
    """(backend, device), skipping with the reason when OpenCL is unavailable; afterwards the
    backend is back online and the device's in-flight counter is zero."""
    backend = opencl_backend()
    device = backend.devices()[0]
    yield backend, device
    backend.bring_online()
    assert in_flight(device) == 0
