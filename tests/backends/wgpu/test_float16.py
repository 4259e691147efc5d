"""float16 on the wgpu backend: registered where the adapter has ``shader-f16`` (lavapipe
does), computed in f32 and rounded to nearest even as NumPy rounds; buffers of an odd element
count, strided and offset reads, matmul and fused groups against NumPy and the CPU backend.
Without the feature (an adapter simulated without it) no float16 kernel is registered and a
float16 op raises NoBackendForOp naming the dtype. The kernel suite (tests/backends/
test_kernels.py) runs every registered float16 key against the CPU kernel."""

from __future__ import annotations

import numpy as np
import pytest

import fuel
from fuel.ir import dtype as dt
from fuel.ir.device import BackendId, Device
from fuel.ir.errors import NoBackendForOp
from fuel.ir.ops import PRIMITIVE_OPS, OpKind


@pytest.fixture
def float16_device(wgpu_device):
    backend, device, context = wgpu_device
    if dt.float16 not in backend.kernel_dtypes(device):
        pytest.skip("the wgpu adapter lacks shader-f16: no float16 kernels")
    return backend, device, context


def _bits(array: np.ndarray) -> np.ndarray:
    return np.asarray(array, np.float16).view(np.uint16)


def test_float32_to_float16_rounds_to_nearest_even_as_numpy(float16_device):
    backend, device, context = float16_device
    ulp = np.float32(2.0 ** -24)
    edges = np.array([0.0, -0.0, 1.0, 65504.0, 65519.996, 65520.0, -65520.0, 1e5, np.inf,
                      -np.inf, np.nan, 2.0 ** -14, 2.0 ** -24, 0.5 * ulp, 1.5 * ulp, 2.5 * ulp,
                      -2.5 * ulp, 0.49 * ulp, 1.0 + 2.0 ** -11, 1.0 + 3 * 2.0 ** -11,
                      2049.0, 2051.0, 6.1e-5, -3.14159], np.float32)
    rng = np.random.default_rng(0)
    spread = (rng.standard_normal(4000) * 10.0 ** rng.uniform(-9, 5, 4000)).astype(np.float32)
    values = np.concatenate([edges, spread])
    got = fuel.tensor(values).to(device).to(fuel.float16).to("cpu").numpy()
    assert got.dtype == np.float16
    with np.errstate(over="ignore"):
        expected = values.astype(np.float16)
    np.testing.assert_array_equal(_bits(got), _bits(expected))
    back = fuel.tensor(got).to(device).to(fuel.float32).numpy()  # float16 -> float32 is exact
    np.testing.assert_array_equal(back, got.astype(np.float32))


@pytest.mark.parametrize("count", [1, 7, 33])
def test_odd_element_counts_offsets_and_strides_move_and_compute(float16_device, count):
    backend, device, context = float16_device
    data = (np.arange(count, dtype=np.float32) * 0.37 - 1.0).astype(np.float16)
    x = fuel.tensor(data).to(device)
    np.testing.assert_array_equal(x.numpy(), data)
    np.testing.assert_array_equal((x * 2 + 1).numpy(), data * np.float16(2) + np.float16(1))
    if count > 2:
        np.testing.assert_array_equal(x[1:].numpy(), data[1:])  # an odd byte offset (2 bytes)
        np.testing.assert_array_equal(x[1::2].numpy(), data[1::2])  # strided, gathered there
        np.testing.assert_array_equal((x[1:] + x[:-1]).numpy(), data[1:] + data[:-1])


def test_casts_to_and_from_float16_around_cross_device_copies(float16_device):
    from fuel.backends import find_backend

    backend, device, context = float16_device
    data = np.linspace(-70000, 70000, 301, dtype=np.float32)  # beyond float16's range too
    with np.errstate(over="ignore"):
        halves = data.astype(np.float16)
    on_device = fuel.tensor(data).to(device).to(fuel.float16)  # Copy in, Cast there
    stops = ["cpu"]
    opencl = find_backend(BackendId.OPENCL)
    if opencl is not None and opencl.is_available():
        stops.append(opencl.devices()[0])
    for stop in stops:  # float16 out to another device and back, then cast to float32
        back = on_device.to(stop).to(device).to(fuel.float32).to("cpu").numpy()
        np.testing.assert_array_equal(back, halves.astype(np.float32), err_msg=str(stop))
    finite = halves[np.isfinite(halves)]  # (an infinity's integer is the driver's choice)
    np.testing.assert_array_equal(_bits(fuel.tensor(finite).to(device).to(fuel.int32).to(
        fuel.float16).numpy()), _bits(finite.astype(np.int32).astype(np.float16)))


