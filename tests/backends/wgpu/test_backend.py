"""The wgpu backend's deferred batch: Ready handles during the walk, one submit per graph of
small ops (until the dispatch limit), submits before reads, safe frees under an open batch,
balanced counters after success, a kernel failure and a device loss; results against NumPy
and torch. Skipped, with the reason, where no wgpu adapter exists."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import fuel
from fuel.dispatch.completion import CompletionHandle, in_flight
from fuel.ir.errors import DeviceError, FuelError, KernelIndexError, NoBackendForOp


def _chain(x, count: int):
    for step in range(count):
        x = x * 1.0001 + 0.5 if step % 2 else x - 0.25
    return x


def test_one_submit_for_a_graph_of_small_ops_and_ready_handles(wgpu_device, monkeypatch):
    backend, device, context = wgpu_device
    monkeypatch.setenv("FUEL_FUSION", "0")  # 100 launches, not one fused kernel
    fuel.set_fusion(False)
    pending = []
    original = CompletionHandle.pending.__func__

    def spy(cls, completion, label=""):
        pending.append(label)
        return original(cls, completion, label)

    monkeypatch.setattr(CompletionHandle, "pending", classmethod(spy))
    try:
        x = fuel.tensor(np.linspace(-1, 1, 64, dtype=np.float32)).to(device)
        fuel.realize(x)
        y = _chain(x, 100)
        before = context.submits
        fuel.realize(y)
        assert context.submits - before == 1  # the drain's
        assert pending == []  # every kernel returned Ready during the walk
        before = context.submits
        got = y.numpy()
        assert context.submits - before == 1  # the read
    finally:
        fuel.set_fusion(True)
    expected = np.linspace(-1, 1, 64, dtype=np.float32)
    for step in range(100):
        expected = expected * np.float32(1.0001) + np.float32(0.5) if step % 2 \
            else expected - np.float32(0.25)
    np.testing.assert_allclose(got, expected, rtol=1e-6)


def test_the_dispatch_limit_submits_the_batch(wgpu_device, monkeypatch):
    from fuel.backends.wgpu import runtime

    backend, device, context = wgpu_device
    monkeypatch.setattr(runtime, "DISPATCH_LIMIT", 10)
    fuel.set_fusion(False)
    try:
        x = fuel.tensor(np.ones(16, np.float32)).to(device)
        fuel.realize(x)
        before = context.submits
        fuel.realize(_chain(x, 40))
        assert context.submits - before >= 4
    finally:
        fuel.set_fusion(True)


def test_reads_and_device_boundaries_submit_and_stay_ordered(wgpu_device):
    backend, device, context = wgpu_device
    data = np.arange(24, dtype=np.float32).reshape(4, 6)
    x = fuel.tensor(data).to(device)
    on_cpu = (x * 2).to("cpu").exp()
    back = (on_cpu.to(device) + x).sum(1)
    before = context.submits
    got = back.numpy()
    assert context.submits - before >= 2  # before the copy out, and at the drain or read
    np.testing.assert_allclose(got, (np.exp(data * 2) + data).sum(1), rtol=1e-5)


def test_freeing_under_an_open_batch_defers_destruction(wgpu_device):
    from fuel.backends.wgpu.loops import strided_copy
    from fuel.ir.layout import Layout

    backend, device, context = wgpu_device
    limit, context.buffers.limit = context.buffers.limit, 0  # nothing kept for reuse
    try:
        context.finish()
        source = backend.upload(device, np.arange(1000, dtype=np.float32))
        target = backend.allocate(device, fuel.float32, 1000)
        strided_copy(source, Layout((1000,), (1,)), target, Layout.contiguous((1000,)))
        buffer = source.buffer
        del source
        gc.collect()
        assert any(b is buffer for b in context.batch.retired)  # not destroyed yet
        backend.synchronize(device)
        assert context.batch is None and not context.in_flight
        np.testing.assert_array_equal(backend.download(target, Layout.contiguous((1000,))),
                                      np.arange(1000, dtype=np.float32))
    finally:
        context.buffers.limit = limit


def test_counters_balance_after_a_kernel_failure(wgpu_device):
    backend, device, context = wgpu_device
    x = fuel.tensor(np.arange(10, dtype=np.float32)).to(device)
    index = fuel.tensor(np.array([1, 12, 3], np.int64)).to(device)
    with pytest.raises(KernelIndexError, match="index 12 is out of range for dim 0 of size 10"):
        fuel.index_select(x, 0, index).to("cpu").numpy()
    assert in_flight(device) == 0
    ok = fuel.index_select(x, 0, fuel.tensor(np.array([-1, 2], np.int64)).to(device))
    np.testing.assert_array_equal(ok.numpy(), [9.0, 2.0])


def test_counters_balance_after_a_device_loss(wgpu_device, monkeypatch):
    from fuel.backends.wgpu.runtime import DeviceContext

    backend, device, context = wgpu_device
    x = fuel.tensor(np.ones((8, 8), np.float32)).to(device)
    fuel.realize(x)

    def lost(self, buffer, offset, nbytes):
        backend.lose_device("simulated loss")
        raise DeviceError("the wgpu device was lost: simulated loss")

    monkeypatch.setattr(DeviceContext, "read", lost)
    with pytest.raises(FuelError, match="simulated loss"):
        ((x + 1).to("cpu") * 2).to(device).numpy()
    assert in_flight(device) == 0
    with pytest.raises(FuelError, match="simulated loss"):
        (x + 1).realize()
    assert in_flight(device) == 0
    monkeypatch.undo()
    backend.restore_device()
    np.testing.assert_array_equal((x + 1).numpy(), np.full((8, 8), 2.0, np.float32))


def test_fused_softmax_and_layer_norm_match_torch(wgpu_device):
    torch = pytest.importorskip("torch")
    backend, device, context = wgpu_device
    data = np.random.default_rng(0).standard_normal((7, 129)).astype(np.float32)
    x = fuel.tensor(data).to(device)
    with fuel.profile() as profile:
        got = fuel.nn.functional.softmax(x * 3, dim=-1).numpy()
    assert any(op.startswith("fused(") for op, *_ in profile.ops)
    np.testing.assert_allclose(got, torch.softmax(torch.tensor(data) * 3, -1).numpy(),
                               rtol=1e-5, atol=1e-7)
    normed = fuel.nn.functional.layer_norm(x, (129,)).numpy()
    np.testing.assert_allclose(
        normed, torch.nn.functional.layer_norm(torch.tensor(data), (129,)).numpy(),
        rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("shape", ["tiled", "register"])
def test_both_matmul_shaders_match_numpy_with_batches_and_transposes(wgpu_device, monkeypatch,
                                                                      shape):
    backend, device, context = wgpu_device
    monkeypatch.setattr(context, "matmul_shape", shape)
    rng = np.random.default_rng(1)
    a = rng.standard_normal((3, 37, 50)).astype(np.float32)
    b = rng.standard_normal((50, 19)).astype(np.float32)
    got = (fuel.tensor(a).to(device) @ fuel.tensor(b.T.copy()).to(device).transpose(0, 1))
    np.testing.assert_allclose(got.numpy(), a @ b, rtol=1e-4, atol=1e-4)
    vector = rng.standard_normal((1, 50)).astype(np.float32)  # one row: its own block size
    np.testing.assert_allclose((fuel.tensor(vector).to(device) @ fuel.tensor(b).to(device))
                               .numpy(), vector @ b, rtol=1e-4, atol=1e-4)


def test_an_op_without_kernel_or_decomposition_names_the_primitive(wgpu_device):
    backend, device, context = wgpu_device
    image = fuel.tensor(np.ones((1, 1, 4, 4), np.float32)).to(device)
    grid = fuel.tensor(np.zeros((1, 2, 2, 2), np.float32)).to(device)
    with pytest.raises(NoBackendForOp, match="grid_sample"):
        fuel.nn.functional.grid_sample(image, grid, align_corners=False).numpy()


def test_int64_beyond_32_bits_is_refused_by_name(wgpu_device):
    backend, device, context = wgpu_device
    with pytest.raises(FuelError, match="int64 tensors as 32-bit"):
        fuel.tensor(np.array([1 << 40], np.int64)).to(device).numpy()


def test_profile_shows_device_time_from_timestamp_queries(wgpu_device):
    backend, device, context = wgpu_device
    if not context.timestamps:
        pytest.skip("the adapter has no timestamp queries")
    x = fuel.tensor(np.ones((64, 64), np.float32)).to(device).realize()
    with fuel.profile() as prof:
        (x @ x).to("cpu").realize()
    rows = {row.op: row for row in prof.launches}
    assert rows["matmul"].device_seconds is not None and rows["matmul"].device_seconds > 0
    assert "device ms" in prof.table_text()


def test_a_backend_boundary_submits_the_open_batch(wgpu_device, monkeypatch):
    backend, device, context = wgpu_device
    calls = []
    original = type(backend).submit
    monkeypatch.setattr(type(backend), "submit",
                        lambda self, where: (calls.append(where), original(self, where)))
    x = fuel.tensor(np.ones(8, np.float32)).to(device).realize()
    c = fuel.tensor(np.ones(8, np.float32)).realize()
    on_device = x + 1
    on_cpu = c * 3
    fuel.realize(on_device, on_cpu)
    assert calls == [device]  # when the walk moved on to the CPU step
    np.testing.assert_array_equal(on_device.numpy(), np.full(8, 2.0, np.float32))


def test_a_replayed_plan_records_prepared_launches_into_one_batch(wgpu_device):
    backend, device, context = wgpu_device
    fuel.set_fusion(False)
    try:
        base = np.linspace(0, 1, 32, dtype=np.float32)
        x = fuel.tensor(base).to(device).realize()
        results = []
        for _ in range(3):  # build, bind, replay
            y = _chain(x, 30)
            before = context.submits
            fuel.realize(y)
            assert context.submits - before == 1
            results.append(y.numpy())
    finally:
        fuel.set_fusion(True)
    expected = base
    for step in range(30):
        expected = expected * np.float32(1.0001) + np.float32(0.5) if step % 2 \
            else expected - np.float32(0.25)
    for got in results:
        np.testing.assert_allclose(got, expected, rtol=1e-6)
