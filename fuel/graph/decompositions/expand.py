"""expand_graph: a graph whose nodes without a kernel are rewritten through their
decompositions, recursively, with the maps a plan needs to run against the user's graph."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Set
from dataclasses import dataclass, field

from fuel.graph.decompositions.builder import Builder
from fuel.graph.decompositions.registry import DECOMPOSITIONS, Decomposition
from fuel.graph.graph import Graph
from fuel.graph.node import Node
from fuel.ir.errors import FuelError, NoBackendForOp
from fuel.ir.ops import VIEW_OPS, OpKind

MAX_DEPTH = 12

HasKernel = Callable[[Node], bool]
DescribeMiss = Callable[[Node], str]
# The decomposition table a node's backend selects (DECOMPOSITIONS, the core table, by default).
TableOf = Callable[[Node], Mapping[OpKind, Decomposition]]


@dataclass
class Expansion:
    """The expanded graph; ``origin[e]`` is the user node expanded node ``e`` came from,
    ``position[u]`` the expanded node holding user node ``u``'s value, ``decomposed[u]`` the
    expanded nodes that replace a decomposed user node (in order, its value last)."""

    graph: Graph
    origin: list[int]
    position: list[int]
    decomposed: dict[int, list[int]] = field(default_factory=dict)


def needs_kernel(node: Node) -> bool:
    """Whether a realize launches a kernel for ``node`` (not a leaf, not a view)."""
    return node.buffer is None and node.op is not OpKind.LOAD and node.op not in VIEW_OPS


def expand_graph(graph: Graph, has_kernel: HasKernel, strict: bool = True,
                 describe_miss: DescribeMiss | None = None, table_of: TableOf | None = None,
                 decomposable: Set[OpKind] | None = None,
                 recipes: dict | None = None) -> Expansion | None:
    """None when every node has a kernel; otherwise the graph with each node that lacks one
    replaced by its decomposition. ``has_kernel`` decides (a kernel wins over a decomposition
    unless it says otherwise); ``table_of`` gives the decomposition table of a node's backend
    (default: the core table for every node) and ``decomposable`` every op those tables hold
    (default: the core table's). ``strict`` raises NoBackendForOp for a primitive a
    decomposition needs and no backend kernel provides (``describe_miss`` words the missing
    kernel); without it such nodes stay (explain shows them missing). ``recipes``: a memo of
    decompositions already run (``Recipe``), valid as long as ``has_kernel`` and ``table_of``
    answer the same (the caller keeps one per binding table)."""
    if table_of is None:
        table_of = _core_table
    ops = DECOMPOSITIONS.keys() if decomposable is None else decomposable
    if ops.isdisjoint(graph.ops):
        return None  # nothing could be expanded: no per-node kernel lookup
    nodes = graph.nodes
    missing = [i for i, node in enumerate(nodes) if needs_kernel(node) and not has_kernel(node)]
    if not any(nodes[i].op in table_of(nodes[i]) for i in missing):
        return None
    return _Expander(graph, has_kernel, strict, describe_miss, table_of,
                     {} if recipes is None else recipes).run()


def _core_table(node: Node) -> Mapping[OpKind, Decomposition]:
    return DECOMPOSITIONS


class _Expander:
    def __init__(self, graph: Graph, has_kernel: HasKernel, strict: bool,
                 describe_miss: DescribeMiss | None, table_of: TableOf, recipes: dict) -> None:
        self.user = graph
        self.recipes = recipes
        self.describe_miss = describe_miss
        self.has_kernel = has_kernel
        self.table_of = table_of
        self.strict = strict
        self.nodes: list[Node] = []
        self.inputs: list[tuple[int, ...]] = []
        self.origin: list[int] = []
        self.leaves: list[int] = []
        self.ids: dict[int, int] = {}
        self.keep: list[Node] = []  # holds replaced nodes so their ids stay unique

    def run(self) -> Expansion:
        position = []
        decomposed: dict[int, list[int]] = {}
        ids, place = self.ids, self._place
        for user_id, node in enumerate(self.user.nodes):
            start = len(self.nodes)
            known = ids.get(id(node))
            position.append(known if known is not None else place(node, user_id, 0, None))
            if len(self.nodes) - start > 1 or (len(self.nodes) > start
                                               and self.nodes[start] is not node):
                decomposed[user_id] = list(range(start, len(self.nodes)))
        roots = [position[r] for r in self.user.roots]
        graph = Graph(self.nodes, self.inputs, roots, self.leaves)
        return Expansion(graph, self.origin, position, decomposed)

    def _place(self, node: Node, user_id: int, depth: int, parent: Node | None) -> int:
        """The expanded id of ``node``, placing it (and what it needs) on first sight."""
        ids = self.ids
        known = ids.get(id(node))
        if known is not None:
            return known
        if node.buffer is None and node.op is not OpKind.LOAD:
            for source in node.inputs:
                if id(source) not in ids:
                    self._place(source, user_id, depth, parent)
        if needs_kernel(node) and not self.has_kernel(node):
            decomposition = self.table_of(node).get(node.op)
            if decomposition is not None:
                if depth >= MAX_DEPTH:
                    raise FuelError(f"the decomposition of {node.describe()} does not reach "
                                    f"primitives within {MAX_DEPTH} levels")
                replacement = self._decompose(node, decomposition)
                self.keep.append(node)
                placed = self._place(replacement, user_id, depth + 1, parent or node)
                self.ids[id(node)] = placed
                return placed
            if parent is not None and self.strict:
                raise NoBackendForOp(_missing_primitive(node, parent, self.describe_miss))
        placed = len(self.nodes)
        self.nodes.append(node)
        self.origin.append(user_id)
        if node.buffer is not None or node.op is OpKind.LOAD:
            self.inputs.append(())
            self.leaves.append(placed)
        else:
            self.inputs.append(tuple([ids[id(source)] for source in node.inputs]))
        ids[id(node)] = placed
        return placed


    def _decompose(self, node: Node, decomposition: Decomposition) -> Node:
        """``node``'s replacement: its decomposition run, or its recipe (the nodes that
        decomposition made for the same op, params, dtypes, shapes and device) replayed."""
        key = recipe_key(node)
        recipe = self.recipes.get(key) if key is not None else None
        if recipe is not None:
            return recipe.make(node)
        build = Builder(node, self.has_kernel)
        replacement = decomposition(node, build)
        _check_replacement(node, replacement)
        if key is not None:
            recorded = Recipe.record(node, replacement, build.made)
            if recorded is not None:
                if len(self.recipes) > RECIPE_LIMIT:
                    self.recipes.clear()
                self.recipes[key] = recorded
        return replacement


RECIPE_LIMIT = 4096


def recipe_key(node: Node) -> tuple | None:
    """What a decomposition's output depends on (besides the kernel table): the node's op,
    params, dtype, shape and device and its inputs' dtypes and shapes; None when unhashable."""
    key = (node.op, node.params, node.dtype, node.shape, node.device.key,
           tuple([(i.dtype, i.shape) for i in node.inputs]))
    try:
        hash(key)
    except TypeError:
        return None
    return key


