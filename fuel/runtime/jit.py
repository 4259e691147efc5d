"""Capture: the bound plan behind fuel.jit and the ONNX replays. A traced call's graph is
planned once and bound (fuel.runtime.replay.BoundPlan); each run binds new argument storages
and launches it again.

Like a CUDA graph: the capture's intermediates live in buffers of its own, allocated once and
reused by liveness, and its outputs get fresh storages every run. The arguments are leaves
that change between runs; tensors the function reads from its closure (weights, a KV cache
written in place) are leaves that stay bound as captured. The Tensor-facing wrapper is
fuel.jit.
"""

from __future__ import annotations

from collections.abc import Sequence

from fuel.dispatch.kernel import global_table, table_generation
from fuel.graph import Graph, Node
from fuel.graph.node import creation_site
from fuel.ir.errors import InvalidArgument
from fuel.ir.ops import OpKind
from fuel.runtime.executor import PLAN_CACHE
from fuel.runtime.plan import Plan, PlanBuilder
from fuel.runtime.replay import BoundPlan, assign_storages


def _cached_plan(graph: Graph, generation: int) -> Plan:
    """The plan of ``graph`` from the realize path's plan cache (a graph that ran eagerly
    before, e.g. the call before a capture, is planned already), else built and cached."""
    key = graph.structure_key()
    plan = PLAN_CACHE.get(key)
    if plan is None:
        builder = PlanBuilder(graph, global_table())
        plan = builder.plan
        plan.steps = list(builder.steps())
        PLAN_CACHE.put(key, plan, generation, graph)
    return plan


class Capture(BoundPlan):
    """One traced call: the plan of ``outputs`` whose leaves include ``arguments`` (None where
    an argument is not a tensor), bound with its own buffers; ``run`` launches it."""

    def __init__(self, arguments: Sequence[Node | None], outputs: Sequence[Node]) -> None:
        generation = table_generation()
        graph = Graph.build(list(outputs))
        if any(graph.nodes[r].buffer is not None for r in graph.roots) or \
                len(graph.roots) != len(outputs):
            raise InvalidArgument("fuel.jit outputs must be distinct tensors computed by the "
                                  "function (not its inputs or captured tensors)")
        plan = _cached_plan(graph, generation)
        super().__init__(graph, plan, assign_storages(graph, plan, None), held=True)
        self.generation = generation
        self.graph = graph  # the traced graph: its nodes name the steps in errors and profiles
        leaf_slots = {id(graph.nodes[i]): slot for slot, i in enumerate(graph.leaves)}
        self.argument_slots = [-1 if a is None else leaf_slots.get(id(a), -1)
                               for a in arguments]
        self.fixed_leaves = [graph.nodes[i].buffer for i in graph.leaves]
        self.current[:self.leaf_count] = self.fixed_leaves
        values = plan.node_values
        self.output_layouts = [(values[r][1], graph.nodes[r]) for r in graph.roots]

    def run(self, arguments: Sequence) -> list:
        """Launch every step with ``arguments`` (storages, None for non-tensors) bound to the
        argument slots and fresh output storages; return the outputs' storages."""
        with self.lock:
            return self.execute([(slot, storage) for slot, storage
                                 in zip(self.argument_slots, arguments) if slot >= 0],
                                self.graph)

    def output_nodes(self, storages: Sequence) -> list[Node]:
        """Realized leaf nodes over a run's output storages, in the order of the outputs."""
        leaves = []
        for storage, (layout, node) in zip(storages, self.output_layouts):
            leaf = Node(OpKind.LOAD, (), None, node.dtype, node.shape, node.device,
                        creation_site())
            leaf.attach(storage, layout)
            leaves.append(leaf)
        return leaves
