"""OpenCL detection and bad input: build failures, device faults, oversize allocations and a
device that disappears. Each leaves every counter at zero, no leaked buffer, and a working
next realize."""

from __future__ import annotations

import numpy as np
import pytest

import fuel
import fuel.nn.tensor_ops
from fuel.backends.opencl import OpenClBackend, probe, runtime
from fuel.backends.opencl.codegen import ProgramSpec
from fuel.dispatch import in_flight
from fuel.dispatch.kernel import global_table
from fuel.ir import dtype as dt
from fuel.ir.device import BackendId
from fuel.ir.errors import DeviceError, IndexOutOfRange, KernelError
from fuel.ir.ops import OpKind
from tests.backends.opencl.support import live_buffers, opencl_backend


def test_detection_never_raises_without_pyopencl(monkeypatch):
    monkeypatch.setattr(runtime, "cl", None)
    backend = OpenClBackend()
    assert backend.is_available() is False
    assert "pyopencl" in backend.unavailable_reason()
    assert backend.devices() == []


def test_devices_whose_compiler_fails_are_left_out(monkeypatch):
    opencl_backend()

    def reject(candidates, platforms):
        for candidate in candidates:
            candidate.error = "matmul kernel failed: error: unknown target CPU 'generic'"

    monkeypatch.setattr(probe, "probe_devices", reject)
    backend = OpenClBackend()
    assert not backend.is_available()
    assert "unknown target CPU" in backend.unavailable_reason()
    unusable = backend.unusable_devices()
    assert unusable and all("unknown target CPU" in why for _, why in unusable)


def test_detection_order_is_stable_and_env_picks_one(monkeypatch):
    opencl_backend()
    first, reason = runtime.detect()
    again, _ = runtime.detect()
    assert not reason and [c.label for c in first] == [c.label for c in again]
    monkeypatch.setenv(runtime.DEVICE_ENVIRONMENT, str(len(first) - 1))
    chosen, _ = runtime.detect()
    assert [c.label for c in chosen] == [first[-1].label]
    monkeypatch.setenv(runtime.DEVICE_ENVIRONMENT, first[0].device.name.strip()[:6])
    assert runtime.detect()[0][0].label == first[0].label
    monkeypatch.setenv(runtime.DEVICE_ENVIRONMENT, "no-such-device")
    chosen, reason = runtime.detect()
    assert chosen == [] and "no-such-device" in reason and first[0].label in reason


def test_build_failure_is_a_kernel_error_with_the_compiler_log(opencl):
    backend, device = opencl
    spec = ProgramSpec("broken", "__kernel void broken(__global float* x) "
                                 "{ x[0] = not_a_symbol; }")
    with pytest.raises(KernelError, match="not_a_symbol") as info:
        backend.context(device).kernel(spec, "broken")
    assert "broken" in str(info.value)


def test_build_failure_inside_a_realize_names_the_node(opencl, monkeypatch):
    backend, device = opencl
    from fuel.backends.opencl.common import ClKernel
    from fuel.backends.opencl.elementwise import run_walk

    broken = ProgramSpec("broken_tan", "__kernel void tan_broken(__global float* out, "
                                       "__global const float* in0, const walk_t w) "
                                       "{ out[0] = tangent_of(in0[0]); }")
    table = global_table().copy()
    # (cumprod: an op OpenCL has no kernel of its own for, so the broken one is the one used)
    table.register(OpKind.CUMPROD, (dt.float32, dt.float32), BackendId.OPENCL,
                   ClKernel(run_walk, broken, "tan_broken"), kernel_source="opencl")
    monkeypatch.setattr("fuel.runtime.executor.global_table", lambda: table)
    x = fuel.ones(3).to(device)
    y = fuel.nn.tensor_ops.cumprod(x, 0)
    with pytest.raises(KernelError, match="tangent_of") as info:
        y.realize()
    assert "cumprod" in str(info.value) and "test_faults.py" in str(info.value)
    assert in_flight(device) == 0
    np.testing.assert_allclose((x * 2).numpy(), [2, 2, 2])