class Recipe:
    """A decomposition's nodes as data: each made node's op, params, dtype, shape (and its
    structural hash) and its inputs as references (``-1 - k``: the decomposed node's k-th
    input; ``j >= 0``: the j-th made node). ``make`` rebuilds them over another node's inputs,
    at that node's site, without running the decomposition or inferring a shape."""

    __slots__ = ("entries", "result")

    def __init__(self, entries: list, result: int) -> None:
        self.entries = entries
        self.result = result

    @classmethod
    def record(cls, node: Node, replacement: Node, made: list[Node]) -> Recipe | None:
        """The recipe of ``replacement`` (built from ``node``'s inputs and the ``made``
        nodes), or None when it reaches any other node."""
        refs = {id(source): -1 - k for k, source in reversed(list(enumerate(node.inputs)))}
        order = {id(m): position for position, m in enumerate(made)}
        needed: set[int] = set()
        stack = [replacement]
        while stack:
            current = stack.pop()
            key = id(current)
            if key in refs or key in needed:
                continue
            if key not in order:
                return None  # a node the decomposition did not make nor take as an input
            needed.add(key)
            stack.extend(current.inputs)
        entries = []
        for m in made:  # made in order: every input is made (or given) before its user
            if id(m) not in needed:
                continue
            try:
                structure = hash((m.op, m.params, m.dtype, m.shape))
            except TypeError:
                return None
            refs[id(m)] = len(entries)
            entries.append((m.op, m.params, m.dtype, m.shape, structure,
                            tuple([refs[id(i)] for i in m.inputs])))
        return cls(entries, refs[id(replacement)])

    def make(self, node: Node) -> Node:
        """The recorded nodes over ``node``'s inputs; their result."""
        given = node.inputs
        device, site = node.device, node.site
        built: list[Node] = []
        for op, params, dtype, shape, structure, refs in self.entries:
            inputs = tuple([built[r] if r >= 0 else given[-1 - r] for r in refs])
            built.append(Node(op, inputs, params, dtype, shape, device, site, structure))
        return built[self.result] if self.result >= 0 else given[-1 - self.result]


def _check_replacement(node: Node, replacement: Node) -> None:
    if replacement.shape != node.shape or replacement.dtype is not node.dtype:
        raise FuelError(f"the decomposition of {node.describe()} built "
                        f"{replacement.dtype.name}{list(replacement.shape)}")


def _missing_primitive(node: Node, parent: Node, describe_miss: DescribeMiss | None) -> str:
    backend = node.device.backend.value
    if describe_miss is not None:
        miss = describe_miss(node)
    else:
        dtypes = ", ".join(i.dtype.name for i in node.inputs)
        miss = f"no kernel for {node.op.value}({dtypes} -> {node.dtype.name}) on {backend}."
    return (f"missing primitive {node.op.value}: {miss} {parent.op.value} has no kernel on "
            f"{backend} and decomposes into {node.op.value}, which {backend} must implement "
            f"[{parent.describe()}]")
