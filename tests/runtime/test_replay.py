"""A realize whose plan is cached replays it bound (fuel.runtime.replay.BoundPlan): results as
a plain walk, only the steps touching changed storages re-prepared, pool statistics and frees
as before, failures leaving it usable, big or busy plans on the plain walk."""

import gc

import numpy as np
import pytest

import fuel
from fuel.graph import Graph
from fuel.runtime import replay as replay_module
from fuel.runtime.executor import PLAN_CACHE


def _chain(x, scale):
    y = (x * scale + 0.5).exp()
    return (y - x).sum(0)


def _plan_of(tensor):
    """The cached plan of ``tensor``'s graph, realizing it first."""
    key = Graph.build([tensor._node]).structure_key()
    tensor.realize()
    return PLAN_CACHE.plans[key]


@pytest.mark.parametrize("fusion", [False, True])
def test_replays_match_numpy_with_new_and_stable_leaves(fusion):
    from fuel.compiler.fusion import fusion_enabled

    previous = fusion_enabled()
    fuel.set_fusion(fusion)
    try:
        _check_replays_with_new_and_stable_leaves(fusion)
    finally:
        fuel.set_fusion(previous)


def _check_replays_with_new_and_stable_leaves(fusion: bool) -> None:
    rng = np.random.default_rng(0)
    weight = fuel.from_numpy(rng.standard_normal(8).astype(np.float32))  # a stable leaf
    for _ in range(4):
        data = rng.standard_normal((3, 8)).astype(np.float32)
        x = fuel.from_numpy(data)
        result = _chain(x * weight, 1.5)
        plan = _plan_of(result)
        expected = (np.exp(data * weight.numpy() * 1.5 + 0.5) - data * weight.numpy()).sum(0)
        np.testing.assert_allclose(result.numpy(), expected, rtol=1e-5)
    bound = plan.replay
    assert bound, "the third realize of one structure runs a bound plan"
    # Between runs only the steps that read the changing input or write the output are
    # unprepared; every other step keeps its launcher (fused, the chain is two kernels that
    # each touch the input or the output).
    unprepared = sum(launcher is None for launcher in bound.launchers)
    assert 0 < unprepared
    assert unprepared < len(bound.launchers) or (fusion and len(bound.launchers) == 2)


def test_pool_statistics_return_to_baseline_after_replays():
    data = np.ones((4, 4), np.float32)
    for _ in range(2):
        _chain(fuel.from_numpy(data), 2.0).realize()
    gc.collect()
    before = fuel.memory_stats()["allocated"]
    results = [_chain(fuel.from_numpy(data), 2.0).realize() for _ in range(3)]
    assert fuel.memory_stats()["allocated"] > before  # the outputs are the user's
    del results
    gc.collect()
    assert fuel.memory_stats()["allocated"] == before


def test_a_failed_replay_leaves_the_plan_usable_and_names_the_line():
    values = fuel.from_numpy(np.arange(6, dtype=np.float32))
    for _ in range(2):
        (values.index_select(0, fuel.from_numpy(np.array([0, 1]))) * 2.0).realize()
    bad = values.index_select(0, fuel.from_numpy(np.array([0, 9]))) * 2.0
    with pytest.raises(fuel.KernelError, match=r"test_replay.py:\d+"):
        bad.realize()
    good = values.index_select(0, fuel.from_numpy(np.array([5, 2]))) * 2.0
    assert _plan_of(good).replay
    np.testing.assert_array_equal(good.numpy(), [10.0, 4.0])


def test_plans_with_big_intermediates_keep_the_plain_walk(monkeypatch):
    monkeypatch.setattr(replay_module, "REPLAY_BYTES_LIMIT", 16)
    data = np.ones(64, np.float32)
    for _ in range(3):
        result = _chain(fuel.from_numpy(data) * 3.0, 7.0)
        plan = _plan_of(result)
        np.testing.assert_allclose(result.numpy(), (np.exp(data * 21.0 + 0.5) - 3.0).sum(0),
                                   rtol=1e-5)
    assert plan.replay is False


def test_a_plan_busy_on_another_thread_is_walked_instead():
    data = np.full(5, 2.0, np.float32)
    for _ in range(2):
        _chain(fuel.from_numpy(data), 0.25).realize()
    bound = _plan_of(_chain(fuel.from_numpy(data), 0.25)).replay
    assert bound
    result = _chain(fuel.from_numpy(data), 0.25)
    with bound.lock:  # as if another thread were running it
        np.testing.assert_allclose(result.numpy(), (np.exp(data * 0.25 + 0.5) - data).sum(0),
                                   rtol=1e-6)


