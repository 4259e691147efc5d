"""The CUDA backend. Without a GPU: ``fuel backends`` lists it with the reason it is unavailable
(no CuPy, no driver, no device, no NVRTC: each reason checked by faking what detection sees),
and using a CUDA device raises that reason. With one (the tests below the line skip with the
reason otherwise): transfers, Pending handles only for the wait-set, a fused chain, half
types, cuBLAS matmul, index faults, profiles, jit replays and cross-device copies, each
against the CPU."""

from __future__ import annotations

import os
import sys
from types import SimpleNamespace

import numpy as np
import pytest

import fuel
from fuel.backends import backend_rows, find_backend
from fuel.backends.cuda import runtime
from fuel.dispatch import in_flight
from fuel.ir.device import BackendId
from fuel.ir.errors import DeviceError, KernelError

BACKEND = find_backend(BackendId.CUDA)
RNG = np.random.default_rng(11)


# ----------------------------------------------------------------------------- without a GPU

def test_backends_list_cuda_with_its_state():
    rows = {name: (available, reason, devices) for name, available, reason, devices
            in backend_rows()}
    available, reason, devices = rows["cuda"]
    if available:
        assert devices and all("compute capability" in text for _, text in devices)
    else:
        assert reason and not devices
        assert any(word in reason for word in ("CuPy", "driver", "device", "NVRTC")), reason


def _fake_cupy(monkeypatch, count=None, error=None):
    def device_count():
        if error is not None:
            raise error
        return count

    module = SimpleNamespace(cuda=SimpleNamespace(runtime=SimpleNamespace(
        getDeviceCount=device_count)))
    monkeypatch.setitem(sys.modules, "cupy", module)


