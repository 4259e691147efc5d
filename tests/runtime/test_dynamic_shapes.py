"""Dynamic shapes: a fused group seen at one shape serves every other shape with the same
collapsed loop (its generated kernel takes sizes and strides as launch arguments): no new
lowering, rendering or build, and the results of a fresh plan."""

from __future__ import annotations

import numpy as np
import pytest

import fuel
from fuel.backends.cpu import generated
from fuel.compiler import toolchain

pytestmark = pytest.mark.skipif(toolchain.unavailable_reason() is not None,
                                reason="no C compiler")


@pytest.fixture
def renders(monkeypatch):
    """Counts the C renderings of elementwise groups."""
    count = [0]
    original = generated.render_c

    def counting(*args, **kwargs):
        count[0] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(generated, "render_c", counting)
    return count


def chain(x):
    return ((x * 1.5 + 0.25).exp() - x) * 0.5


def test_new_sizes_reuse_the_groups_kernel(renders):
    rng = np.random.default_rng(0)
    for size in (1031, 17, 4096, 3):  # 1031 first: a size no other test has planned
        data = rng.standard_normal(size).astype(np.float32)
        got = chain(fuel.from_numpy(data)).numpy()
        expected = (np.exp(data * np.float32(1.5) + np.float32(0.25)) - data) * np.float32(0.5)
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    assert renders[0] <= 1  # the first size at most (an earlier test may have rendered it)


def test_broadcast_patterns_and_strided_inputs(renders):
    rng = np.random.default_rng(1)
    for rows, columns in ((3, 5), (7, 11), (2, 300)):
        a = rng.standard_normal((rows, 1)).astype(np.float32)
        b = rng.standard_normal((1, columns)).astype(np.float32)
        got = ((fuel.from_numpy(a) + fuel.from_numpy(b)) * 2.0 - 1.0).numpy()
        np.testing.assert_allclose(got, (a + b) * 2.0 - 1.0, rtol=1e-6)
    first = renders[0]
    assert first <= 1
    # a transposed (strided) operand walks its innermost dim differently: its own kernel
    for rows, columns in ((6, 4), (9, 13)):
        c = rng.standard_normal((columns, rows)).astype(np.float32)
        d = rng.standard_normal((rows, columns)).astype(np.float32)
        got = ((fuel.from_numpy(c).T + fuel.from_numpy(d)) * 2.0 - 1.0).numpy()
        np.testing.assert_allclose(got, (c.T + d) * 2.0 - 1.0, rtol=1e-6)
    assert renders[0] <= first + 1


def test_a_row_kernels_twin_describes_its_shape(renders):
    """A row kernel (a softmax) served at new lengths: its twin's loop holds the new shape and
    each load's new strides, and the results match NumPy's."""
    from fuel.dispatch.kernel import global_table
    from fuel.graph import Graph
    from fuel.runtime.plan import PlanBuilder

    rng = np.random.default_rng(2)
    for rows, length in ((5, 37), (3, 129), (8, 11)):
        data = rng.standard_normal((rows, length)).astype(np.float32)
        x = fuel.from_numpy(data)
        result = (x - x.max(-1, keepdim=True).values).exp()
        result = result / result.sum(-1, keepdim=True)
        builder = PlanBuilder(Graph.build([result._node]), global_table())
        fused = [s.compiled.kernel for s in builder.steps()
                 if hasattr(s, "compiled") and getattr(s.compiled.kernel, "loop", None)]
        assert fused, "the softmax fused into a row kernel"
        for kernel in fused:
            loop = kernel.loop
            assert loop.shape == (rows, length)
            for load in loop.loads:
                assert len(load.strides) == 2 and load.strides[1] in (0, 1)
        expected = np.exp(data - data.max(-1, keepdims=True))
        expected /= expected.sum(-1, keepdims=True)
        np.testing.assert_allclose(result.numpy(), expected, rtol=1e-5, atol=1e-7)
    assert renders[0] <= 1


@pytest.mark.parametrize("collecting", [True, False])
def test_a_capture_leaves_the_collector_as_it_found_it(collecting):
    """fuel.jit holds the cyclic collector off while it captures and restores its state."""
    import gc

    step = fuel.jit(lambda x: (x * 2.0 + 1.0).exp())
    was = gc.isenabled()
    try:
        (gc.enable if collecting else gc.disable)()
        data = np.arange(6, dtype=np.float32).reshape(2, 3)
        got = step(fuel.from_numpy(data)).numpy()
        assert gc.isenabled() is collecting
        np.testing.assert_allclose(got, np.exp(data * 2 + 1), rtol=1e-6)
    finally:
        (gc.enable if was else gc.disable)()