def test_buffers_of_different_sizes_are_shared():
    """A buffer idle over a value's lifetime serves it whatever their sizes (values laid
    into buffers largest first): a chain 2048 -> 8192 -> 1024 -> output takes two buffers,
    not three, and computes what NumPy does."""
    from fuel.runtime.jit import Capture

    rng = np.random.default_rng(4)
    x, w1, w2, w3, w4 = (rng.standard_normal(s).astype(np.float32) for s in
                         [(64, 16), (16, 32), (32, 128), (128, 16), (16, 64)])
    tx, t1, t2, t3, t4 = (fuel.tensor(a).realize() for a in (x, w1, w2, w3, w4))
    out = (((tx @ t1) @ t2) @ t3) @ t4
    capture = Capture([tx._node], [out._node])
    assert sorted(entry[4] for entry in capture.buffers) == [2048, 8192]
    for _ in range(2):
        storage, = capture.run([tx._node.buffer])
        node, = capture.output_nodes([storage])
        got = fuel.Tensor(node).numpy()
        np.testing.assert_allclose(got, (((x @ w1) @ w2) @ w3) @ w4, rtol=1e-4, atol=1e-4)


def test_an_elementwise_step_writes_over_an_operand_it_reads_last():
    """An elementwise CPU step whose operand dies with it (same dtype, size and dense layout)
    writes its output over that operand: a matmul, then relu of it, then a matmul takes one
    buffer for the first two, and the values are NumPy's."""
    from fuel.runtime.jit import Capture

    rng = np.random.default_rng(5)
    x, w1, w2 = (rng.standard_normal(s).astype(np.float32) for s in [(16, 8), (8, 32),
                                                                       (32, 4)])
    tx, t1, t2 = (fuel.tensor(a).realize() for a in (x, w1, w2))
    hidden = tx @ t1
    out = ((hidden * 2.0).relu() + hidden.sum()) @ t2  # the sum keeps a reader of hidden
    capture = Capture([tx._node], [out._node])
    written = [target for sources, target in capture.operands if target in sources]
    assert len(written) == 1  # the fused (mul, relu, add) over the matmul's buffer
    storage, = capture.run([tx._node.buffer])
    got = fuel.Tensor(capture.output_nodes([storage])[0]).numpy()
    h = x @ w1
    np.testing.assert_allclose(got, (np.maximum(h * 2, 0) + h.sum()) @ w2, rtol=1e-4,
                               atol=1e-4)


def test_a_lone_unary_step_keeps_its_own_output():
    """A lone unary op (the CPU's silu fills its output in passes that read the input again)
    never writes over its operand, fused or not."""
    from fuel.compiler.fusion import fusion_enabled
    from fuel.runtime.jit import Capture

    previous = fusion_enabled()
    fuel.set_fusion(False)
    try:
        x = np.linspace(-3, 3, 64, dtype=np.float32).reshape(8, 8)
        tx = fuel.tensor(x).realize()
        out = (tx @ tx).silu() @ tx
        capture = Capture([tx._node], [out._node])
        assert not [target for sources, target in capture.operands if target in sources]
        storage, = capture.run([tx._node.buffer])
        got = fuel.Tensor(capture.output_nodes([storage])[0]).numpy()
        h = x @ x
        np.testing.assert_allclose(got, (h / (1 + np.exp(-h))) @ x, rtol=1e-4, atol=1e-4)
    finally:
        fuel.set_fusion(previous)


def test_packed_buffers_never_serve_two_live_values():
    """``_pack`` over random lifetimes, sizes and dtypes: every value lands in a buffer of its
    dtype at least its size, and no buffer serves two values whose lifetimes overlap; a
    value that fits an idle buffer takes it (one buffer per step-disjoint chain here)."""
    from fuel.ir import dtype as dt
    from fuel.ir.device import CPU
    from fuel.runtime.replay import _pack

    rng = np.random.default_rng(5)
    for _ in range(50):
        count = int(rng.integers(1, 30))
        values, spans = [], []
        for _ in range(count):
            dtype = [dt.float32, dt.int64, dt.bool_][int(rng.integers(0, 3))]
            values.append((None, None, CPU, dtype, int(rng.integers(1, 100))))
            first = int(rng.integers(0, 40))
            spans.append([first, first + int(rng.integers(0, 10))])
        buffers, placed = _pack(values, spans)
        for value, buffer in enumerate(placed):
            assert buffers[buffer][3] is values[value][3]
            assert buffers[buffer][4] >= values[value][4]
        for a in range(count):
            for b in range(a + 1, count):
                if placed[a] == placed[b]:
                    assert spans[a][1] < spans[b][0] or spans[b][1] < spans[a][0]
    # Lifetimes in a row (each value freed before the next is written): one buffer, of the
    # largest size, where taking idle buffers as they come would grow a small first one and
    # then need a second for the value beside it.
    small, large, medium = ((None, None, CPU, dt.float32, n) for n in (10, 100, 50))
    buffers, placed = _pack([small, large, medium], [[0, 1], [2, 3], [4, 5]])
    assert [b[4] for b in buffers] == [100] and placed == [0, 0, 0]
    buffers, _ = _pack([small, large, medium], [[0, 4], [2, 3], [5, 6]])
    assert sorted(b[4] for b in buffers) == [10, 100]