def test_reductions_accumulate_in_float32_and_round_once(float16_device):
    backend, device, context = float16_device
    rng = np.random.default_rng(1)
    data = rng.uniform(0.5, 1.5, (5, 2001)).astype(np.float16)  # sums far beyond 2048
    x = fuel.tensor(data).to(device)
    expected = data.astype(np.float32).sum(1).astype(np.float16)
    np.testing.assert_array_equal(_bits(x.sum(dim=1).numpy()), _bits(expected))
    np.testing.assert_array_equal(x.max(dim=1).values.numpy(), data.max(1))
    np.testing.assert_array_equal(x.argmax(dim=1).numpy(), data.argmax(1))
    cumulative = np.cumsum(data[:, :50].astype(np.float32), 1).astype(np.float16)
    np.testing.assert_allclose(fuel.cumsum(x[:, :50], 1).numpy().astype(np.float32),
                               cumulative.astype(np.float32), rtol=1e-3)


@pytest.mark.parametrize("shape", ["tiled", "register"])
def test_matmul_accumulates_in_float32(float16_device, monkeypatch, shape):
    backend, device, context = float16_device
    monkeypatch.setattr(context, "matmul_shape", shape)
    rng = np.random.default_rng(2)
    a = rng.standard_normal((2, 19, 300)).astype(np.float16)
    b = rng.standard_normal((300, 13)).astype(np.float16)
    got = (fuel.tensor(a).to(device) @ fuel.tensor(b).to(device)).numpy()
    assert got.dtype == np.float16
    expected = (a.astype(np.float32) @ b.astype(np.float32)).astype(np.float16)
    np.testing.assert_allclose(got.astype(np.float32), expected.astype(np.float32),
                               rtol=2e-3, atol=2e-3)
    cpu = (fuel.tensor(a) @ fuel.tensor(b)).numpy()
    np.testing.assert_allclose(got.astype(np.float32), cpu.astype(np.float32), rtol=2e-3,
                               atol=2e-3)


def test_a_fused_float16_softmax_gives_the_bits_of_the_unfused_one(float16_device):
    backend, device, context = float16_device
    data = np.random.default_rng(3).standard_normal((6, 77)).astype(np.float16)
    x = fuel.tensor(data).to(device)
    with fuel.profile() as profile:
        fused = fuel.nn.functional.softmax(x * 3, dim=-1).numpy()
    assert any(op.startswith("fused(") for op, *_ in profile.ops)
    fuel.set_fusion(False)
    try:
        unfused = fuel.nn.functional.softmax(x * 3, dim=-1).numpy()
    finally:
        fuel.set_fusion(True)
    np.testing.assert_array_equal(_bits(fused), _bits(unfused))
    scaled = (data * np.float16(3)).astype(np.float32)
    reference = np.exp(scaled - scaled.max(1, keepdims=True))
    reference /= reference.sum(1, keepdims=True)
    np.testing.assert_allclose(fused.astype(np.float32), reference, rtol=1e-2, atol=1e-3)


def test_a_small_float16_network_on_wgpu_matches_the_cpu(float16_device):
    """An MLP block (linear, GELU, layer norm, residual, linear, softmax) in float16."""
    backend, device, context = float16_device
    rng = np.random.default_rng(4)
    arrays = {"x": rng.standard_normal((8, 64)), "w1": rng.standard_normal((64, 128)) / 8,
              "b1": rng.standard_normal(128) / 8, "w2": rng.standard_normal((128, 64)) / 11,
              "gamma": rng.uniform(0.5, 1.5, 64), "w3": rng.standard_normal((64, 10)) / 8}
    arrays = {name: value.astype(np.float16) for name, value in arrays.items()}

    def network(where):
        t = {name: fuel.tensor(value).to(where) for name, value in arrays.items()}
        hidden = fuel.nn.functional.gelu(t["x"] @ t["w1"] + t["b1"])
        mixed = fuel.nn.functional.layer_norm(hidden @ t["w2"] + t["x"], (64,)) * t["gamma"]
        return fuel.nn.functional.softmax(mixed @ t["w3"], dim=-1).numpy()

    on_device, on_cpu = network(device), network("cpu")
    assert on_device.dtype == on_cpu.dtype == np.float16
    np.testing.assert_allclose(on_device.astype(np.float32), on_cpu.astype(np.float32),
                               rtol=2e-2, atol=2e-3)


