"""A fused group planned before is not lowered again (the compile memo keyed by its lowering
signature), and a group that differs in anything its kernel depends on is lowered anew."""

import numpy as np
import pytest

import fuel
from fuel.compiler import toolchain
from fuel.runtime import plan

pytestmark = pytest.mark.skipif(toolchain.unavailable_reason() is not None,
                                reason=str(toolchain.unavailable_reason()))


@pytest.fixture
def lowerings(monkeypatch):
    """Count lower_group calls with fusion on and the plan cache off (every realize plans)."""
    calls = []
    lower = plan.lower_group

    def counting(graph, group, node_values):
        calls.append(group.name)
        return lower(graph, group, node_values)

    monkeypatch.setattr(plan, "lower_group", counting)
    monkeypatch.setattr(plan, "_compiled_cache", {})
    fuel.set_fusion(True)
    fuel.set_plan_cache_capacity(0)
    yield calls
    fuel.set_plan_cache_capacity(128)


def _graph(x, y):
    return ((x * 2.0 + y).tanh() - x * y) * 0.5


def test_an_equal_group_is_lowered_once_and_computes_its_own_leaves(lowerings):
    random = np.random.default_rng(3)
    for _ in range(3):
        x = random.standard_normal((4, 6)).astype(np.float32)
        y = random.standard_normal((4, 6)).astype(np.float32)
        values = _graph(fuel.tensor(x), fuel.tensor(y)).numpy()
        np.testing.assert_allclose(values, (np.tanh(x * 2 + y) - x * y) * 0.5, rtol=1e-5,
                                   atol=1e-6)
    assert len(lowerings) == 1


def test_a_different_layout_wiring_or_literal_lowers_again(lowerings):
    random = np.random.default_rng(4)
    x = random.standard_normal((6, 6)).astype(np.float32)
    y = random.standard_normal((6, 6)).astype(np.float32)
    z = random.standard_normal((6, 6)).astype(np.float32)
    tx, ty, tz = fuel.tensor(x), fuel.tensor(y), fuel.tensor(z)
    cases = [
        (lambda: _graph(tx, ty), (np.tanh(x * 2 + y) - x * y) * 0.5),
        # an input read through a transposed view: other strides
        (lambda: _graph(tx.permute(1, 0), ty), (np.tanh(x.T * 2 + y) - x.T * y) * 0.5),
        # the same leaf on both sides: other wiring (one load, not two)
        (lambda: _graph(tx, tx), (np.tanh(x * 2 + x) - x * x) * 0.5),
        # equal structural keys (the leaves' keys are equal), equal loads, other wiring
        (lambda: (tx * ty + tx * tz).exp(), np.exp(x * y + x * z)),
        (lambda: (tx * ty + tz * ty).exp(), np.exp(x * y + z * y)),
        # constant fills become literals in the kernel: another value, another kernel
        (lambda: _graph(tx, fuel.full((6, 6), 0.25)), (np.tanh(x * 2 + 0.25) - x * 0.25) * 0.5),
        (lambda: _graph(tx, fuel.full((6, 6), 0.75)), (np.tanh(x * 2 + 0.75) - x * 0.75) * 0.5),
    ]
    for build, expected in cases:
        np.testing.assert_allclose(build().numpy(), expected, rtol=1e-5, atol=1e-6)
    assert len(lowerings) == len(cases)
    for build, expected in cases:  # each seen before now: no lowering
        np.testing.assert_allclose(build().numpy(), expected, rtol=1e-5, atol=1e-6)
    assert len(lowerings) == len(cases)


def test_a_python_scalar_is_leaf_data_not_part_of_the_kernel(lowerings):
    x = np.linspace(-1, 1, 8, dtype=np.float32)
    tx = fuel.tensor(x)
    for scale in (2.0, 3.0, 5.0):  # a stride-0 constant leaf: the same kernel each time
        np.testing.assert_allclose(((tx * scale + 1.0).tanh() * 0.5).numpy(),
                                   np.tanh(x * scale + 1) * 0.5, rtol=1e-5, atol=1e-6)
    assert len(lowerings) == 1


def _softmax(x: np.ndarray) -> np.ndarray:
    shifted = np.exp(x - x.max(-1, keepdims=True))
    return shifted / shifted.sum(-1, keepdims=True)


def _norm(x: np.ndarray) -> np.ndarray:
    centred = x - x.mean(-1, keepdims=True)
    return centred / np.sqrt((centred * centred).mean(-1, keepdims=True) + 1e-5)


def test_a_row_kernel_serves_new_shapes_without_lowering(lowerings):
    """Row kernels (softmax, a norm over a fixed width, a sum) take sizes and strides as launch
    arguments: a new batch or sequence length with the same row schedule runs the kernel
    built first, and computes its own shape's values."""
    random = np.random.default_rng(5)
    at_first = None
    for batch, length in ((2, 5), (3, 17), (1, 40), (4, 3)):
        x = random.standard_normal((batch, length, length)).astype(np.float32)
        w = random.standard_normal((batch, length, 24)).astype(np.float32)
        t, tw = fuel.tensor(x), fuel.tensor(w)
        np.testing.assert_allclose(fuel.softmax(t, -1).numpy(), _softmax(x), rtol=1e-5,
                                   atol=1e-6)
        centred = tw - tw.mean(-1, keepdim=True)
        normed = centred / ((centred * centred).mean(-1, keepdim=True) + 1e-5).sqrt()
        np.testing.assert_allclose(normed.numpy(), _norm(w), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose((t * 2.0).sum(-1).numpy(), (x * 2).sum(-1), rtol=1e-5,
                                   atol=1e-5)
        at_first = len(lowerings) if at_first is None else at_first
    first = len(lowerings)
    assert first == at_first, lowerings  # each kernel lowered at the first shape only
    # a row read across its storage (a transposed input): another row pattern, lowered anew
    x = random.standard_normal((3, 9, 9)).astype(np.float32)
    np.testing.assert_allclose(fuel.softmax(fuel.tensor(x).permute(0, 2, 1), -1).numpy(),
                               _softmax(x.transpose(0, 2, 1)), rtol=1e-5, atol=1e-6)
    assert len(lowerings) > first
