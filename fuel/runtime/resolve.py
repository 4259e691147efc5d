"""Resolution: what runs each node of a graph, and why, decided once per plan.

``resolve(graph, table)`` is the one place that decides, per node: its own kernel (with the
binding the table gives it), decomposed (the user's node; its primitives are nodes of the
planned graph), a member of fused group G, a view, a leaf, or missing. It records each
decision with its reason (``Resolution``); the planner (``PlanBuilder``) plans from the record
and ``explain()`` prints it, so what explain says is what runs.

What it knows of a backend comes from the published binding table alone: its kernels, and
the ``BackendRecord`` its ``register`` declared there (its fusion target, with the composites
it prefers decomposed and fused, and the decomposition table it selects). The table is
versioned, so a plan cached under one publication is never reused under another.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from fuel.compiler.fusion import (
    FusionGroup,
    FusionTarget,
    fusion_enabled,
    fusion_groups,
    prefers_fused_decomposition,
)
from fuel.dispatch.kernel import BindingEntry, KernelBindingTable, KernelDTypes
from fuel.graph import Graph, Node
from fuel.graph.decompositions import DECOMPOSITIONS, Expansion, expand_graph
from fuel.graph.node import kernel_backend
from fuel.ir.device import BackendId
from fuel.ir.ops import VIEW_OPS, OpKind, lookup_dtypes

# What a Decision says runs the node.
KERNEL = "kernel"  # its own kernel: ``binding``
DECOMPOSED = "decomposed"  # a user node replaced by primitives (each with its own decision)
FUSED = "fused"  # a member of ``group``, which launches once, at its anchor
VIEW = "view"  # no kernel: a new layout over its input's buffer
LEAF = "leaf"  # data the realize is given
REALIZED = "realized"  # a node realized before: its buffer is a leaf
MISSING = "missing"  # no kernel, no decomposition: NoBackendForOp when planned

REGISTERED_KERNEL = "registered kernel"
SINGLE_NODE = "single node keeps hand-written kernel"
PREFERS_FUSED = "backend prefers fused decomposition"
NO_KERNEL = "no kernel and no decomposition (NoBackendForOp at realize)"


@dataclass(frozen=True, slots=True, eq=False)
class Binding:
    """The kernel a node's (op, dtypes, backend) resolves to: ``entry``, chosen among
    ``siblings`` (every entry registered at the key, in registration order). Today the choice
    is the first sibling without ``requires_broadcast``; a judge choosing among siblings
    replaces that choice here and says why in the Decision's reason. For a fused group the
    binding is the backend's kernel generator at ``(FUSED, (), backend)``."""

    op: OpKind
    dtypes: KernelDTypes
    backend: BackendId
    entry: BindingEntry | None
    siblings: tuple[BindingEntry, ...] = ()


@dataclass(frozen=True, slots=True, eq=False)
class Decision:
    """What runs one node (``kind``) and why (``reason``); ``binding`` for KERNEL, MISSING and
    FUSED; ``group``, its number ``index`` in the plan and its anchor's explain label for
    FUSED. Shared between nodes that decide alike (one object per binding, per group)."""

    kind: str
    reason: str
    binding: Binding | None = None
    group: FusionGroup | None = None
    index: int = -1
    anchor: str = ""


_VIEW = Decision(VIEW, "a new layout over its input's buffer")
_LEAF = Decision(LEAF, "data given to the realize")
_REALIZED = Decision(REALIZED, "realized before: its buffer is read as a leaf")


class Resolution:
    """The record of one resolution pass. ``graph``: the planned graph (the user's, or its
    expansion's); ``decisions[i]``: planned node i's Decision; ``groups``: each fused member
    -> its group; ``waited``: nodes a cross-device copy waits individually; ``decomposed``:
    each decomposed user node -> its DECOMPOSED Decision."""

    __slots__ = ("graph", "expansion", "decisions", "groups", "waited", "decomposed")

    def __init__(self, graph: Graph, expansion: Expansion | None, decisions: list[Decision],
                 groups: dict[int, FusionGroup], waited: set[int],
                 decomposed: dict[int, Decision]) -> None:
        self.graph = graph
        self.expansion = expansion
        self.decisions = decisions
        self.groups = groups
        self.waited = waited
        self.decomposed = decomposed

    def user_decision(self, user_id: int) -> Decision:
        """The decision for node ``user_id`` of the user's graph."""
        found = self.decomposed.get(user_id)
        if found is not None:
            return found
        expansion = self.expansion
        return self.decisions[user_id if expansion is None else expansion.position[user_id]]


