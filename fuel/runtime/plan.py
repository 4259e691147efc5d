"""Plan: everything a realize decides before running anything, cached for identical graphs.

A plan follows the graph's resolution (``fuel.runtime.resolve``: each node's kernel,
decomposition or fused group, decided once), maps every node to a buffer slot and a Layout,
compiles each kernel once (CompiledNode), inserts auto-contiguize steps, marks the wait-set
and schedules every free. Executing it needs only the leaves' storages, so a structurally
identical graph replays it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace

from fuel.backends import get_backend
from fuel.backends.base import Backend
from fuel.compiler.fusion import FusionGroup, group_reads, lower_group
from fuel.compiler.kernel_ir import collapse, row_schedule, stride_pattern
from fuel.dispatch.compiled import CompiledNode, compile_entry, compile_generated, compile_node
from fuel.dispatch.kernel import KernelBindingTable
from fuel.graph import Graph
from fuel.ir.errors import FuelError
from fuel.ir.layout import Layout, contiguous_strides
from fuel.ir.ops import INPLACE_OPS, OpKind
from fuel.ir.params import NO_PARAMS, bits_key
from fuel.memory.pool import pool_for
from fuel.runtime.decompose import translate_steps
from fuel.runtime.judge import judged, judged_generated
from fuel.runtime.resolve import (
    FUSED,
    KERNEL,
    MISSING,
    VIEW,
    Decision,
    Resolution,
    kernel_decision,
    resolve,
)


@dataclass(slots=True)
class Step:
    """One kernel launch: read ``sources`` slots, write slot ``target``, then free ``frees``."""

    node_id: int
    compiled: CompiledNode
    sources: tuple[int, ...]
    layouts: list[Layout]
    target: int
    device: object
    backend: Backend
    pool: object
    dtype: object
    size: int
    alias: bool = False  # write into the first source's storage (in-place assignment)
    waited: bool = False  # a later step waits this launch individually (the wait-set)
    wait_slot: int = -1  # >= 0: first wait the pending work on this slot (cross-device copy)
    frees: tuple[int, ...] = ()


@dataclass(slots=True)
class Plan:
    """Steps (and bare free tuples) in launch order, plus what binds leaves and roots."""

    node_values: list
    steps: list = field(default_factory=list)
    devices: set = field(default_factory=set)
    # The plan bound for replays (fuel.runtime.replay.BoundPlan) once a cache hit made it;
    # False when it is not worth binding.
    replay: object = None
    wiring: object = None  # the planned graph's fuel.graph.graph.Wiring, once cached



def node_label(graph: Graph, node_id: int) -> str:
    """``node 7 (add float32,float32 -> float32 on cpu) created at model.py:12``."""
    node = graph.nodes[node_id]
    dtypes = ",".join(i.dtype.name for i in node.inputs)
    file, line = node.site
    return (f"node {node_id} ({node.op.value} {dtypes} -> {node.dtype.name} on {node.device}) "
            f"created at {file}:{line}")


_compiled_cache: dict = {}
_compiled_table: list = [None]


def _compiled_memo(table: KernelBindingTable) -> dict:
    """The compile memo of ``table`` (emptied when the published table changes). Every key
    starts with the recorded Binding the compile used: ``(binding, params)`` for a node's own
    kernel; for a fused group ``_lowering_signature`` (before lowering) and
    ``(binding, dtypes, LoopKernel)`` (after)."""
    if _compiled_table[0] is not table:
        _compiled_cache.clear()
        _compiled_table[0] = table
    elif len(_compiled_cache) > 16384:
        _compiled_cache.clear()
    return _compiled_cache


def compile_graph_node(graph: Graph, node_id: int, table: KernelBindingTable) -> CompiledNode:
    """The CompiledNode of one graph node's own kernel, bound as the resolution pass binds it."""
    return _compile_kernel(graph, node_id, kernel_decision(graph.nodes[node_id], table), table)


