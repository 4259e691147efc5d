"""Graph.build numbers nodes in depth-first post-order (inputs in order, each node once,
realized nodes as leaves), and Wiring.match finds the same graph behind new roots of the
same wiring and refuses any other: both checked on random DAGs against a plain recursive
reference."""

import random
import sys

import numpy as np

import fuel
from fuel.graph import Graph, Node


def _reference(roots: list[Node]) -> tuple[list[Node], list[tuple[int, ...]]]:
    index: dict[int, int] = {}
    nodes: list[Node] = []
    inputs: list[tuple[int, ...]] = []

    def visit(node: Node) -> int:
        if id(node) not in index:
            sources = () if node.buffer is not None else node.inputs
            ids = tuple(visit(source) for source in sources)
            index[id(node)] = len(nodes)
            nodes.append(node)
            inputs.append(ids)
        return index[id(node)]

    for root in roots:
        visit(root)
    return nodes, inputs


def _random_graph(rng: random.Random, size: int):
    """Tensors over a few leaves built by ops of one, two, three and more inputs, with shared
    operands, repeated operands and realized inner nodes."""
    pool = [fuel.from_numpy(np.full(3, k + 1.0, np.float32)) for k in range(3)]
    for step in range(size):
        a, b, c = rng.choice(pool), rng.choice(pool), rng.choice(pool)
        kind = rng.random()
        if kind < 0.3:
            pool.append(a + b)
        elif kind < 0.45:
            pool.append(a * a)
        elif kind < 0.6:
            pool.append(fuel.where(a > b, b, c))
        elif kind < 0.7:
            pool.append(fuel.stack([a, b, c, a]).sum(0))
        elif kind < 0.8:
            pool.append(a.exp())
        elif kind < 0.85 and step:
            pool.append((a - 1.0).realize())
        else:
            pool.append(a * 0.5)
    lazy = [t for t in pool if not t._node.realized]
    return pool, lazy


def test_build_is_the_recursive_post_order():
    rng = random.Random(7)
    for trial in range(150):
        _, lazy = _random_graph(rng, rng.randint(1, 40))
        if not lazy:
            continue
        roots = [t._node for t in rng.sample(lazy, rng.randint(1, min(4, len(lazy))))]
        if trial % 4 == 0:
            roots.append(roots[0])  # a root named twice
        graph = Graph.build(roots)
        nodes, inputs = _reference(roots)
        assert len(graph.nodes) == len(nodes)
        assert all(a is b for a, b in zip(graph.nodes, nodes))
        assert graph.inputs == inputs
        assert graph.roots == [nodes.index(r) for r in roots]
        assert graph.leaves == [i for i, n in enumerate(nodes) if n.realized]


def test_build_of_a_chain_deeper_than_the_recursion_limit():
    x = fuel.from_numpy(np.ones(2, np.float32))
    for _ in range(sys.getrecursionlimit() + 100):
        x = x + 1.0
    graph = Graph.build([x._node])
    assert len(graph.nodes) == sys.getrecursionlimit() + 102  # the leaf and one constant
    assert all(all(source < i for source in sources) for i, sources in enumerate(graph.inputs))


def test_match_finds_the_same_wiring_and_refuses_another():
    def build(shared: bool):
        a = fuel.from_numpy(np.ones(3, np.float32))
        b = a if shared else fuel.from_numpy(np.ones(3, np.float32))
        return ((a + b) * 2.0).exp()

    recorded = Graph.build([build(False)._node]).wiring()
    again = build(False)._node
    matched = recorded.match([again])
    assert matched is not None
    assert all(x is y for x, y in zip(matched.nodes, Graph.build([again]).nodes))
    # Recorded a + a (one leaf read twice) does not run a + b; the other way round the
    # plan's two leaf slots simply hold one storage.
    assert Graph.build([build(True)._node]).wiring().match([build(False)._node]) is None
    # An inner node realized since: the recorded wiring no longer describes the graph.
    stale = build(False)._node
    fuel.Tensor(stale.inputs[0]).realize()  # exp((a + b) * 2.0): the product is a leaf now
    assert recorded.match([stale]) is None
    assert Graph.build([stale]).leaves == [0]


def _same_code_graph(size: int, seed: int):
    """One random program (fixed by ``seed``) run on leaves of ``size`` elements."""
    rng = random.Random(seed)
    pool = [fuel.from_numpy(np.arange(size, dtype=np.float32) + k) for k in range(3)]
    for _ in range(25):
        a, b = rng.choice(pool), rng.choice(pool)
        kind = rng.random()
        pool.append(a + b if kind < 0.4 else a * 0.5 if kind < 0.7 else
                    fuel.where(a > b, a, b) if kind < 0.85 else a.exp())
    return [t._node for t in pool[-3:] if not t._node.realized] or [pool[-1]._node]


def test_match_without_leaf_keys_numbers_a_new_shape_as_build_does():
    for seed in range(40):
        recorded = Graph.build(_same_code_graph(4, seed)).wiring()
        roots = _same_code_graph(9, seed)
        matched = recorded.match(roots, leaf_keys=False)
        built = Graph.build(roots)
        assert recorded.match(roots) is None  # the leaves' keys name their shapes
        assert matched is not None
        assert all(a is b for a, b in zip(matched.nodes, built.nodes))
        assert (matched.inputs, matched.roots, matched.leaves) == (built.inputs, built.roots,
                                                                    built.leaves)
        assert matched.structure_key() == built.structure_key()
        other = _same_code_graph(9, seed + 1000)
        if Graph.build(other).inputs != built.inputs:
            assert recorded.match(other, leaf_keys=False) is None


def test_a_new_shape_of_the_last_wiring_skips_graph_build(monkeypatch):
    """The realize path finds a new shape's graph from the last plan's wiring (no
    Graph.build), and the results are right."""
    from fuel.graph import graph as graph_module
    from fuel.runtime import executor

    fuel.set_plan_cache_capacity(128)
    builds = []
    original = graph_module.Graph.build.__func__

    def counted(cls, roots):
        builds.append(len(roots))
        return original(cls, roots)

    def program(x):
        for _ in range(20):
            x = (x * 1.5 - 0.25).exp() * 0.125
        return x

    program(fuel.from_numpy(np.ones(5, np.float32))).realize()
    monkeypatch.setattr(executor.Graph, "build", classmethod(counted))
    for size in (6, 7, 11):
        data = np.linspace(-1, 1, size).astype(np.float32)
        got = program(fuel.from_numpy(data)).numpy()
        want = data
        for _ in range(20):
            want = np.exp(want * np.float32(1.5) - np.float32(0.25)) * np.float32(0.125)
        np.testing.assert_allclose(got, want, rtol=1e-5)
    assert builds == []


def test_match_without_leaf_keys_refuses_other_wirings():
    """A generator recorded where the new graph has an op with inputs, and one node where the
    recorded graph had two of equal wiring: neither is the new graph's numbering."""
    recorded = Graph.build([fuel.full((3,), 0.0)._node]).wiring()
    x = fuel.from_numpy(np.ones(3, np.float32))
    assert recorded.match([(x * 2.0)._node], leaf_keys=False) is None
    two = Graph.build([((x * 2.0) + (x * 2.0))._node]).wiring()
    doubled = x * 2.0
    shared = (doubled + doubled)._node
    assert two.match([shared], leaf_keys=False) is None
    assert len(Graph.build([shared]).nodes) == 4  # x, the constant, the product, the sum
