"""Foreign calls and the CPU backend's launch sequences: a replay runs each run of consecutive
C kernels as one call of the sequence loop, with the same results as launching them one by one
(NumPy as the reference); the batcher patches changed calls in place; the C float32 arithmetic
gives NumPy's bits."""

import ctypes

import numpy as np
import pytest

import fuel
from fuel.backends.cpu import BACKEND, matmul
from fuel.backends.cpu.c_library import entry_point
from fuel.backends.cpu.elementwise import BINARY_SOURCE, C_BINARY_OPERATIONS
from fuel.backends.cpu.sequences import SequenceBatcher, SequenceCall, one_call
from fuel.compiler import toolchain
from fuel.compiler.foreign import ForeignCall
from fuel.ir.ops import OpKind

pytestmark = pytest.mark.skipif(toolchain.unavailable_reason() is not None,
                                reason="no C compiler")


def _add(x: np.ndarray, y: np.ndarray, out: np.ndarray) -> ForeignCall:
    function = entry_point("binary_float32", BINARY_SOURCE.read_text)
    data = (ctypes.c_void_p * 3)(x.ctypes.data, y.ctypes.data, out.ctypes.data)
    return ForeignCall(function, data, (ctypes.c_int64 * 2)(C_BINARY_OPERATIONS[OpKind.ADD],
                                                            out.size))


def test_batcher_runs_consecutive_calls_as_one_sequence_and_patches_them():
    x = np.arange(8, dtype=np.float32)
    a, b, c = (np.zeros(8, np.float32) for _ in range(3))
    first, second, third = _add(x, x, a), _add(a, x, b), _add(b, x, c)
    log = []
    python_step = lambda: log.append(float(c[1]))  # noqa: E731 - a launcher that is not C
    batcher = BACKEND.launch_batcher()
    assert isinstance(batcher, SequenceBatcher)
    batched = batcher.batch([first, second, python_step, third])
    assert [type(launch) for launch in batched] == [SequenceCall, type(python_step), ForeignCall]
    for launch in batched:
        launch()
    np.testing.assert_array_equal(c, 4 * x)
    assert log == [0.0]  # the Python step ran between the sequence and the last call
    assert batcher.batch([first, second, python_step, third]) is batched  # nothing changed

    d = np.zeros(8, np.float32)
    replaced = _add(x, x, d)  # the first call now writes d
    batched = batcher.batch([replaced, second, python_step, third])
    assert batched[0].calls[0] is replaced
    for launch in batched:
        launch()
    np.testing.assert_array_equal(d, 2 * x)
    e = np.zeros(8, np.float32)
    lone = _add(x, x, e)  # the lone call after the Python step: swapped in place, no rebuild
    patched = batcher.batch([replaced, second, python_step, lone])
    assert patched is batched and patched[-1] is lone
    for launch in patched:
        launch()
    np.testing.assert_array_equal(e, 2 * x)
    other = lambda: log.append("other")  # noqa: E731
    batched = batcher.batch([replaced, second, other, lone])
    for launch in batched:
        launch()
    assert log[-1] == "other"


def test_one_kernels_calls_run_as_one_foreign_call_in_order():
    """one_call: a kernel's launches as one foreign call of the sequence loop (so a batcher
    folds it into its sequences), run in order; a call that validates at launch is refused
    (the loop would not read its status)."""
    x = np.arange(8, dtype=np.float32)
    a, b = np.zeros(8, np.float32), np.zeros(8, np.float32)
    call = one_call([_add(x, x, a), _add(a, x, b)])
    assert type(call) is ForeignCall
    call()
    np.testing.assert_array_equal(b, 3 * x)
    checked = _add(x, x, a)
    checked.status = np.zeros(1, np.int64)
    assert one_call([_add(x, x, a), checked]) is None


def _batched(bound) -> list:
    """The launches of a bound plan's last batched run (its CPU segments' sequences)."""
    return [launch for batcher in bound.launches.batchers if batcher is not None
            for launch in batcher.batched]


