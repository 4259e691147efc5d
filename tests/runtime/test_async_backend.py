"""The executor's asynchronous contract, on a worker-thread test device backend."""

import gc

import numpy as np
import pytest

import fuel
from fuel.dispatch import compile_node, execute_compiled, global_table, in_flight
from fuel.ir import dtype as dt
from fuel.ir.layout import Layout
from fuel.ir.ops import OpKind
from tests.runtime.threaded_backend import DEVICE, shared_backend


@pytest.fixture(scope="module")
def registered():
    # Registered once: the binding table is append-only, so the first kernels stay in force.
    yield shared_backend("threaded", delay=0.005)


@pytest.fixture
def backend(registered):
    registered.completions_recorded = 0
    registered.available = True
    registered.fault = None
    yield registered
    registered.available = True
    assert in_flight(DEVICE) == 0


def test_pending_only_for_wait_set_nodes_and_result_matches_cpu(backend):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    x = fuel.from_numpy(a).to("threaded:0")
    hidden = (x + x) * x          # two kernels, neither waited individually
    produced = hidden + 1.0       # the producer of the copy: the only wait-set node
    result = produced.to("cpu") * 2
    result.realize()
    assert backend.completions_recorded == 1
    assert in_flight(DEVICE) == 0
    np.testing.assert_array_equal(result.numpy(), ((a + a) * a + 1) * 2)


def test_drain_makes_device_results_visible(backend):
    a = np.arange(6, dtype=np.float32)
    x = fuel.from_numpy(a).to("threaded:0")
    y = (x * x) + x
    y.realize()
    # download() does not synchronize: only the realize-end drain can have made this visible.
    np.testing.assert_array_equal(y._node.buffer.buffer, a * a + a)
    assert backend.completions_recorded == 0


def test_device_fault_surfaces_at_the_wait_and_names_the_node(backend):
    x = fuel.from_numpy(np.ones(4, np.float32)).to("threaded:0")
    faulty = x.sqrt()
    with pytest.raises(fuel.DeviceError, match="sqrt"):
        faulty.to("cpu").realize()
    assert in_flight(DEVICE) == 0


def test_kernel_error_balances_counters_and_next_realize_works(backend):
    x = fuel.from_numpy(np.ones(4, np.float32)).to("threaded:0")
    waited = (x + 1.0)  # becomes Pending (copied below) before the failing kernel runs
    failing = (x * 2.0).exp()
    with pytest.raises(fuel.KernelError) as info:
        fuel.realize(waited.to("cpu"), failing)
    message = str(info.value)
    assert "exp" in message and "threaded" in message and "test_async_backend.py" in message
    assert isinstance(info.value.__cause__, ValueError)
    assert in_flight(DEVICE) == 0
    np.testing.assert_array_equal((x + 2.0).to("cpu").numpy(), np.full(4, 3, np.float32))
    np.testing.assert_array_equal((fuel.ones(2) + 1).numpy(), [2, 2])


def test_dropped_pending_handle_warns_and_releases_its_slot(backend):
    table = global_table()
    compiled = compile_node(OpKind.ADD, (dt.float32,) * 3, DEVICE.backend, None, table)
    a = backend.upload(DEVICE, np.ones(3, np.float32))
    out = backend.allocate(DEVICE, dt.float32, 3)
    layout = Layout.contiguous((3,))
    handle = execute_compiled(compiled, [a, a], [out], [layout] * 3)
    assert handle.is_pending and in_flight(DEVICE) == 1
    with pytest.warns(ResourceWarning, match="dropped without being waited"):
        del handle
        gc.collect()
    assert in_flight(DEVICE) == 0
    waited = execute_compiled(compiled, [a, a], [out], [layout] * 3)
    waited.wait()
    waited.wait()  # idempotent: one decrement only
    assert in_flight(DEVICE) == 0
    np.testing.assert_array_equal(out.buffer, [2, 2, 2])
    closed = execute_compiled(compiled, [a, a], [out], [layout] * 3)
    closed.close()
    assert in_flight(DEVICE) == 0


def test_unplugged_device_is_a_clear_error_and_cpu_still_works(backend):
    x = fuel.from_numpy(np.ones(2, np.float32)).to("threaded:0")
    y = x + 1.0
    backend.available = False
    with pytest.raises(fuel.DeviceError, match="unplugged"):
        y.realize()
    assert in_flight(DEVICE) == 0
    np.testing.assert_array_equal((fuel.ones(2) * 3).numpy(), [3, 3])


def test_mixing_devices_without_to_is_a_device_mismatch(backend):
    x = fuel.from_numpy(np.ones(2, np.float32)).to("threaded:0")
    with pytest.raises(fuel.DeviceMismatch, match="cpu and threaded:0|threaded:0 and cpu"):
        x + fuel.ones(2)


def test_pipelined_realize_gives_identical_results(backend):
    a = np.arange(8, dtype=np.float32)
    x = fuel.from_numpy(a).to("threaded:0")
    chain = x
    for _ in range(20):
        chain = chain * 1.5 + x
    first = chain.to("cpu") + 0.0
    second = (chain.to("cpu") + 0.0)
    first.realize(pipelined=False)
    second.realize(pipelined=True)
    np.testing.assert_array_equal(first.numpy(), second.numpy())
    assert in_flight(DEVICE) == 0
