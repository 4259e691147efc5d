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