def _function(x, w, cache, positions):
    hidden = (x @ w) * 0.5 + 1.0  # C matmul, a fused kernel
    cache.index_copy_(0, positions, hidden)  # the C copy
    mixed = hidden + x[:, :4]  # C arithmetic
    return (mixed.exp() - mixed).sum(-1, keepdim=True), cache * 1.0


def _reference(x, w, cache, position):
    hidden = (x @ w) * 0.5 + 1.0
    cache[position] = hidden[0]
    mixed = hidden + x[:, :4]
    return (np.exp(mixed) - mixed).sum(-1, keepdims=True), cache.copy()


def test_replay_with_sequences_matches_numpy_and_the_unbatched_launches():
    rng = np.random.default_rng(0)
    w_values = rng.standard_normal((8, 4)).astype(np.float32)
    cache_values = np.zeros((6, 4), np.float32)
    w, cache = fuel.from_numpy(w_values), fuel.from_numpy(cache_values.copy())
    replay = fuel.jit(_function)
    for position in (0, 3, 5, 1):
        x_values = rng.standard_normal((1, 8)).astype(np.float32)
        outs = replay(fuel.from_numpy(x_values), w, cache,
                      fuel.from_numpy(np.array([position], np.int64)))
        expected = _reference(x_values, w_values, cache_values, position)
        for got, want in zip(outs, expected):
            np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5)
    capture = next(iter(replay.captures.values()))[0]
    sequences = [launch for launch in _batched(capture) if type(launch) is SequenceCall]
    assert sequences and sum(len(s.calls) for s in sequences) >= 3
    with fuel.profile():  # profiled replays launch step by step: the same numbers
        x_values = rng.standard_normal((1, 8)).astype(np.float32)
        outs = replay(fuel.from_numpy(x_values), w, cache,
                      fuel.from_numpy(np.array([2], np.int64)))
    expected = _reference(x_values, w_values, cache_values, 2)
    for got, want in zip(outs, expected):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5)


SPECIAL = np.array([0.0, -0.0, 1.0, -1.5, 3e38, -3e38, 1e-45, -1e-45, 1e-38, np.inf, -np.inf,
                    np.nan, 7.0, 0.1], np.float32)


@pytest.mark.parametrize("op", sorted(C_BINARY_OPERATIONS, key=lambda op: op.value))
def test_c_float32_arithmetic_gives_numpy_bits(op):
    """Every pair of special values and random ones, through fuel's add/sub/mul/div kernel
    (the C path for small float32 operands) against NumPy's ufunc, bit for bit."""
    rng = np.random.default_rng(1)
    x = np.concatenate([np.repeat(SPECIAL, SPECIAL.size),
                        rng.standard_normal(500).astype(np.float32)])
    y = np.concatenate([np.tile(SPECIAL, SPECIAL.size),
                        rng.standard_normal(500).astype(np.float32)])
    functions = {OpKind.ADD: (np.add, lambda a, b: a + b),
                 OpKind.SUB: (np.subtract, lambda a, b: a - b),
                 OpKind.MUL: (np.multiply, lambda a, b: a * b),
                 OpKind.DIV: (np.true_divide, lambda a, b: a / b)}
    numpy_function, fuel_function = functions[op]
    with np.errstate(all="ignore"):
        expected = numpy_function(x, y)
    got = fuel_function(fuel.from_numpy(x), fuel.from_numpy(y)).numpy()
    assert got.view(np.uint32).tolist() == expected.view(np.uint32).tolist()