def _compile_kernel(graph: Graph, node_id: int, decision: Decision,
                    table: KernelBindingTable) -> CompiledNode:
    """The node's kernel from its decision's binding (memoized per binding and params); a
    miss names the node and the user's line."""
    binding = decision.binding
    node = graph.nodes[node_id]
    memo = _compiled_memo(table)
    key = (binding, node.params)
    try:
        compiled = memo.get(key)
    except TypeError:  # unhashable params
        key, compiled = None, None
    if compiled is not None:
        return compiled
    if binding.entry is None:
        error = table.miss_error(binding.op, binding.dtypes, binding.backend)
        raise type(error)(f"{error} [{node_label(graph, node_id)}]") from None
    compiled = compile_entry(binding.entry, binding.op, binding.dtypes, binding.backend,
                             node.params)
    contest = judged(binding.op, binding.dtypes, binding.backend, binding.siblings)
    if contest is not None:  # candidates compete: the judge picks per shape bucket at bind
        compiled = replace(compiled, kernel=contest)
    if key is not None:
        memo[key] = compiled
    return compiled


def _lowering_signature(graph: Graph, group: FusionGroup, outside: list[int],
                        wiring: tuple[int, ...], values: list, binding) -> tuple:
    """What a group's compiled kernel depends on, without lowering it: its recorded binding
    (the backend's generator), its members' structural keys (``Node.key``: op, params, dtype,
    shape, inputs' keys; the trust the plan cache places in them), its wiring, its outside
    inputs' dtypes and planned layouts and the loop space."""
    nodes = graph.nodes
    return (binding, tuple([nodes[m].key for m in group.members]), wiring,
            tuple([nodes[s].dtype for s in outside]), tuple([values[s][1] for s in outside]),
            group.shape, group.reduced)


def _generic_signature(graph: Graph, group: FusionGroup, outside: list[int],
                       wiring: tuple[int, ...], values: list, binding) -> tuple | None:
    """A group keyed without its sizes (dynamic shapes): its binding, each member's op,
    dtype and size-free params, its wiring, its outside inputs' dtypes and the collapsed
    loop's depth and innermost stride patterns (a row kernel: its row schedule's outer and row
    depths and row patterns; what the rendered source depends on); with the loop shape and
    each load's strides. None when a member's params are not
    hashable."""
    nodes = graph.nodes
    shape = group.shape or nodes[group.anchor].shape
    members = [nodes[m] for m in group.members]
    # Ops and dtypes as two flat tuples; params only where a member has some (most have
    # NO_PARAMS), an EXPAND's (its target shape) never, a FULL's value by its bits.
    special = []
    for position, node in enumerate(members):
        params = node.params
        if params is NO_PARAMS:
            continue
        op = node.op
        if op is OpKind.EXPAND:
            continue
        if op is OpKind.FULL:  # keyed by its bits: -0.0 and 0.0 render differently
            params = (bits_key(params.value), params.dtype)
        special.append((position, params))
    signature = (tuple([node.op for node in members]), tuple([node.dtype for node in members]),
                 tuple(special))
    loads = [values[s][1].broadcast_to(shape).strides for s in outside]
    if group.reduced:  # a row kernel's source follows its row schedule's depths and patterns
        schedule = row_schedule(shape, 1, loads)
        loop: tuple = ("rows", len(schedule.outer_sizes), len(schedule.row_sizes),
                       tuple(schedule.patterns))
    else:
        sizes, strides = collapse(shape, loads + [contiguous_strides(shape)])
        loop = (len(sizes), tuple([stride_pattern(s[-1:]) for s in strides[:-1]]))
    key = ("generic", binding, signature, wiring,
           tuple([nodes[s].dtype for s in outside]), loop)
    try:
        hash(key)
    except TypeError:
        return None
    return key, shape, loads


def _reshaped(template: CompiledNode, shape: tuple[int, ...], loads: list) -> CompiledNode | None:
    """``template``'s generated kernel serving ``shape`` (None where its kernel cannot)."""
    for_shape = getattr(template.kernel, "for_shape", None)
    kernel = for_shape(shape, loads) if for_shape is not None else None
    if kernel is None:
        return None
    return replace(template, kernel=kernel, op_params=kernel.loop)


