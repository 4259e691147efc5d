"""The OpenCL backend inside realize: Pending handles only for the wait-set, counters balanced on
every path, cross-device graphs equal to CPU, the drain, profiling rows, jit and pipelining."""

from __future__ import annotations

import numpy as np
import pytest

import fuel
import fuel.nn.functional as F
from fuel.backends.opencl.codegen import OPENCL_DTYPES
from fuel.dispatch import compile_node, execute_compiled_with_wait_hint, global_table, in_flight
from fuel.ir import dtype as dt
from fuel.ir.layout import Layout
from fuel.ir.ops import OpKind

RNG = np.random.default_rng(5)


def _data(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def test_pending_only_for_wait_set_nodes(opencl, monkeypatch):
    backend, device = opencl
    recorded = []
    original = backend.record_completion

    def counting(storage):
        recorded.append(storage)
        return original(storage)

    monkeypatch.setattr(backend, "record_completion", counting)
    a = _data(3, 4)
    x = fuel.from_numpy(a).to(device)
    hidden = (x + x) * x            # two kernels, neither waited individually
    produced = hidden + 1.0         # the producer of the copy: the only wait-set node
    result = produced.to("cpu") * 2
    result.realize()
    assert len(recorded) == 1
    assert in_flight(device) == 0
    np.testing.assert_allclose(result.numpy(), ((a + a) * a + 1) * 2, rtol=1e-6)


def test_handles_from_execute_compiled(opencl):
    backend, device = opencl
    storage = backend.upload(device, np.arange(6, dtype=np.float32))
    compiled = compile_node(OpKind.NEG, (dt.float32, dt.float32), backend.backend_id, None,
                            global_table())
    layouts = [Layout.contiguous((6,)), Layout.contiguous((6,))]
    output = backend.allocate(device, dt.float32, 6)
    ready = execute_compiled_with_wait_hint(compiled, [storage], [output], layouts, False)
    assert ready.is_ready and in_flight(device) == 0
    pending = execute_compiled_with_wait_hint(compiled, [storage], [output], layouts, True)
    assert pending.is_pending and in_flight(device) == 1
    pending.wait()
    assert in_flight(device) == 0
    np.testing.assert_array_equal(backend.download(output, layouts[1]), -np.arange(6))


def test_dropped_pending_handle_balances_the_counter(opencl):
    backend, device = opencl
    storage = backend.upload(device, np.ones(4, np.float32))
    compiled = compile_node(OpKind.EXP, (dt.float32, dt.float32), backend.backend_id, None,
                            global_table())
    layouts = [Layout.contiguous((4,))] * 2
    handle = execute_compiled_with_wait_hint(compiled, [storage], [storage], layouts, True)
    assert in_flight(device) == 1
    with pytest.warns(ResourceWarning, match="dropped"):
        del handle
        import gc

        gc.collect()
    assert in_flight(device) == 0
    backend.synchronize(device)


def test_cpu_to_opencl_to_cpu_graph_equals_cpu(opencl):
    _, device = opencl
    a, w, b = _data(4, 6, 16), _data(16, 16), _data(16)

    def block(x, weight, bias):
        h = F.layer_norm(x, (16,), weight=bias.abs() + 0.5, bias=bias)
        scores = (h @ weight).softmax(-1)
        mixed = F.gelu(scores @ h.transpose(1, 2)) + h.sum(-1, keepdim=True)
        return fuel.cat([mixed.cumsum(-1), mixed.tril()], 1).mean(0)

    expected = block(*(fuel.from_numpy(t) for t in (a, w, b))).numpy()
    moved = [fuel.from_numpy(t).to(device) for t in (a, w, b)]
    result = block(*moved).to("cpu")
    assert result.device == "cpu"
    np.testing.assert_allclose(result.numpy(), expected, rtol=1e-4, atol=1e-5)


def test_the_drain_makes_results_visible(opencl, monkeypatch):
    backend, device = opencl
    synchronized = []
    original = backend.synchronize
    monkeypatch.setattr(backend, "synchronize",
                        lambda d: (synchronized.append(d), original(d))[1])
    a = _data(256, 256)
    x = fuel.from_numpy(a).to(device)
    y = (x @ x).exp().sum(1)
    y.realize()
    assert device in synchronized
    # Read through a second queue: nothing orders it after the realize's work but the drain.
    from fuel.backends.opencl.runtime import cl

    context = backend.context(device)
    other = cl.CommandQueue(context.context)
    storage = y._node.buffer
    host = np.empty(storage.size, np.float32)
    cl.enqueue_copy(other, host, storage.buffer, is_blocking=True)
    expected = np.exp(a.astype(np.float64) @ a).sum(1)
    np.testing.assert_allclose(host, expected, rtol=1e-4)


def test_mixed_devices_without_to_raise_device_mismatch(opencl):
    _, device = opencl
    x = fuel.ones(3)
    y = fuel.ones(3).to(device)
    with pytest.raises(fuel.DeviceMismatch, match=f"cpu.*{device}|{device}.*cpu"):
        x + y


@pytest.mark.parametrize("dtype", OPENCL_DTYPES, ids=lambda d: d.name)
def test_round_trip_every_dtype(opencl, dtype):
    backend, device = opencl
    if dtype is dt.float64 and not backend.supports_fp64():
        pytest.skip("no fp64 on this device")
    data = (np.arange(24) % 7 - 3).reshape(2, 3, 4).astype(dtype.numpy)
    x = fuel.from_numpy(data)
    back = x.to(device).permute(2, 0, 1).to("cpu")
    np.testing.assert_array_equal(back.numpy(), data.transpose(2, 0, 1))


@pytest.mark.parametrize("dtype", [d for d in dt.KNOWN_DTYPES if d not in OPENCL_DTYPES],
                         ids=lambda d: d.name)
def test_dtypes_without_opencl_kernels_are_refused_by_name(opencl, dtype):
    _, device = opencl
    x = fuel.from_numpy(np.arange(6).astype(np.float32).astype(dtype.numpy))
    with pytest.raises(fuel.NoBackendForOp, match=dtype.name):
        x.to(device).permute(0).contiguous().to("cpu").realize()


def test_copy_trace_rows_carry_devices_and_bytes(opencl):
    _, device = opencl
    a = _data(8, 8)
    with fuel.profile() as prof:
        (fuel.from_numpy(a).to(device) * 2).to("cpu").realize()
    copies = [row for row in prof.launches if row.op == "copy"]
    assert [(row.src, row.dst) for row in copies] == [("cpu", str(device)), (str(device), "cpu")]
    assert all(row.bytes == a.nbytes for row in copies)
    assert any(row.backend == "opencl" and row.op == "mul" for row in prof.launches)


def test_pipelined_realize_and_jit_match(opencl):
    _, device = opencl
    a = _data(5, 7)
    x = fuel.from_numpy(a).to(device)
    plain = ((x * 3).softmax(0) + x).numpy()
    (pipelined,) = fuel.realize((x * 3).softmax(0) + x, pipelined=True)
    np.testing.assert_allclose(pipelined.numpy(), plain, rtol=1e-6)

    @fuel.jit
    def step(t):
        return (t * 3).softmax(0) + t

    first = step(x).numpy()
    again = step(fuel.from_numpy(a * 2).to(device)).numpy()
    np.testing.assert_allclose(first, plain, rtol=1e-6)
    expected = ((fuel.from_numpy(a * 2) * 3).softmax(0) + fuel.from_numpy(a * 2)).numpy()
    np.testing.assert_allclose(again, expected, rtol=1e-5)


def test_in_place_assignment_on_opencl(opencl):
    _, device = opencl
    a = _data(4, 5)
    x = fuel.from_numpy(a).to(device).realize()
    x[1:3, ::2] = fuel.full((2, 3), 7.0, device=device)
    expected = a.copy()
    expected[1:3, ::2] = 7.0
    np.testing.assert_array_equal(x.numpy(), expected)


def test_profile_shows_device_time_from_event_timestamps(opencl):
    _, device = opencl
    x = fuel.from_numpy(_data(64, 64)).to(device).realize()
    with fuel.profile() as prof:
        (x @ x).softmax(-1).to("cpu").realize()
    rows = {row.op: row for row in prof.launches}
    assert rows["matmul"].device_seconds is not None and rows["matmul"].device_seconds > 0
    assert rows["copy"].device_seconds is not None  # the download's transfer event
    assert "device ms" in prof.table_text()


@pytest.mark.parametrize("shape", [(3001,), (1025, 3), (4096,)], ids=str)
def test_large_walks_cover_every_element_exactly(opencl, shape):
    """Flat walks of a group or more run as whole groups plus one overlapping group; others
    round up and clamp. Both must write every element once with the right value."""
    _, device = opencl
    a, b = _data(*shape), _data(*shape)
    x, y = fuel.from_numpy(a).to(device), fuel.from_numpy(b).to(device)
    flat = (x * y + 1.0).tanh()
    strided = x.reshape(-1)[::-1].reshape(shape) - y      # flipped: a strided walk
    picked = x.reshape(-1).index_select(0, fuel.arange(a.size - 1, -1, -1, device=device))
    np.testing.assert_allclose(flat.numpy(), np.tanh(a * b + 1), rtol=2e-6, atol=1e-6)
    np.testing.assert_array_equal(strided.numpy(), a.reshape(-1)[::-1].reshape(shape) - b)
    np.testing.assert_array_equal(picked.numpy(), a.reshape(-1)[::-1])


def test_revision_hashes_are_the_same_in_a_fresh_process(opencl):
    """A generated kernel's revision names its code, not where Python put it in memory."""
    import subprocess
    import sys

    code = ("from fuel.backends import find_backend; from fuel.dispatch import global_table;"
            "from fuel.ir.device import BackendId; from fuel.ir.ops import OpKind;"
            "import fuel.ir.dtype as d; find_backend(BackendId.OPENCL);"
            "print(global_table().lookup_entry(OpKind.NEG, (d.float32,) * 2, BackendId.OPENCL)"
            ".kernel_revision_hash)")
    runs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True).stdout for _ in range(2)}
    here = global_table().lookup_entry(OpKind.NEG, (dt.float32,) * 2, fuel.BackendId.OPENCL)
    assert runs == {f"{here.kernel_revision_hash}\n"}
