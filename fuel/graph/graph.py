"""Graph: the arena a realize builds from its roots, in topological order."""

from __future__ import annotations

from fuel.graph.node import Node, kernel_backend
from fuel.ir.device import BackendId


class Graph:
    """Nodes in topological order (NodeId = position). Realized nodes are leaves.

    ``inputs[i]`` holds the NodeIds of node i's inputs; ``last_use[i]`` is the NodeId of the
    last node that reads node i (or i itself when nothing reads it).
    """

    __slots__ = ("nodes", "inputs", "roots", "leaves", "_last_use", "_reads", "_readers",
                 "_ops")

    def __init__(self, nodes: list[Node], inputs: list[tuple[int, ...]], roots: list[int],
                 leaves: list[int] | None = None):
        self.nodes = nodes
        self.inputs = inputs
        self.roots = roots
        self.leaves = leaves if leaves is not None else [
            i for i, node in enumerate(nodes) if node.buffer is not None]
        self._last_use: list[int] | None = None
        self._reads: list[int] | None = None
        self._readers: list[list[int]] | None = None
        self._ops: set | None = None

    @property
    def ops(self) -> set:
        """The OpKinds the graph's nodes apply (a planner skips checks for absent ops)."""
        if self._ops is None:
            self._ops = {node.op for node in self.nodes}
        return self._ops

    @property
    def last_use(self) -> list[int]:
        if self._last_use is None:
            self._count_reads()
        return self._last_use

    @property
    def reads(self) -> list[int]:
        """For each node, how many times later nodes read it."""
        if self._reads is None:
            self._count_reads()
        return self._reads

    def _count_reads(self) -> None:
        last = list(range(len(self.inputs)))
        reads = [0] * len(self.inputs)
        for node_id, sources in enumerate(self.inputs):
            for source in sources:
                last[source] = node_id
                reads[source] += 1
        self._last_use, self._reads = last, reads

    def structure_key(self) -> tuple:
        """The roots' incremental keys plus what identifies the leaves: equal for graphs that
        differ only in leaf data (the node count catches keys made stale by a later realize;
        the input wiring tells apart graphs that share a node in different places)."""
        return (tuple(self.nodes[r].key for r in self.roots), len(self.nodes),
                tuple(self.nodes[i].key for i in self.leaves), tuple(self.inputs))

    def wiring(self) -> Wiring:
        """What a later graph must share with this one to run its plan (see Wiring)."""
        return Wiring(self)

    @classmethod
    def build(cls, roots: list[Node]) -> Graph:
        """Topological order over everything the roots need that is not realized yet: a
        depth-first post-order, inputs in order (a node stays on the stack until its inputs
        are numbered; nodes key the index by identity, Node defines no ``__eq__``)."""
        index: dict[Node, int] = {}
        nodes: list[Node] = []
        inputs: list[tuple[int, ...]] = []
        leaves: list[int] = []
        for root in roots:
            if root in index:
                continue
            stack = [root]
            while stack:
                node = stack[-1]
                if node in index:
                    stack.pop()
                    continue
                if node.buffer is not None:
                    stack.pop()
                    index[node] = len(nodes)
                    leaves.append(len(nodes))
                    nodes.append(node)
                    inputs.append(())
                    continue
                sources = node.inputs
                if len(sources) == 2:  # the common case, without a list per node
                    first, second = sources
                    first_id = index.get(first)
                    second_id = index.get(second)
                    if first_id is not None and second_id is not None:
                        stack.pop()
                        index[node] = len(nodes)
                        nodes.append(node)
                        inputs.append((first_id, second_id))
                        continue
                    if second_id is None:
                        stack.append(second)
                    if first_id is None:
                        stack.append(first)
                    continue
                missing = [source for source in sources if source not in index]
                if missing:
                    missing.reverse()
                    stack.extend(missing)
                    continue
                stack.pop()
                index[node] = len(nodes)
                nodes.append(node)
                inputs.append(tuple([index[source] for source in sources]))
        return cls(nodes, inputs, [index[root] for root in roots], leaves)

    def __len__(self) -> int:
        return len(self.nodes)

    def node(self, node_id: int) -> Node:
        return self.nodes[node_id]

    def target_backend(self, node_id: int) -> BackendId:
        """The backend whose kernel runs the node: its device's, except that a COPY runs at its
        source (the source backend reads its own memory and writes the destination's)."""
        sources = self.inputs[node_id]
        return kernel_backend(self.nodes[node_id], self.nodes[sources[0]] if sources else None)

    def consumers(self) -> list[list[int]]:
        """For each node, the NodeIds that read it, in increasing order (computed once: do
        not modify)."""
        if self._readers is None:
            readers: list[list[int]] = [[] for _ in self.nodes]
            for node_id, sources in enumerate(self.inputs):
                for source in sources:
                    readers[source].append(node_id)
            self._readers = readers
        return self._readers