class PlanBuilder:
    """Decides slots, layouts, kernels and frees node by node; ``steps()`` yields each Step
    (or a tuple of slots to free) as soon as it is decided, so execution can start early."""

    def __init__(self, graph: Graph, table: KernelBindingTable,
                 resolution: Resolution | None = None) -> None:
        # What runs each node (its kernel, its decomposition's primitives, its fused group),
        # decided once, here or by the caller (explain plans from the resolution it shows).
        if resolution is None:
            resolution = resolve(graph, table)
        self.resolution = resolution
        self.expansion = resolution.expansion  # None: no node decomposed
        graph = resolution.graph
        self.graph = graph
        self.table = table
        self.plan = Plan([None] * len(graph.nodes))
        self.slot_device: list = []
        self.slot_dtype: list = []
        self.slot_last: list[int] = []
        self.by_last: dict[int, list[int]] = {}
        self.keep: set[int] = set()
        self.root_ids = set(graph.roots)
        self.waited = resolution.waited
        self.contiguous: dict = {}
        self.backends: dict[object, Backend] = {}
        self.groups = resolution.groups  # member node id -> its fused group

    def _backend(self, device):
        backend = self.backends.get(device)
        if backend is None:
            backend = self.backends[device] = get_backend(device)
        return backend

    def _slot(self, device, dtype) -> int:
        self.slot_device.append(device)
        self.slot_dtype.append(dtype)
        self.slot_last.append(-1)
        return len(self.slot_last) - 1

    def _use(self, slot: int, until: int) -> None:
        if until > self.slot_last[slot]:
            self.slot_last[slot] = until
            self.by_last.setdefault(until, []).append(slot)

    def steps(self) -> Iterator:
        if self.expansion is None:
            return self._steps()
        return translate_steps(self.expansion, self._steps(), self.plan)

    def expanded_steps(self) -> Iterator:
        """The steps with the expanded graph's node ids (``steps()`` relabels them with the
        user's); explain() maps them to its own labels."""
        return self._steps()

    def _steps(self) -> Iterator:
        graph = self.graph
        values = self.plan.node_values
        for node_id in graph.leaves:  # leaves take slots 0..L-1, bound before anything runs
            node = graph.nodes[node_id]
            slot = self._slot(node.device, node.dtype)
            self.keep.add(slot)
            values[node_id] = (slot, node.layout)
        last_use = graph.last_use
        decisions = self.resolution.decisions
        by_last, slot_last, keep = self.by_last, self.slot_last, self.keep
        inputs, root_ids, use = graph.inputs, self.root_ids, self._use
        for node_id, node in enumerate(graph.nodes):
            decision = decisions[node_id]
            kind = decision.kind
            if kind is FUSED:
                anchor = decision.group.members[-1]
                if node_id == anchor:
                    launches = [self._fused(node, decision)]
                else:
                    # A member but the anchor: it launches nothing and has no slot; what it
                    # reads from outside the group stays live until the group's launch.
                    for source in inputs[node_id]:
                        value = values[source]
                        if value is not None and anchor > slot_last[value[0]]:
                            use(value[0], anchor)
                    launches = None
            elif kind is KERNEL or kind is MISSING:
                launches = self._kernel(node_id, node, decision)
            elif kind is VIEW:
                launches = self._view(node_id, node)
            else:  # a leaf, or a node realized before
                launches = []
            if launches is not None:
                slot = values[node_id][0]
                if node_id in root_ids:
                    keep.add(slot)
                use(slot, last_use[node_id])
            ending = by_last.pop(node_id, None)
            frees = tuple([s for s in ending if slot_last[s] == node_id and s not in keep]
                          ) if ending else ()
            if launches:
                launches[-1].frees = frees
                yield from launches
            elif frees:
                yield frees

    def _fused(self, node, decision: Decision) -> Step:
        """One launch of the group's generated kernel, materializing only its anchor."""
        graph = self.graph
        values = self.plan.node_values
        group = decision.group
        memo = _compiled_memo(self.table)
        outside, wiring = group_reads(graph, group)
        signature = _lowering_signature(graph, group, outside, wiring, values, decision.binding)
        compiled = memo.get(signature)
        sources = outside
        if compiled is None:  # else a group lowered before: no lowering, no LoopKernel to hash
            generic = _generic_signature(graph, group, outside, wiring, values,
                                         decision.binding)
            template = memo.get(generic[0]) if generic is not None else None
            if template is not None:  # the same group at another shape: its kernel serves
                compiled = _reshaped(template, *generic[1:])
            if compiled is None:
                compiled, sources = self._lower_and_compile(node, decision)
                if generic is not None and sources == outside:
                    memo[generic[0]] = compiled
            if sources == outside:  # the loads in group_reads' order, as lower_group makes them
                memo[signature] = compiled
        for source in sources:
            self._use(values[source][0], group.anchor)
        device = node.device
        self.plan.devices.add(device)
        out_layout = Layout.contiguous(node.shape)
        target = self._slot(device, node.dtype)
        values[group.anchor] = (target, out_layout)
        return Step(group.members[0], compiled, tuple(values[s][0] for s in sources),
                    [values[s][1] for s in sources] + [out_layout], target, device,
                    self._backend(device), pool_for(device), node.dtype, out_layout.numel,
                    waited=group.anchor in self.waited)

    def _lower_and_compile(self, node, decision: Decision) -> tuple[CompiledNode, list[int]]:
        """The group's LoopKernel compiled by its backend's generator (the group's binding;
        memoized per kernel), and the node ids it loads."""
        graph = self.graph
        group, binding = decision.group, decision.binding
        kernel, sources = lower_group(graph, group, self.plan.node_values)
        dtypes = tuple(graph.nodes[s].dtype for s in sources) + (node.dtype,)
        memo = _compiled_memo(self.table)
        key = (binding, dtypes, kernel)
        compiled = memo.get(key)
        if compiled is None:
            try:
                compiled = compile_generated(binding.entry, dtypes, binding.backend, kernel)
            except FuelError as error:
                raise type(error)(f"{error} [{node_label(graph, group.members[0])}]") from None
            contest = judged_generated(compiled.entry, dtypes, binding.backend)
            if contest is not None:  # its variants compete per shape bucket at bind
                compiled = replace(compiled, kernel=contest)
            memo[key] = compiled
        return compiled, sources

    def _contiguous_kernel(self, dtype, device) -> CompiledNode:
        compiled = self.contiguous.get((dtype, device.backend))
        if compiled is None:
            compiled = compile_node(OpKind.CONTIGUOUS, (dtype, dtype), device.backend, None,
                                    self.table)
            self.contiguous[(dtype, device.backend)] = compiled
        return compiled

    def _contiguize(self, node_id: int, slot: int, layout: Layout) -> tuple[Step, int]:
        device, dtype = self.slot_device[slot], self.slot_dtype[slot]
        target = self._slot(device, dtype)
        backend = self._backend(device)
        step = Step(node_id, self._contiguous_kernel(dtype, device), (slot,),
                    [layout, Layout.contiguous(layout.shape)], target, device, backend,
                    pool_for(device), dtype, layout.numel, waited=node_id in self.waited)
        return step, target

    def _view(self, node_id: int, node) -> list[Step]:
        slot, layout = self.plan.node_values[self.graph.inputs[node_id][0]]
        params = node.params
        launches = []
        if node.op is OpKind.RESHAPE:
            reshaped = layout.reshape(params.shape)
            if reshaped is None:
                contiguize, slot = self._contiguize(node_id, slot, layout)
                launches.append(contiguize)
                reshaped = Layout.contiguous(params.shape)
            layout = reshaped
        elif node.op is OpKind.PERMUTE:
            layout = layout.permute(params.dims)
        elif node.op is OpKind.EXPAND:
            layout = layout.broadcast_to(params.shape)
        else:
            layout = layout.slice(params.starts, params.stops, params.steps)
        self.plan.node_values[node_id] = (slot, layout)
        return launches

    def _kernel(self, node_id: int, node, decision: Decision) -> list[Step]:
        graph = self.graph
        compiled = _compile_kernel(graph, node_id, decision, self.table)
        sources = []
        layouts = []
        launches = []
        for source in graph.inputs[node_id]:
            slot, layout = self.plan.node_values[source]
            if not compiled.caps.strided_input and not (layout.offset == 0
                                                        and layout.is_contiguous()):
                contiguize, slot = self._contiguize(node_id, slot, layout)
                launches.append(contiguize)
                layout = contiguize.layouts[-1]
                self._use(slot, node_id)
            sources.append(slot)
            layouts.append(layout)
        device = node.device
        backend = self._backend(device)
        self.plan.devices.add(device)
        out_layout = Layout.contiguous(node.shape)
        layouts.append(out_layout)
        alias = (node.op in INPLACE_OPS and node.params.inplace
                 and layouts[0].offset == 0 and layouts[0].is_contiguous())
        target = sources[0] if alias else self._slot(device, node.dtype)
        wait_slot = -1
        if node.op is OpKind.COPY:
            wait_slot = self.plan.node_values[graph.inputs[node_id][0]][0]
        step = Step(node_id, compiled, tuple(sources), layouts, target, device, backend,
                    pool_for(device), node.dtype, out_layout.numel,
                    alias=alias, waited=node_id in self.waited, wait_slot=wait_slot)
        self.plan.node_values[node_id] = (target, out_layout)
        launches.append(step)
        return launches