def test_cached_plan_replays_in_sequences_and_names_a_failing_copy():
    """A realize whose plan is cached (BoundPlan) runs its C steps as sequences too; a bad
    position in a later realize raises naming the index_copy node, and the plan still works."""
    from fuel.graph import Graph
    from fuel.ir.errors import IndexOutOfRange
    from fuel.runtime.executor import PLAN_CACHE

    rng = np.random.default_rng(2)

    def build(position: int, values: np.ndarray):
        cache = fuel.from_numpy(np.zeros((5, 4), np.float32))
        hidden = fuel.from_numpy(values) * 2.0 + 1.0
        written = cache.index_copy(0, fuel.from_numpy(np.array([position], np.int64)), hidden)
        return written + fuel.from_numpy(np.ones((5, 4), np.float32))

    for position in (0, 3, 4, 1):
        values = rng.standard_normal((1, 4)).astype(np.float32)
        result = build(position, values)
        key = Graph.build([result._node]).structure_key()
        expected = np.ones((5, 4), np.float32)
        expected[position] += values[0] * 2.0 + 1.0
        np.testing.assert_allclose(result.numpy(), expected, rtol=1e-6)
    bound = PLAN_CACHE.plans[key].replay
    assert any(type(launch) is SequenceCall for launch in _batched(bound))
    with pytest.raises(IndexOutOfRange) as caught:
        build(7, values).numpy()
    assert "index 7 is out of range" in str(caught.value) and "index_copy" in str(caught.value)
    np.testing.assert_allclose(build(2, values).numpy()[2], values[0] * 2.0 + 2.0, rtol=1e-6)


def test_profile_rows_name_the_code_each_launch_ran(monkeypatch):
    """A kernel with a C path and a NumPy (or OpenBLAS) one: each profiled launch's row says
    which ran, eager or replayed, not only the binding's tag. (With the judge off, so that
    the matmul's own rule decides which path runs.)"""
    from fuel.runtime.judge import JUDGE

    monkeypatch.setenv("FUEL_JUDGE", "off")
    JUDGE.forget()
    small = fuel.from_numpy(np.ones(64, np.float32))
    large = fuel.from_numpy(np.ones(1 << 17, np.float32))
    square = fuel.from_numpy(np.ones((128, 128), np.float32))
    with fuel.profile() as prof:
        (small + small).realize()  # binary.c
        (large + large).realize()  # NumPy's loop
        (square.T @ square).realize()  # 128 rows of a transposed a: OpenBLAS (fuel's team)
        (square @ square).realize()  # 128 rows: the gemm form (C)
        (square[:2] @ square).realize()  # 2 rows: the C kernel
    sources = {(row.op, row.bytes): row.kernel_source for row in prof.launches}
    assert sources[("add", 64 * 4)] == "c"
    assert sources[("add", (1 << 17) * 4)] == "numpy"
    blas = "openblas" if matmul.openblas_entries() is not None else "numpy"
    assert [row.kernel_source for row in prof.launches if row.op == "matmul"] == [blas, "c",
                                                                                   "c"]


def test_a_rebound_call_reads_the_new_array_and_never_moves_off_baked_values():
    """``rebind`` moves the entries inside one operand's bytes (an offset kept) and no other;
    the call then computes on the new array. A call that baked an operand's values refuses."""
    x, y = np.arange(8, dtype=np.float32), np.full(8, 2, np.float32)
    out = np.zeros(8, np.float32)
    call = _add(x, y, out)
    call.rebindable = True
    moved = np.arange(8, dtype=np.float32) * 10
    start = x.ctypes.data
    assert call.can_rebind(start, start + x.nbytes)
    call.rebind(start, start + x.nbytes, moved.ctypes.data)
    call()
    np.testing.assert_array_equal(out, moved + y)
    assert call.data[1] == y.ctypes.data and call.data[2] == out.ctypes.data
    call.baked = (y.ctypes.data,)
    assert not call.can_rebind(y.ctypes.data, y.ctypes.data + y.nbytes)
    assert call.can_rebind(moved.ctypes.data, moved.ctypes.data + moved.nbytes)
    assert not _add(x, y, out).can_rebind(start, start + x.nbytes)  # not declared rebindable