class Wiring:
    """A graph's shape without its nodes: each node's input ids, the roots and the leaves
    (with their keys). ``match`` finds the graph behind other roots in one pass over the
    recorded ids, checking every edge by identity, instead of a search (Graph.build): a
    plan cache hit then costs no per-node search."""

    __slots__ = ("inputs", "roots", "leaves", "leaf_keys", "is_leaf")

    def __init__(self, graph: Graph) -> None:
        self.inputs = graph.inputs
        self.roots = graph.roots
        self.leaves = graph.leaves
        self.leaf_keys = tuple([graph.nodes[i].key for i in graph.leaves])
        self.is_leaf = [False] * len(graph.nodes)
        for leaf in graph.leaves:
            self.is_leaf[leaf] = True

    def match(self, roots: list[Node], leaf_keys: bool = True) -> Graph | None:
        """The graph behind ``roots`` numbered as the recorded one, or None when it differs:
        a node's inputs are not the recorded ones, a recorded leaf is not realized or an
        inner node is (a key made stale by a later realize), or (with ``leaf_keys``) a
        leaf's key differs. Without ``leaf_keys`` it checks the wiring alone (and that no node
        sits at two ids): a graph of the same wiring at other shapes, dtypes or ops, numbered
        as ``Graph.build`` numbers it."""
        inputs = self.inputs
        count = len(inputs)
        nodes: list = [None] * count
        if len(roots) != len(self.roots):
            return None
        for root_id, root in zip(self.roots, roots):
            known = nodes[root_id]
            if known is None:
                nodes[root_id] = root
            elif known is not root:
                return None
        is_leaf = self.is_leaf
        for node_id in range(count - 1, -1, -1):
            node = nodes[node_id]
            if node is None:
                return None
            sources = inputs[node_id]
            if not sources:  # a leaf, or a generator (FULL, ARANGE): unrealized, no inputs
                if (node.buffer is None) is is_leaf[node_id] or node.inputs:
                    return None
                continue
            if node.buffer is not None:
                return None
            actual = node.inputs
            if len(sources) == 2:  # the common case, without a zip per node
                if len(actual) != 2:
                    return None
                first, second = sources
                known = nodes[first]
                if known is None:
                    nodes[first] = actual[0]
                elif known is not actual[0]:
                    return None
                known = nodes[second]
                if known is None:
                    nodes[second] = actual[1]
                elif known is not actual[1]:
                    return None
                continue
            if len(actual) != len(sources):
                return None
            for source, given in zip(sources, actual):
                known = nodes[source]
                if known is None:
                    nodes[source] = given
                elif known is not given:
                    return None
        if leaf_keys:
            if tuple([nodes[i].key for i in self.leaves]) != self.leaf_keys:
                return None
        elif len(set(nodes)) != len(nodes):  # one node at two ids: Graph.build numbers it once
            return None
        return Graph(nodes, inputs, self.roots, self.leaves)

