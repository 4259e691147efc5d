"""FUEL_OPENCL_DEVICE=N keeps the device's number: the one device left is opencl:N, not a
renumbered opencl:0 (checked with stand-in devices, so no OpenCL driver is needed)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from fuel.backends.opencl import OpenClBackend, backend, runtime
from fuel.ir.device import BackendId, Device
from fuel.ir.errors import DeviceError


def _candidates(count: int) -> list:
    def named(name: str):
        return SimpleNamespace(name=name, version="OpenCL 3.0")

    return [runtime.Candidate(named("platform"), named(f"device {i}"), 0, i)
            for i in range(count)]


def test_the_chosen_device_keeps_its_number(monkeypatch):
    monkeypatch.setenv(runtime.DEVICE_ENVIRONMENT, "1")
    chosen, reason = runtime._choose(_candidates(3))
    assert not reason and [c.number for c in chosen] == [1]
    monkeypatch.setattr(runtime, "detect_devices", lambda: runtime.Detection(chosen, ""))
    monkeypatch.setattr(backend, "DeviceContext", lambda candidate: candidate)
    opencl = OpenClBackend()
    assert opencl.devices() == [Device(BackendId.OPENCL, 1)]
    assert opencl.context(Device(BackendId.OPENCL, 1)) is chosen[0]
    with pytest.raises(DeviceError, match="opencl:1"):
        opencl.context(Device(BackendId.OPENCL, 0))


def test_without_a_choice_devices_are_numbered_in_order(monkeypatch):
    monkeypatch.delenv(runtime.DEVICE_ENVIRONMENT, raising=False)
    chosen, _ = runtime._choose(_candidates(2))
    assert [c.number for c in chosen] == [0, 1]