def test_reason_without_cupy(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy raises ImportError
    found = runtime.detect()
    assert found.indices == []
    assert "CuPy is not installed" in found.reason and "[cuda]" in found.reason


def test_reason_without_a_driver(monkeypatch):
    _fake_cupy(monkeypatch, error=RuntimeError(
        "cudaErrorInsufficientDriver: CUDA driver version is insufficient for CUDA runtime"))
    found = runtime.detect()
    assert found.indices == [] and "no usable NVIDIA driver" in found.reason


def test_reason_without_a_device(monkeypatch):
    _fake_cupy(monkeypatch, error=RuntimeError("cudaErrorNoDevice: no CUDA-capable device"))
    assert "no CUDA device found" in runtime.detect().reason
    _fake_cupy(monkeypatch, count=0)
    assert runtime.detect() == runtime.Detection([], "no CUDA device found (the driver "
                                                     "reports none)")


def test_reason_without_nvrtc(monkeypatch):
    from fuel.compiler import nvrtc

    _fake_cupy(monkeypatch, count=1)
    monkeypatch.setattr(nvrtc, "unavailable_reason", lambda: "NVRTC is not available (test)")
    assert runtime.detect() == runtime.Detection([], "NVRTC is not available (test)")
    monkeypatch.setattr(nvrtc, "unavailable_reason", lambda: None)
    assert runtime.detect() == runtime.Detection([0], "")


def test_using_cuda_without_a_device_names_the_reason():
    if BACKEND.is_available():
        pytest.skip("a CUDA device is here")
    with pytest.raises(DeviceError, match="cuda:0 is unavailable: .*"):
        fuel.ones(3, device="cuda").realize()


def test_the_architecture_nvrtc_targets(monkeypatch):
    from fuel.compiler import nvrtc

    monkeypatch.setattr(nvrtc, "supported_architectures", lambda: [75, 80, 86, 89, 90])
    assert runtime.target(9, 0) == "sm_90"
    assert runtime.target(8, 0) == "sm_80"
    assert runtime.target(12, 0) == "compute_90"  # newer than this NVRTC: PTX, JIT on load
    with pytest.raises(DeviceError, match="compute capability 6.0"):
        runtime.target(6, 0)


# ----------------------------------------------------------------------------- on a GPU

@pytest.fixture(params=["gpu", "host"])
def cuda(request, monkeypatch):
    """(backend, device): the first CUDA GPU ("gpu"; skipped naming why without one), or the
    fake device of host memory running the real backend over emulated kernels ("host",
    ``tests.backends.cuda.fake_device``; where a GPU is here, the GPU alone)."""
    if request.param == "gpu" or BACKEND.is_available():
        if not BACKEND.is_available():
            pytest.skip(f"CUDA is unavailable: {BACKEND.unavailable_reason()}")
        if request.param == "host":
            pytest.skip("a CUDA device is here: the fake device is not needed")
        backend, device = BACKEND, BACKEND.devices()[0]
    else:
        from tests.backends.cuda import fake_device

        backend, device = fake_device.install(monkeypatch)
    yield backend, device
    assert in_flight(device) == 0
    if request.param == "host":
        from fuel.dispatch import kernel

        monkeypatch.undo()
        kernel._global_generation += 1  # plans made with the fake's table are stale


def _data(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def test_transfers_round_trip_every_dtype(cuda):
    backend, device = cuda
    from fuel.backends.cuda.ops import DTYPES
    from fuel.ir.layout import Layout

    for dtype in DTYPES:
        host = (RNG.standard_normal(37) * 10).astype(dtype.numpy)
        storage = backend.upload(device, host)
        np.testing.assert_array_equal(backend.download(storage, Layout.contiguous((37,))), host)
        strided = Layout((6, 3), (6, 2), 1)  # a strided view downloads through a copy
        expected = np.lib.stride_tricks.as_strided(host[1:], (6, 3), (6 * host.itemsize,
                                                                      2 * host.itemsize))
        np.testing.assert_array_equal(backend.download(storage, strided), expected)


def test_pending_only_for_wait_set_nodes(cuda, monkeypatch):
    backend, device = cuda
    recorded = []
    original = backend.record_completion
    monkeypatch.setattr(backend, "record_completion",
                        lambda storage: recorded.append(storage) or original(storage))
    a = _data(3, 4)
    x = fuel.from_numpy(a).to(device)
    result = (((x + x) * x + 1.0).to("cpu")) * 2
    result.realize()
    assert len(recorded) == 1
    np.testing.assert_allclose(result.numpy(), ((a + a) * a + 1) * 2, rtol=1e-6)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_a_fused_chain_equals_the_cpu(cuda, dtype):
    _, device = cuda
    a = fuel.from_numpy(_data(64, 257)).to(dtype)

    def chain(x):
        return ((x * 1.5 + 0.25).exp() - x).tanh().softmax(-1) * x.sum(-1, keepdim=True)

    expected = chain(a).to("float32").numpy()
    actual = chain(a.to(device)).to("cpu").to("float32").numpy()
    tolerance = {"float32": 1e-5, "float16": 1e-2, "bfloat16": 5e-2}[dtype]
    np.testing.assert_allclose(actual, expected, rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
def test_matmul_on_cublas(cuda, dtype):
    _, device = cuda
    a, b = _data(3, 33, 70), _data(70, 45)
    x, w = fuel.from_numpy(a).to(dtype), fuel.from_numpy(b).to(dtype)
    for left, right in ((x, w), (x, w.T.contiguous().T), (x[:, :, 1:], w[1:]),
                        (x[0].T.contiguous().T, w), (x, w[:, ::2])):
        expected = (left @ right).to("float32").numpy()
        actual = (left.to(device) @ right.to(device)).to("cpu").to("float32").numpy()
        tolerance = {"float32": 1e-4, "float64": 1e-10, "float16": 2e-2, "bfloat16": 1e-1}
        np.testing.assert_allclose(actual, expected, rtol=tolerance[dtype],
                                   atol=tolerance[dtype])


def test_an_out_of_range_index_raises_naming_the_node(cuda):
    _, device = cuda
    x = fuel.from_numpy(_data(4, 5)).to(device)
    index = fuel.from_numpy(np.array([0, 7], np.int64)).to(device)
    with pytest.raises(KernelError, match="index 7 is out of range for dim 0 of size 4"):
        x.index_select(0, index).numpy()


def test_profile_rows_carry_device_times(cuda):
    _, device = cuda
    x = fuel.from_numpy(_data(256, 256)).to(device).realize()
    with fuel.profile() as prof:
        ((x @ x).relu() + 1).to("cpu").realize()
    rows = {row.op: row for row in prof.launches if row.backend == "cuda"}
    assert rows["matmul"].device_seconds is not None and rows["matmul"].device_seconds > 0
    assert all(row.kernel_source == "cuda" for row in rows.values())


def test_jit_replays_equal_the_first_run(cuda):
    _, device = cuda

    @fuel.jit
    def step(x, w):
        return (x @ w).softmax(-1)

    w = fuel.from_numpy(_data(32, 16)).to(device)
    for _ in range(3):
        a = _data(8, 32)
        actual = step(fuel.from_numpy(a).to(device), w).numpy()
        expected = (fuel.from_numpy(a) @ fuel.from_numpy(w.numpy())).softmax(-1).numpy()
        np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-6)


def test_copies_between_cuda_and_the_other_devices(cuda):
    _, device = cuda
    a = _data(5, 6)
    x = fuel.from_numpy(a)
    for _, available, _, devices in backend_rows():
        names = [name for name, _ in devices if name != "not used"]
        if not available or not names:
            continue
        other = names[0]
        there = x.to(device).to(other).to(device).to("cpu")
        np.testing.assert_array_equal(there.numpy(), a, err_msg=f"via {other}")


def test_the_bench_exits_saying_why_without_a_device():
    import subprocess
    from pathlib import Path

    if BACKEND.is_available():
        pytest.skip("a CUDA device is here")
    root = Path(__file__).resolve().parents[3]
    done = subprocess.run([sys.executable, str(root / "bench" / "gpu.py")], cwd=root,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(root)})
    assert done.returncode == 2
    assert "CUDA is unavailable here (" + BACKEND.unavailable_reason() in done.stderr
