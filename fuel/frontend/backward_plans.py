"""A backward pass seen before, run without building its graph.

A training loop calls ``loss.backward()`` on the same forward graph every step, with other
leaf data. The first such backward builds the gradient graph (``run_backward``) and
realizes it through a cached plan; the shape of that backward is then remembered as a
``BackwardPlan``: the recorded forward walked from the loss (each node's key, its autograd
record's kind, whether it is realized, and its wiring by identity), and how the realized
graph's nodes map onto it: forward nodes by their walk position, the backward's own leaves
(shared constants, ``fuel.frontend.build.constant``) kept, its lazy nodes as bodiless shells
(naming a failed kernel's node), the gradients as fresh nodes each run. A later backward whose
forward walks the same way (``match``) runs that plan directly (``run_cached``): no gradient
rule runs, no node of the backward is built, and the plan, its kernels and its bound
launchers are those the general path uses, so the gradients are the same bits.

Only a plain ``backward()`` takes it: one scalar output, its implicit seed, no ``inputs=``,
no ``create_graph``, outside fuel.jit's trace and the profiler, and only while no hook,
``retain_grad`` or gradient to accumulate into (a ``.grad`` already set) is on the walk;
anything else is the general path. A structure whose backward builds a leaf that is not a
shared constant is never remembered.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from fuel.dispatch import op_profile
from fuel.frontend import build
from fuel.frontend.base import wrap
from fuel.frontend.tape import Leaf, Record
from fuel.graph.node import Node
from fuel.graph.node import user_site_holder as _site_local

_LIMIT = 64
ENABLED = True  # off: every backward takes the general path (the tests' reference)
PLANS: OrderedDict = OrderedDict()  # the loss's key -> its BackwardPlan (the last one seen)
REFUSED: set = set()  # the keys of losses whose backward cannot be remembered (not walked again)
_LOCK = threading.Lock()  # PLANS' and REFUSED's changes


class Walk:
    """The recorded forward behind a loss, in discovery order from the loss (position 0):
    each node's traversed inputs (its record's when it has one, else its own), key, record
    class and laziness. ``nodes`` is None when the walk is not eligible (see the module)."""

    __slots__ = ("nodes", "index", "edges", "keys", "classes", "lazy")

    def __init__(self, loss: Node) -> None:
        nodes = [loss]
        index = {id(loss): 0}
        edges: list[tuple[int, ...]] = []
        keys, classes, lazy = [], [], []
        position = 0
        while position < len(nodes):
            node = nodes[position]
            record = getattr(node, "grad_record", None)
            kind = record.__class__
            if kind is Record:
                sources = record.inputs
                if sources is None or record.hooks or record.retain or record.grad is not None:
                    self.nodes = None
                    return
            else:
                if kind is Leaf and (record.hooks or record.grad is not None):
                    self.nodes = None
                    return
                sources = node.inputs
            targets = []
            for source in sources:
                at = index.get(id(source))
                if at is None:
                    at = index[id(source)] = len(nodes)
                    nodes.append(source)
                targets.append(at)
            edges.append(tuple(targets))
            keys.append(node.key)
            classes.append(kind)
            lazy.append(node.buffer is None)
            position += 1
        self.nodes, self.index, self.edges = nodes, index, edges
        self.keys, self.classes, self.lazy = keys, classes, lazy


class BackwardPlan:
    """A remembered backward (see the module): the forward walk's shape, the cached plan
    and how the plan's graph is put together from a matching forward."""

    __slots__ = ("entries", "plan_key", "plan", "inputs", "roots",
                 "leaves", "base", "forward", "fresh", "grads", "cleared")

    def match(self, loss: Node) -> list | None:
        """The nodes of ``loss``'s recorded forward at this plan's walk positions, or None
        when it walks otherwise (a key, a record, a realized node or an edge differs, or
        something on it is not eligible)."""
        entries = self.entries
        count = len(entries)
        nodes: list = [None] * count
        nodes[0] = loss
        position = 0
        for key, kind, lazy, targets in entries:
            node = nodes[position]
            position += 1
            if node.key != key or (node.buffer is None) is not lazy:
                return None
            record = getattr(node, "grad_record", None)
            if record.__class__ is not kind:
                return None
            if kind is Record:
                sources = record.inputs
                if sources is None or record.hooks or record.retain or record.grad is not None:
                    return None
            else:
                if kind is Leaf and (record.hooks or record.grad is not None):
                    return None
                sources = node.inputs
            if len(sources) != len(targets):
                return None
            for target, source in zip(targets, sources):
                known = nodes[target]
                if known is None:
                    nodes[target] = source
                elif known is not source:
                    return None
        if len(set(map(id, nodes))) != count:  # one node at two positions: another wiring
            return None
        return nodes


def eligible(gradient, inputs, create_graph: bool) -> bool:
    """Whether a backward call (outside fuel.jit's trace) may take a remembered plan (or
    leave one)."""
    return (ENABLED and gradient is None and inputs is None and not create_graph
            and not op_profile._enabled and not op_profile._trace)


