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