class _Memo:
    """What resolving against one published table learns, kept while it is the published
    one: each key's Binding, which (target, op, dtypes) render, each backend's generator."""

    def __init__(self, table: KernelBindingTable) -> None:
        self.table = table
        self.kernels: dict[tuple, Decision] = {}  # (op, backend, dtype, *inputs) -> decision
        self.alone: dict[Binding, Decision] = {}  # a binding's SINGLE_NODE decision
        self.rendered: dict = {}  # fusion_groups' memo
        self.generators: dict[BackendId, Binding | None] = {}
        # Decomposition recipes (fuel.graph.decompositions.expand.Recipe) per fusion on/off:
        # has_kernel answers differently when the fusing backends prefer decomposed rows.
        self.recipes: dict[bool, dict] = {}
        records = table.backend_records().values()
        # Every target's prefers_decomposed: a node of another op is never asked about them.
        self.preferring = frozenset().union(
            *[r.fusion.prefers_decomposed for r in records if r.fusion is not None])
        # Every op some backend's decomposition table holds (None: only the core table's).
        own = [r.decompositions for r in records if r.decompositions is not None]
        self.decomposable = set(DECOMPOSITIONS).union(*own) if own else None


_memo: list[_Memo | None] = [None]


def _memo_for(table: KernelBindingTable) -> _Memo:
    memo = _memo[0]
    if memo is None or memo.table is not table or len(memo.kernels) > 16384:
        memo = _memo[0] = _Memo(table)
    return memo


def _kernel_decision(memo: _Memo, node: Node) -> Decision:
    """KERNEL with the node's binding, or MISSING (memoized per op, backend and dtypes)."""
    op = node.op
    inputs = node.inputs
    if op is OpKind.COPY:  # it runs at its source: the key names both ends
        backend = kernel_backend(node)
        key = (op, backend, node.dtype, inputs[0].dtype, node.device.backend)
    elif len(inputs) == 2:
        backend = node.device.backend
        key = (op, backend, node.dtype, inputs[0].dtype, inputs[1].dtype)
    else:
        backend = node.device.backend
        key = (op, backend, node.dtype, *[i.dtype for i in inputs])
    found = memo.kernels.get(key)
    if found is None:
        dtypes = lookup_dtypes(op, tuple([i.dtype for i in inputs]), node.dtype)
        siblings = memo.table.lookup_alternatives(op, dtypes, backend)
        entry = next((e for e in siblings if not e.caps.requires_broadcast), None)
        binding = Binding(op, dtypes, backend, entry, siblings)
        if entry is None:
            found = Decision(MISSING, NO_KERNEL, binding)
        elif op is OpKind.COPY and backend is not node.device.backend:
            found = Decision(KERNEL, f"cross-device copy: kernel at its source ({backend.value})",
                             binding)
        else:
            found = Decision(KERNEL, REGISTERED_KERNEL, binding)
        memo.kernels[key] = found
    return found


def kernel_decision(node: Node, table: KernelBindingTable) -> Decision:
    """The node's own kernel as resolution binds it in ``table``: KERNEL with its Binding,
    or MISSING (the Binding's entry None)."""
    return _kernel_decision(_memo_for(table), node)


class _Pass:
    """One resolution: per backend, whether it fuses now (asked once per pass)."""

    def __init__(self, memo: _Memo) -> None:
        self.memo = memo
        self.fusing = fusion_enabled()
        self.targets: dict[BackendId, tuple[FusionTarget, bool] | None] = {}

    def target_of(self, backend: BackendId) -> tuple[FusionTarget, bool] | None:
        """(target, math pays) while ``backend`` fuses now, else None."""
        try:
            return self.targets[backend]
        except KeyError:
            pass
        found = None
        target = self.memo.table.backend_record(backend).fusion
        if (self.fusing and target is not None and target.unavailable_reason() is None
                and self._generator(backend).entry is not None):
            found = (target, target.math_pays())
        self.targets[backend] = found
        return found

    def _generator(self, backend: BackendId) -> Binding:
        memo = self.memo
        found = memo.generators.get(backend)
        if found is None:
            siblings = memo.table.lookup_alternatives(OpKind.FUSED, (), backend)
            found = memo.generators[backend] = Binding(
                OpKind.FUSED, (), backend, siblings[0] if siblings else None, siblings)
        return found

    def prefers_decomposed(self, node: Node) -> bool:
        """Whether the node's backend renders it better decomposed and fused, now."""
        if node.op not in self.memo.preferring:
            return False
        found = self.target_of(kernel_backend(node))
        return found is not None and found[1] and prefers_fused_decomposition(node, found[0])

    def has_kernel(self, node: Node) -> bool:
        if self.prefers_decomposed(node):
            return False
        return _kernel_decision(self.memo, node).kind is KERNEL

    def table_of(self, node: Node) -> Mapping:
        tables = self.memo.table.backend_record(kernel_backend(node)).decompositions
        return DECOMPOSITIONS if tables is None else tables


def wait_set(graph: Graph) -> set[int]:
    """Nodes whose launches a cross-device copy waits: each copy's source, through views."""
    waited: set[int] = set()
    if OpKind.COPY not in graph.ops:
        return waited
    for node_id, node in enumerate(graph.nodes):
        if node.op is OpKind.COPY and node.buffer is None:
            source = graph.inputs[node_id][0]
            while True:
                waited.add(source)
                if graph.nodes[source].op not in VIEW_OPS or graph.nodes[source].buffer:
                    break
                source = graph.inputs[source][0]
    return waited