def test_fuel_backends_shows_the_feature_and_the_dtypes(float16_device, capsys):
    from fuel.cli import main

    backend, device, context = float16_device
    assert "shader-f16" in context.features
    assert main(["backends"]) == 0
    listed = " ".join(capsys.readouterr().out.split())
    assert "shader-f16" in listed and "uint32, bool, float16" in listed


def test_every_cpu_float16_primitive_has_a_wgpu_kernel(float16_device):
    """The float16 primitive keys over the dtypes wgpu holds, all registered (so the kernel
    suite runs each against the CPU); grid_sample has no wgpu kernel in any dtype."""
    from fuel.backends.wgpu.backend import WGPU_DTYPES
    from fuel.dispatch.kernel import global_table

    backend, device, context = float16_device
    keys = {(op, dtypes, where) for op, dtypes, where, _ in global_table().coverage()}
    missing = sorted(f"{op.value}{[d.name for d in dtypes]}" for op, dtypes, where in keys
                     if where is BackendId.CPU and op in PRIMITIVE_OPS
                     and op is not OpKind.GRID_SAMPLE and dt.float16 in dtypes
                     and all(d in WGPU_DTYPES for d in dtypes)
                     and (op, dtypes, backend.backend_id) not in keys)
    assert not missing, f"float16 primitives without a wgpu kernel: {missing}"


# ------------------------------------------------------------------ without shader-f16


class _AdapterWithout:
    """A real adapter that does not list ``feature`` (a driver without it)."""

    def __init__(self, adapter, feature: str) -> None:
        self._adapter, self._feature = adapter, feature

    @property
    def features(self) -> set:
        return set(self._adapter.features) - {self._feature}

    def __getattr__(self, name: str):
        return getattr(self._adapter, name)


_WITHOUT_F16: list = []


@pytest.fixture
def device_without_float16(wgpu_device):
    """A second wgpu backend over the same driver, its adapter simulated without shader-f16,
    registered at run time as ``wgpu_without_f16:0`` (made once per process)."""
    from fuel.backends import register_backend
    from fuel.backends.wgpu import runtime
    from fuel.backends.wgpu.backend import WgpuBackend

    backend = wgpu_device[0]
    if not _WITHOUT_F16:
        real_detect = runtime.detect

        def detect():
            adapter, reason = real_detect()
            return (None if adapter is None else _AdapterWithout(adapter, "shader-f16")), reason

        simulated = WgpuBackend(BackendId.register("wgpu_without_f16"), backend.api)
        runtime.detect = detect
        try:
            assert simulated.is_available(), simulated.unavailable_reason()
        finally:
            runtime.detect = real_detect
        register_backend(simulated)
        _WITHOUT_F16.append(simulated)
    simulated = _WITHOUT_F16[0]
    return simulated, simulated.devices()[0]


def test_without_shader_f16_no_float16_kernel_is_registered(device_without_float16):
    from fuel.backends.wgpu import kernels
    from fuel.dispatch.kernel import KernelBindingTable

    backend, device = device_without_float16
    assert "shader-f16" not in backend.context(device).features
    dtypes = backend.kernel_dtypes(device)
    assert dt.float16 not in dtypes and dt.float32 in dtypes
    assert "no float16 kernels (the adapter lacks shader-f16)" in backend.describe_device(device)
    table = KernelBindingTable()
    kernels.register(table, backend.backend_id, dtypes)
    computed = [op.value for op, key, _, _ in table.coverage()
                if dt.float16 in key and op is not OpKind.COPY]
    assert computed == []  # float16 only moves (Copy), as raw bytes
    with pytest.raises(NoBackendForOp, match="float16"):
        table.lookup_entry(OpKind.ADD, (dt.float16,) * 3, backend.backend_id)


def test_without_shader_f16_a_float16_op_names_the_dtype_and_data_still_moves(
        device_without_float16):
    backend, device = device_without_float16
    data = np.array([[1.5, -2.0, 3.25], [0.5, 7.0, -1.0]], np.float16)
    x = fuel.tensor(data).to(device)
    np.testing.assert_array_equal(x.numpy(), data)
    np.testing.assert_array_equal(x.transpose(0, 1)[1:].numpy(), data.T[1:])  # raw bytes read
    with pytest.raises(NoBackendForOp, match=r"float16.*wgpu_without_f16(?s:.*)lacks the "
                       r"shader-f16 feature"):
        (x + x).numpy()
    np.testing.assert_array_equal(((x.to("cpu") + 1).to(Device(backend.backend_id, 0)))
                                  .numpy(), data + np.float16(1))