def test_device_fault_surfaces_at_the_wait_and_names_the_node(opencl):
    backend, device = opencl
    before = live_buffers(backend, device)
    x = fuel.from_numpy(np.arange(12, dtype=np.float32).reshape(3, 4)).to(device)
    index = fuel.tensor([[0, 1, 7, 2]], device=device)
    gathered = x.gather(0, index)      # index 7 is out of range for dim 0 of size 3
    with pytest.raises(IndexOutOfRange, match="index 7 is out of range for dim 0") as info:
        gathered.to("cpu").realize()   # the gather is waited before its copy: names the node
    assert "gather" in str(info.value) and "test_faults.py" in str(info.value)
    assert in_flight(device) == 0
    with pytest.raises(IndexOutOfRange, match="-9"):
        x.index_select(1, fuel.tensor([0, -9], device=device)).realize()  # found at the drain
    assert in_flight(device) == 0
    del x, index, gathered, info  # the traceback holds the failed realize's frames
    assert live_buffers(backend, device) == before
    y = fuel.from_numpy(np.arange(4, dtype=np.float32)).to(device)
    np.testing.assert_array_equal(y.index_select(0, fuel.tensor([3, -1], device=device))
                                  .numpy(), [3, 3])


def test_kernel_failure_with_pending_handles_balances_counters(opencl):
    backend, device = opencl
    x = fuel.from_numpy(np.ones((2, 3), np.float32)).to(device)
    waited = (x + 1.0).to("cpu")          # its producer holds a Pending handle ...
    nine = fuel.ones(*(2,) * 9, device=device).permute(*reversed(range(9)))
    failing = nine.exp()                  # ... when this kernel raises: 9 unmergeable dims
    with pytest.raises(KernelError, match="at most 8 dims") as info:
        fuel.realize(waited, failing)
    assert isinstance(info.value.__cause__, fuel.FuelError)
    assert in_flight(device) == 0
    np.testing.assert_array_equal(waited.numpy(), np.full((2, 3), 2.0))
    np.testing.assert_array_equal((fuel.ones(2) + 1).numpy(), [2, 2])


def test_oversize_allocation_is_a_clear_device_error(opencl):
    backend, device = opencl
    limit = backend.context(device).max_allocation
    with pytest.raises(DeviceError, match="largest single allocation"):
        backend.allocate(device, dt.float32, limit // 4 + 1)
    huge = fuel.zeros(limit // 4 + 1, device=device)
    with pytest.raises(DeviceError, match=f"cannot allocate .* on {device}"):
        (huge + 1).realize()
    assert in_flight(device) == 0
    np.testing.assert_array_equal((fuel.ones(2, device=device) * 3).numpy(), [3, 3])


def test_a_device_that_disappears_between_realizes(opencl):
    backend, device = opencl
    x = fuel.from_numpy(np.arange(6, dtype=np.float32)).to(device).realize()
    pending = (x * 2).to("cpu")  # the constant 2 now lives (cached) on the device too
    before = live_buffers(backend, device)
    backend.take_offline("simulated: the GPU fell off the bus")
    try:
        with pytest.raises(DeviceError, match="fell off the bus"):
            pending.realize()
        assert in_flight(device) == 0
        with pytest.raises(DeviceError, match="fell off the bus"):
            x.numpy()
        with pytest.raises(DeviceError, match="unavailable"):
            fuel.ones(2).to(device)
        np.testing.assert_array_equal((fuel.ones(3) * 4).numpy(), [4, 4, 4])
    finally:
        backend.bring_online()
    np.testing.assert_array_equal(pending.numpy(), np.arange(6) * 2)
    del pending
    assert live_buffers(backend, device) == before


def test_memory_stats_count_live_buffers(opencl):
    backend, device = opencl
    before = live_buffers(backend, device)
    storage = backend.upload(device, np.zeros(1000, np.float32))
    stats = backend.memory_stats(device)
    assert stats["live_buffers"] == before + 1 and stats["live_bytes"] >= 4000
    del storage
    assert live_buffers(backend, device) == before
