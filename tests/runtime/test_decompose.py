"""Planning through decompositions: kernels win, expanded plans are cached and rebound,
explain() shows decomposed nodes, and a missing primitive is named."""

import numpy as np
import pytest

import fuel
from fuel.dispatch.kernel import global_table
from fuel.graph import Graph
from fuel.graph.decompositions import DECOMPOSITIONS
from fuel.ir.ops import OPS, PRIMITIVE_OPS, OpKind
from fuel.nn.functional import layer_norm
from fuel.runtime.executor import plan_cache_stats
from fuel.runtime.resolve import resolve
from tests.backends.primitive_backend import (
    DEVICE,
    primitive_backend,
)
from tests.runtime.threaded_backend import shared_backend


@pytest.fixture(scope="module", autouse=True)
def backend():
    yield primitive_backend()


def _array(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _softmax(a):
    e = np.exp(a - a.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_every_non_primitive_op_has_a_decomposition_or_is_a_view_or_leaf():
    uncovered = {kind for kind, record in OPS.items()
                 if kind not in PRIMITIVE_OPS and kind not in DECOMPOSITIONS
                 and not record.view and not record.host_only
                 and kind not in (OpKind.LOAD, OpKind.FUSED)}
    assert not uncovered, uncovered


def test_a_registered_kernel_wins_over_the_decomposition():
    """Without fusion; with it, the measured rule may prefer a fused decomposition
    (tests/compiler/test_fusion_rule.py)."""
    fuel.set_fusion(False)
    try:
        x = fuel.from_numpy(_array((3, 4), 0))
        graph = Graph.build([x.softmax(-1).gelu()._node])
        assert resolve(graph, global_table()).expansion is None
        assert "decomposed" not in str(x.softmax(-1).explain())
    finally:
        fuel.set_fusion(True)


def test_the_same_decomposed_graph_twice_rebinds_its_leaves_from_the_plan_cache():
    results = []
    for seed in (1, 2):
        a, b = _array((4, 6), seed), _array((4, 6), seed + 10)
        x, y = fuel.from_numpy(a).to(DEVICE), fuel.from_numpy(b).to(DEVICE)
        before = plan_cache_stats()["hits"]
        out = (x.softmax(-1) * y).layer_norm((6,)) if hasattr(x, "layer_norm") else \
            fuel.nn.functional.layer_norm(x.softmax(-1) * y, (6,))
        results.append((out.numpy(), a, b, plan_cache_stats()["hits"] - before))
    for got, a, b, _ in results:
        z = _softmax(a) * b
        expected = (z - z.mean(-1, keepdims=True)) / np.sqrt(z.var(-1, keepdims=True) + 1e-5)
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    assert results[0][3] == 0 and results[1][3] >= 1


def test_a_decomposed_root_is_realized_and_reused_as_a_leaf():
    a = _array((2, 5), 3)
    x = fuel.from_numpy(a).to(DEVICE)
    probabilities = x.softmax(-1)
    np.testing.assert_allclose(probabilities.numpy(), _softmax(a), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose((probabilities + 1).numpy(), _softmax(a) + 1, rtol=1e-6)


def test_explain_shows_a_decomposed_node_with_its_primitives():
    x = fuel.from_numpy(_array((3, 4), 0)).to(DEVICE)
    explanation = x.softmax(-1).explain()
    rows = {row.op.strip(): row for row in explanation.rows}
    assert rows["softmax"].dispatch == "decomposed"
    parts = [row for row in explanation.rows if row.part >= 0]
    assert [row.op.strip() for row in parts if row.op.strip() != "expand"] == \
        ["max", "sub", "exp", "sum", "div"]
    assert all(row.node_id == rows["softmax"].node_id for row in parts)
    assert all(row.dispatch in ("primitive-numpy", "view") for row in parts)
    assert f"{rows['softmax'].node_id}.0" in str(explanation)


def test_no_backend_for_op_names_the_missing_primitive_and_the_user_line():
    shared_backend("threaded")  # registers add, mul, copy and contiguous only
    x = fuel.ones(4).to("threaded:0")
    with pytest.raises(fuel.NoBackendForOp) as info:
        x.softmax(-1).realize()
    message = str(info.value)
    assert "missing primitive max" in message and "softmax has no kernel on threaded" in message
    assert "Backends with max:" in message and "test_decompose.py" in message


@pytest.mark.parametrize("pipelined", [False, True])
def test_a_decomposed_graph_realizes_pipelined_and_jitted(pipelined):
    a = _array((3, 7), 4)
    x = fuel.from_numpy(a).to(DEVICE)
    y = x.softmax(-1).realize(pipelined=pipelined)
    np.testing.assert_allclose(y.numpy(), _softmax(a), rtol=1e-6, atol=1e-7)
    jitted = fuel.jit(lambda t: t.log_softmax(-1) * 2)
    for seed in (5, 6):
        b = _array((3, 7), seed)
        got = jitted(fuel.from_numpy(b).to(DEVICE)).numpy()
        np.testing.assert_allclose(got, np.log(_softmax(b)) * 2, rtol=1e-5, atol=1e-6)
    assert jitted.replays == 1


def _expanded_keys(graph, recipes):
    resolution_graph = resolve_with(graph, recipes)
    return [(n.op, n.params, n.dtype, n.shape, n.key) for n in resolution_graph.nodes]


def resolve_with(graph, recipes):
    from fuel.graph.decompositions.expand import expand_graph
    from fuel.runtime.resolve import _memo_for, _Pass

    resolving = _Pass(_memo_for(global_table()))
    return expand_graph(graph, resolving.has_kernel, True, None, resolving.table_of,
                        None, recipes).graph


def test_a_recorded_decomposition_replays_node_for_node():
    """A recipe (a decomposition's nodes as data) rebuilds exactly the nodes the decomposition
    builds: the expansion with recipes recorded in the same graph (two identical layer norms,
    softmaxes) and reused from an earlier one equals the expansion without any."""
    a = fuel.from_numpy(_array((3, 8), 1)).to(DEVICE)
    b = fuel.from_numpy(_array((3, 8), 2)).to(DEVICE)
    weight = fuel.from_numpy(_array((8,), 3)).to(DEVICE)
    first = layer_norm(a, (8,), weight, None, 1e-5).softmax(-1)
    second = layer_norm(b, (8,), weight, None, 1e-5).softmax(-1)
    graph = Graph.build([(first + second)._node])
    fresh = _expanded_keys(graph, None)
    memo: dict = {}
    recorded = _expanded_keys(graph, memo)
    assert memo, "the decompositions left no recipe"
    replayed = _expanded_keys(graph, memo)
    assert recorded == fresh and replayed == fresh
    expected = _softmax(_layer_norm(_array((3, 8), 1), _array((8,), 3))) + _softmax(
        _layer_norm(_array((3, 8), 2), _array((8,), 3)))
    np.testing.assert_allclose((first + second).numpy(), expected, rtol=1e-5, atol=1e-6)


def _layer_norm(x, weight):
    mean = x.mean(-1, keepdims=True)
    variance = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + 1e-5) * weight


def test_a_decomposition_reaching_past_its_inputs_is_not_recorded():
    from fuel.graph.decompositions.builder import Builder
    from fuel.graph.decompositions.expand import Recipe

    x = fuel.from_numpy(_array((4,), 4)).to(DEVICE)
    y = (x + 1.0)._node
    node = (fuel.Tensor(y) * 2.0)._node
    build = Builder(node)
    past = build.add(y.inputs[0], node.inputs[1])  # reads x, which is not an input of node
    assert Recipe.record(node, past, build.made) is None
    own = build.mul(node.inputs[0], node.inputs[1])
    recipe = Recipe.record(node, own, build.made)
    assert recipe is not None and recipe.make(node).key == own.key
