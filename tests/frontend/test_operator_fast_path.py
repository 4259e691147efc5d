"""Tensor's Python operators build their common case inline (fuel/frontend/elementwise.py,
``binary_operator``): the Node must be exactly the one the general ``make`` builds, slot by
slot, with the user's line as its site; the one-entry memos (a literal's constant, the rule's
result) must never hand one operand's node to another."""

import inspect
import threading

import numpy as np
import pytest

import fuel
from fuel.frontend.build import constant, make
from fuel.graph.node import Node
from fuel.ir.ops import NO_PARAMS, OpKind

_SLOTS = [name for name in Node.__slots__ if name != "__weakref__"]
_OPERATORS = {
    OpKind.ADD: ("__add__", "__radd__"),
    OpKind.SUB: ("__sub__", "__rsub__"),
    OpKind.MUL: ("__mul__", "__rmul__"),
    OpKind.DIV: ("__truediv__", "__rtruediv__"),
    OpKind.POW: ("__pow__", "__rpow__"),
    OpKind.LT: ("__lt__", None),
    OpKind.EQ: ("__eq__", None),
}


def _line() -> int:
    return inspect.currentframe().f_back.f_lineno


def _assert_same_node(fast: Node, general: Node) -> None:
    for name in _SLOTS:
        if name == "site":
            continue
        assert hasattr(fast, name) == hasattr(general, name), name
        if not hasattr(fast, name):
            continue
        mine, theirs = getattr(fast, name), getattr(general, name)
        if name == "inputs":
            assert len(mine) == len(theirs) and all(a is b for a, b in zip(mine, theirs))
        else:
            assert mine == theirs, name


@pytest.mark.parametrize("op", list(_OPERATORS), ids=lambda op: op.value)
@pytest.mark.parametrize("other", ["tensor", "float"])
def test_operator_builds_the_general_node(op, other):
    x = fuel.from_numpy(np.array([1.5, -2.0, 3.0], np.float32))
    y = fuel.from_numpy(np.array([0.5, 4.0, -1.0], np.float32)) if other == "tensor" else 1.25
    forward, reflected = _OPERATORS[op]
    node = x._node
    right = y._node if other == "tensor" else constant(y, node.dtype, node.device, node.shape)
    result, line = getattr(x, forward)(y), _line()
    _assert_same_node(result._node, make(op, (x._node, right), NO_PARAMS)._node)
    assert result._node.site == (__file__, line)
    if reflected is not None and other == "float":
        result, line = getattr(x, reflected)(y), _line()
        _assert_same_node(result._node, make(op, (right, x._node), NO_PARAMS)._node)
        assert result._node.site == (__file__, line)
    assert not result._node.realized


def test_memos_tell_literals_dtypes_and_shapes_apart():
    """One operator applied in a loop to changing literals, dtypes, shapes and devices of
    operands: every result matches NumPy (a memo hit for the wrong key would not)."""
    rng = np.random.default_rng(3)
    for step in range(40):
        dtype = (np.float32, np.float64, np.float16)[step % 3]
        shape = ((3,), (2, 3), (3,), ())[step % 4]
        data = rng.standard_normal(shape).astype(dtype)
        x = fuel.from_numpy(data)
        literal = (0.5, -0.0, 0.0, 2.0, float("nan"))[step % 5]
        cases = ((x * literal, data * dtype(literal)), (literal - x, dtype(literal) - data),
                 (x + x, data + data))
        for got, want in cases:
            assert got.dtype.name == np.dtype(dtype).name and got.shape == data.shape
            np.testing.assert_array_equal(got.numpy(), want)
            if literal == 0.0:  # -0.0 and 0.0 give different signed zeros
                np.testing.assert_array_equal(np.signbit(got.numpy()), np.signbit(want))


def test_signed_zero_literals_one_after_the_other():
    """-0.0 == 0.0: the literal memo must not take one for the other."""
    data = np.array([1.0, -2.0, 0.0], np.float32)
    x = fuel.from_numpy(data)
    for literal in (-0.0, 0.0, -0.0, 0.0):
        got = (x * literal).numpy()
        np.testing.assert_array_equal(np.signbit(got), np.signbit(data * np.float32(literal)))


def test_site_is_the_user_line_or_the_api_call():
    x = fuel.from_numpy(np.ones(4, np.float32))

    def helper(t):
        return t * 3.0, _line()

    (first, line), (second, _) = helper(x), helper(x)
    assert first._node.site == second._node.site == (__file__, line)
    # Inside an API entry (at_user_line) every node carries the entry's line.
    (result, line) = fuel.where(x > 0.0, x * 2.0, x), _line()
    assert result._node.site == (__file__, line)


def test_literal_memo_under_threads():
    """Threads applying one operator to different literals never see each other's constant."""
    data = np.arange(64, dtype=np.float32)
    failures = []

    def work(literal: float) -> None:
        for _ in range(200):
            x = fuel.from_numpy(data)
            got = (x * literal).numpy()
            if not np.array_equal(got, data * np.float32(literal)):
                failures.append(literal)
                return

    threads = [threading.Thread(target=work, args=(float(k) + 0.5,)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures


def test_sites_in_progress_follow_api_calls_and_threads():
    """The operators skip the thread-local site only while no thread has one set: an API call
    that raises leaves none behind, and another thread's site never becomes this one's."""
    from fuel.graph.node import set_user_site, sites_in_progress

    x = fuel.from_numpy(np.ones(3, np.float32))
    with pytest.raises(fuel.FuelError):
        x.reshape(7)
    assert sites_in_progress == []
    started, release = threading.Event(), threading.Event()

    def other_thread() -> None:
        set_user_site(("elsewhere.py", 1))
        started.set()
        release.wait(10)
        set_user_site(None)

    thread = threading.Thread(target=other_thread)
    thread.start()
    started.wait(10)
    try:
        assert len(sites_in_progress) == 1
        result, line = x * 2.0, _line()
        assert result._node.site == (__file__, line)
    finally:
        release.set()
        thread.join()
    assert sites_in_progress == []
    set_user_site(("mine.py", 3))
    try:
        assert (x * 2.0)._node.site == ("mine.py", 3)
    finally:
        set_user_site(None)
    assert sites_in_progress == []
