"""Graph: the arena a realize builds from its roots, in topological order."""

from __future__ import annotations

from fuel.graph.node import Node
from fuel.ir.device import BackendId


class Graph:
    """Nodes in topological order (NodeId = position). Realized nodes are leaves.

    ``inputs[i]`` holds the NodeIds of node i's inputs; ``last_use[i]`` is the NodeId of the
    last node that reads node i (or i itself when nothing reads it).
    """

    __slots__ = ("nodes", "inputs", "last_use", "roots", "_index")

    def __init__(self, nodes: list[Node], inputs: list[tuple[int, ...]], roots: list[int]):
        self.nodes = nodes
        self.inputs = inputs
        self.roots = roots
        self.last_use = _last_uses(inputs)

    @classmethod
    def build(cls, roots: list[Node]) -> Graph:
        """Topological order over everything the roots need that is not realized yet."""
        index: dict[int, int] = {}
        nodes: list[Node] = []
        inputs: list[tuple[int, ...]] = []
        for root in roots:
            if id(root) in index:
                continue
            stack = [(root, False)]
            while stack:
                node, expanded = stack.pop()
                key = id(node)
                if key in index:
                    continue
                if expanded or node.buffer is not None or not node.inputs:
                    index[key] = len(nodes)
                    nodes.append(node)
                    inputs.append(tuple(index[id(i)] for i in node.inputs)
                                  if node.buffer is None else ())
                    continue
                stack.append((node, True))
                for child in reversed(node.inputs):
                    if id(child) not in index:
                        stack.append((child, False))
        return cls(nodes, inputs, [index[id(r)] for r in roots])

    def __len__(self) -> int:
        return len(self.nodes)

    def node(self, node_id: int) -> Node:
        return self.nodes[node_id]

    def target_backend(self, node_id: int) -> BackendId | None:
        """The backend a node's kernel runs on: the backend of the node's device."""
        return self.nodes[node_id].device.backend

    def consumers(self) -> list[list[int]]:
        """For each node, the NodeIds that read it."""
        readers: list[list[int]] = [[] for _ in self.nodes]
        for node_id, sources in enumerate(self.inputs):
            for source in sources:
                readers[source].append(node_id)
        return readers


def _last_uses(inputs: list[tuple[int, ...]]) -> list[int]:
    last = list(range(len(inputs)))
    for node_id, sources in enumerate(inputs):
        for source in sources:
            last[source] = node_id
    return last