def resolve(graph: Graph, table: KernelBindingTable, strict: bool = True) -> Resolution:
    """Decide every node of ``graph`` against ``table``: decompositions first (a node without
    a kernel, or one its backend prefers decomposed, is expanded through its backend's
    table), then fusion groups over the planned graph, then each remaining node's kernel.
    ``strict``: raise NoBackendForOp for a primitive a decomposition needs and no kernel
    provides (else it stays, decided MISSING)."""
    memo = _memo_for(table)
    resolving = _Pass(memo)

    def describe_miss(node: Node) -> str:
        dtypes = lookup_dtypes(node.op, tuple(i.dtype for i in node.inputs), node.dtype)
        return str(table.miss_error(node.op, dtypes, kernel_backend(node)))

    recipes = memo.recipes.setdefault(resolving.fusing, {})
    expansion = expand_graph(graph, resolving.has_kernel, strict, describe_miss,
                             resolving.table_of, memo.decomposable, recipes)
    planned = graph if expansion is None else expansion.graph
    waited = wait_set(planned)
    alone: list[int] = []
    groups = (fusion_groups(planned, waited, resolving.target_of, memo.rendered, alone)
              if resolving.fusing else {})
    decisions = _decide(planned, expansion, groups, set(alone), resolving)
    decomposed = {}
    if expansion is not None:
        for user_id in expansion.decomposed:
            node = graph.nodes[user_id]
            if resolving.prefers_decomposed(node):
                reason = PREFERS_FUSED
            else:
                binding = kernel_decision(node, table).binding
                names = [d.name for d in binding.dtypes]
                reason = (f"no kernel for {node.op.value}({', '.join(names[:-1])} -> "
                          f"{names[-1]}) on {binding.backend.value} -> decomposed")
            decomposed[user_id] = Decision(DECOMPOSED, reason)
    return Resolution(planned, expansion, decisions, groups, waited, decomposed)


def _decide(graph: Graph, expansion: Expansion | None, groups: dict[int, FusionGroup],
            alone: set[int], resolving: _Pass) -> list[Decision]:
    memo = resolving.memo
    decisions: list[Decision] = [_LEAF] * len(graph.nodes)
    by_group: dict[int, Decision] = {}  # anchor -> the group's decision
    view_ops, load = VIEW_OPS, OpKind.LOAD
    for node_id, node in enumerate(graph.nodes):
        group = groups.get(node_id) if groups else None
        if group is not None:
            decision = by_group.get(group.members[-1])
            if decision is None:
                anchor = group.members[-1]
                label = expanded_label(expansion, anchor)
                decision = by_group[anchor] = Decision(
                    FUSED, f"fused into group {len(by_group)} (anchor node {label})",
                    resolving._generator(graph.target_backend(anchor)), group, len(by_group),
                    label)
        elif node.buffer is not None:
            decision = _REALIZED if node.op is not load else _LEAF
        elif node.op in view_ops:
            decision = _VIEW
        else:
            decision = _kernel_decision(memo, node)
            if node_id in alone and decision.kind is KERNEL:
                binding = decision.binding
                single = memo.alone.get(binding)
                if single is None:
                    single = memo.alone[binding] = Decision(KERNEL, SINGLE_NODE, binding)
                decision = single
        decisions[node_id] = decision
    return decisions


def expanded_label(expansion: Expansion | None, expanded: int) -> str:
    """explain()'s label of a planned node: its user node's id (``"7"``), or ``"7.2"`` for
    the third primitive replacing decomposed user node 7."""
    if expansion is None:
        return str(expanded)
    user = expansion.origin[expanded]
    parts = expansion.decomposed.get(user)
    return str(user) if parts is None else f"{user}.{expanded - parts[0]}"


def fusion_unavailable_reason(backend: BackendId, table: KernelBindingTable | None = None
                              ) -> str | None:
    """Why ``backend``'s nodes do not fuse (None when they do, fusion switched on or not),
    from its published record."""
    target = _published(backend, table).backend_record(backend).fusion
    if target is None:
        return f"no kernel renderer for {backend.value} yet"
    return target.unavailable_reason()


def fuses_math(backend: BackendId, table: KernelBindingTable | None = None) -> bool:
    """Whether plans for ``backend`` fuse now, math functions included."""
    found = _Pass(_memo_for(_published(backend, table))).target_of(backend)
    return found is not None and found[1]


def _published(backend: BackendId, table: KernelBindingTable | None) -> KernelBindingTable:
    """``table``, or the global one with ``backend`` loaded (a built-in registers on first
    use, publishing its record)."""
    if table is not None:
        return table
    from fuel.backends import find_backend
    from fuel.dispatch.kernel import global_table

    find_backend(backend)
    return global_table()