def replay(loss: Node, retain_graph: bool) -> bool:
    """Run the remembered backward of ``loss``'s forward when there is one and it matches:
    the loss and the leaves' new ``.grad`` realized, the walked records' inputs dropped
    (unless ``retain_graph``). False when the general path must run."""
    key = loss.key
    backward = PLANS.get(key)
    if backward is None:
        return False
    # (Matched and run without the lock: a BackwardPlan does not change once made, and the
    # bound plan runs one thread at a time, others taking the walk.)
    walked = backward.match(loss)
    if walked is None:
        return False
    from fuel.graph import Graph
    from fuel.runtime.executor import PLAN_CACHE, run_cached

    if not PLAN_CACHE.holds(backward.plan_key, backward.plan):
        with _LOCK:
            if PLANS.get(key) is backward:
                del PLANS[key]
        return False
    nodes = list(backward.base)
    for graph_id, position in backward.forward:
        nodes[graph_id] = walked[position]
    site = _site_local.site
    for graph_id in backward.fresh:
        shell = nodes[graph_id]
        nodes[graph_id] = Node(shell.op, (), shell.params, shell.dtype, shell.shape,
                               shell.device, site or shell.site)
    plan = backward.plan
    run_cached(Graph(nodes, backward.inputs, backward.roots, backward.leaves), plan)
    if plan.replay and not plan.replay.reuse_outputs:
        plan.replay.reuse_outputs = _small(plan.replay)
    for position, graph_id in backward.grads:
        walked[position].grad_record.grad = wrap(nodes[graph_id])
    if not retain_graph:
        for position in backward.cleared:
            walked[position].grad_record.inputs = None
    with _LOCK:
        if key in PLANS:
            PLANS.move_to_end(key)
    return True


def _refuse(loss_key) -> None:
    with _LOCK:
        if len(REFUSED) > 4 * _LIMIT:
            REFUSED.clear()
        REFUSED.add(loss_key)


def _small(bound) -> bool:
    """Whether a bound plan's outputs are small enough to keep between steps (the CPU's
    gradients of a small model: their launchers then stay prepared)."""
    from fuel.runtime.replay import REPLAY_BYTES_LIMIT

    return sum(size * dtype.itemsize for _, _, _, dtype, size in bound.outputs) <= \
        REPLAY_BYTES_LIMIT


def remember(walk: Walk, loss_key, roots: list[Node], touched: list) -> None:
    """After the general backward built ``roots`` (the loss, when lazy, then the gradients
    of the ``touched`` leaf records) from the forward ``walk`` took before it: remember it
    when its plan is cached (its second step, typically) and it can be replayed."""
    from fuel.runtime.executor import PLAN_CACHE

    found = PLAN_CACHE.find(roots)
    if found is None:
        return
    plan_key = PLAN_CACHE.key_of(roots)
    graph, plan = found
    if plan_key is None or not PLAN_CACHE.holds(plan_key, plan):
        return
    constants = {id(node) for node in build._CONSTANTS.values()}
    index = walk.index
    roots_set = set(graph.roots)
    base: list = [None] * len(graph.nodes)
    forward, fresh = [], []
    by_id = {}
    for graph_id, node in enumerate(graph.nodes):
        by_id[id(node)] = graph_id
        position = index.get(id(node))
        if position is not None:
            forward.append((graph_id, position))
        elif node.buffer is not None:
            if id(node) not in constants:  # a leaf of its own each time: not replayable
                _refuse(loss_key)
                return
            base[graph_id] = node
        else:
            base[graph_id] = Node(node.op, (), node.params, node.dtype, node.shape, node.device,
                                  node.site)
            if graph_id in roots_set:
                fresh.append(graph_id)
    leaf_at = {id(node.grad_record): position for position, node in enumerate(walk.nodes)
               if walk.classes[position] is Leaf}
    grads, used = [], set()
    fresh_set = set(fresh)
    for record in touched:
        graph_id = by_id.get(id(record.grad._node))
        position = leaf_at.get(id(record))
        if graph_id not in fresh_set or graph_id in used or position is None:
            _refuse(loss_key)
            return
        used.add(graph_id)
        grads.append((position, graph_id))
    backward = BackwardPlan()
    # Per walk position: (key, record class, lazy, input positions).
    backward.entries = list(zip(walk.keys, walk.classes, walk.lazy, walk.edges))
    backward.plan_key, backward.plan = plan_key, plan
    backward.inputs, backward.roots, backward.leaves = graph.inputs, graph.roots, graph.leaves
    backward.base, backward.forward, backward.fresh = base, forward, fresh
    backward.grads = grads
    backward.cleared = [position for position, node in enumerate(walk.nodes)
                        if walk.classes[position] is Record and node.grad_record.inputs is None]
    with _LOCK:
        PLANS[loss_key] = backward
        PLANS.move_to_end(loss_key)
        while len(PLANS) > _LIMIT:
            PLANS.popitem(last=False)
