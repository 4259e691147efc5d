"""Capture: the bound plan behind fuel.jit and the ONNX replays. A traced call's graph is
planned once and bound (fuel.runtime.replay.BoundPlan); each run binds new argument storages
and launches it again.

Like a CUDA graph: the capture's intermediates live in buffers of its own, allocated once and
reused by liveness, and its outputs get fresh storages every run, but the outputs it is told
are a state's new value (``inplace``), which are written into that state's storage. The
arguments are leaves that change between runs; tensors the function reads from its closure
(weights, a KV cache written in place) are leaves that stay bound as captured. The
Tensor-facing wrapper is fuel.jit.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator, Sequence

from fuel.dispatch.kernel import global_table, table_generation
from fuel.graph import Graph, Node
from fuel.graph.node import creation_site
from fuel.ir.errors import InvalidArgument
from fuel.ir.ops import OpKind
from fuel.runtime.executor import PLAN_CACHE
from fuel.runtime.plan import Plan, PlanBuilder
from fuel.runtime.replay import BoundPlan, HeldArena, assign_storages, inplace_safe


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector held off while a new shape is traced (fuel.jit) or
    built (an ONNX model's replay) and its capture planned: the thousands of short-lived
    objects a plan's making allocates would otherwise trigger collections that walk every
    object the process holds (a model's), for a few ms per new shape (a generation-2 pass,
    20 ms with MiniLM loaded). Collection resumes afterwards; nothing is lost, only
    postponed."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


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


def _inplace_slots(graph: Graph, plan: Plan, arguments: Sequence[Node | None],
                   pairs: Sequence[tuple[int, int]], leaf_slots: dict) -> dict[int, int]:
    """Root slot -> leaf storage id for each (argument, output) pair that can share a storage:
    the argument is a leaf whose storage no other leaf has and which is not constant, the
    output a root of its own."""
    if not pairs:
        return {}
    nodes = graph.nodes
    storages = [nodes[i].buffer for i in graph.leaves]
    counts: dict[int, int] = {}
    for storage in storages:
        counts[id(storage)] = counts.get(id(storage), 0) + 1
    root_counts: dict[int, int] = {}
    for root in graph.roots:
        slot = plan.node_values[root][0]
        root_counts[slot] = root_counts.get(slot, 0) + 1
    wanted: dict[int, int] = {}
    for argument, output in pairs:
        node = arguments[argument]
        leaf = leaf_slots.get(id(node), -1) if node is not None else -1
        root = graph.roots[output]
        slot, layout = plan.node_values[root]
        if leaf < 0 or counts[id(storages[leaf])] != 1 or storages[leaf].constant or \
                root_counts[slot] != 1 or \
                leaf in wanted.values() or not _dense_over(layout, storages[leaf]) or \
                not _dense_over(node.layout, storages[leaf]) or nodes[root].dtype != node.dtype:
            continue
        wanted[slot] = leaf
    return wanted


def _dense_over(layout, storage) -> bool:
    """Whether ``layout`` covers all of ``storage``, dense from offset 0."""
    return layout is not None and layout.offset == 0 and layout.is_contiguous() and \
        layout.numel == storage.size


class Capture(BoundPlan):
    """One traced call: the plan of ``outputs`` whose leaves include ``arguments`` (None where
    an argument is not a tensor), bound with its own buffers; ``run`` launches it.
    ``inplace`` ((argument index, output index) pairs: a state's value before and after the
    call) writes each such output into its argument's storage where that is safe (one step
    writes it, after every read of the old value: ``inplace_safe``), so a replayed training
    step updates its parameters and moments in place instead of allocating new ones;
    ``self.inplace`` keeps the pairs taken. ``arena``: where its intermediates live when it
    shares them with captures that never run at the same time (HeldArena)."""

    def __init__(self, arguments: Sequence[Node | None], outputs: Sequence[Node],
                 inplace: Sequence[tuple[int, int]] = (), arena: HeldArena | None = None
                 ) -> None:
        generation = table_generation()
        graph = Graph.build(list(outputs))
        if any(graph.nodes[r].buffer is not None for r in graph.roots) or \
                len(graph.roots) != len(outputs):
            raise InvalidArgument("fuel.jit outputs must be distinct tensors computed by the "
                                  "function (not its inputs or captured tensors)")
        plan = _cached_plan(graph, generation)
        leaf_slots = {id(graph.nodes[i]): slot for slot, i in enumerate(graph.leaves)}
        wanted = _inplace_slots(graph, plan, arguments, inplace, leaf_slots)
        assignment = assign_storages(graph, plan, None, wanted)
        unsafe = {root: leaf for root, leaf in wanted.items()
                  if not inplace_safe(assignment, root, leaf)}
        if unsafe:
            wanted = {root: leaf for root, leaf in wanted.items() if root not in unsafe}
            assignment = assign_storages(graph, plan, None, wanted)
        super().__init__(graph, plan, assignment, held=True, arena=arena)
        taken = set(wanted)
        self.inplace = [(a, o) for a, o in inplace
                        if plan.node_values[graph.roots[o]][0] in taken]
        self.generation = generation
        self.graph = graph  # the traced graph: its nodes name the steps in errors and profiles
        self.argument_slots = [-1 if a is None else leaf_slots.get(id(a), -1)
                               for a in arguments]
        self.fixed_leaves = [graph.nodes[i].buffer for i in graph.leaves]
        self.current[:self.leaf_count] = self.fixed_leaves
        values = plan.node_values
        self.output_layouts = [(values[r][1], graph.nodes[r]) for r in graph.roots]

    def run(self, arguments: Sequence, launch: bool = True) -> list:
        """Launch every step with ``arguments`` (storages, None for non-tensors) bound to the
        argument slots and fresh output storages (with ``reuse_outputs``, the last run's that
        its user dropped); return the outputs' storages. With ``launch`` False, only prepare
        the launchers (nothing runs; the outputs are dropped)."""
        with self.lock:
            return self.execute([(slot, storage) for slot, storage
                                 in zip(self.argument_slots, arguments) if slot >= 0],
                                self.graph, launch)

    def output_nodes(self, storages: Sequence) -> list[Node]:
        """Realized leaf nodes over a run's output storages, in the order of the outputs."""
        leaves = []
        for storage, (layout, node) in zip(storages, self.output_layouts):
            leaf = Node(OpKind.LOAD, (), None, node.dtype, node.shape, node.device,
                        creation_site())
            leaf.attach(storage, layout)
            leaves.append(leaf)
        return leaves
