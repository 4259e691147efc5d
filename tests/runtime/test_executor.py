import tracemalloc

import numpy as np
import pytest

import fuel
from fuel.dispatch import in_flight_counts


def test_chain_on_large_tensor_keeps_a_few_buffers_live():
    size = 1 << 20  # 4 MiB of float32
    x = fuel.ones(size).realize()
    chain = x
    for _ in range(40):
        chain = chain * 1.0001 + 0.5
    tracemalloc.start()
    tracemalloc.reset_peak()
    chain.realize()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 4 * size * 4, f"peak {peak / 2**20:.1f} MiB for a chain of 80 ops"
    expected = np.ones(size, np.float32)
    for _ in range(40):
        expected = expected * np.float32(1.0001) + np.float32(0.5)
    np.testing.assert_allclose(chain.numpy()[:5], expected[:5], rtol=1e-6)


def test_realized_tensors_become_leaves_and_shared_subgraphs_run_once():
    x = fuel.randn(8, 8)
    shared = x.exp()
    a, b = shared + 1, shared * 2
    with fuel.profile() as prof:
        fuel.realize(a, b)
    launches = [row.op for row in prof.launches]
    assert launches.count("exp") == 1
    assert a.is_realized and b.is_realized and a._node.inputs == ()
    with fuel.profile() as prof:
        (a + b).realize()
    assert [row.op for row in prof.launches] == ["add"]


def test_pipelined_and_sequential_walks_agree():
    fuel.manual_seed(1)
    x = fuel.randn(16, 16)
    graphs = []
    for _ in range(2):
        y = x
        for k in range(30):
            y = (y @ x).softmax(-1) + k
        graphs.append(y.sum(-1))
    graphs[0].realize(pipelined=False)
    graphs[1].realize(pipelined=True)
    np.testing.assert_array_equal(graphs[0].numpy(), graphs[1].numpy())


@pytest.fixture(scope="module")
def partial():
    """A device backend with only a few kernels (add, mul, copy, a dense neg, ...)."""
    from tests.runtime.threaded_backend import shared_backend

    return shared_backend("threaded_two")


@pytest.mark.parametrize("pipelined", [False, True])
def test_missing_kernel_is_no_backend_for_op_naming_node_and_alternatives(partial, pipelined):
    x = fuel.ones(4).to("threaded_two:0")
    y = (x + 1.0).relu()
    with pytest.raises(fuel.NoBackendForOp) as info:
        y.realize(pipelined=pipelined)
    message = str(info.value)
    # relu decomposes (maximum with a FULL constant): the first primitive missing is named
    assert "missing primitive full" in message and "no kernel for full" in message
    assert "on backend threaded_two" in message and "relu has no kernel on threaded_two" in message
    assert "Backends with full: cpu" in message and "test_executor.py" in message
    assert all(count == 0 for count in in_flight_counts().values())


def test_non_contiguous_inputs_are_contiguized_for_dense_kernels(partial):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    x = fuel.from_numpy(a).to("threaded_two:0")
    result = (-(x.t()[1:])).to("cpu")
    np.testing.assert_array_equal(result.numpy(), -a.T[1:])
    assert partial.dense_layouts[-1].is_dense_from_zero()


def test_kernel_error_names_node_op_dtypes_backend_and_user_line():
    x = fuel.tensor([3.0]).log()
    with pytest.raises(fuel.KernelError) as info:
        fuel.tensor([[1.0, 2.0]]).index_select(1, fuel.tensor([7])).realize()
    message = str(info.value)
    assert "index_select" in message and "float32" in message and "cpu" in message
    assert "test_executor.py" in message and "index 7 is out of range" in message
    assert isinstance(info.value, fuel.IndexOutOfRange)
    assert isinstance(info.value.__cause__, fuel.IndexOutOfRange)
    assert all(count == 0 for count in in_flight_counts().values())
    np.testing.assert_allclose(x.numpy(), np.log([3.0]), rtol=1e-6)
