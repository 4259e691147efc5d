"""realize(): build the graph, find or build its plan, run the steps, drain, attach roots."""

from __future__ import annotations

import queue
import threading
from collections import OrderedDict

import numpy as np

from fuel.backends import get_backend
from fuel.dispatch import op_profile
from fuel.dispatch.kernel import global_table, table_generation
from fuel.graph import Graph, Node
from fuel.memory.storage import check_writable
from fuel.runtime.launch import drain, launch_step
from fuel.runtime.pending import PendingWork
from fuel.runtime.plan import Plan, PlanBuilder, Step, node_label
from fuel.runtime.replay import BoundPlan

PIPELINE_DEPTH = 64


class PlanCache:
    """LRU of plans keyed by graph structure; emptied when the binding table changes."""

    def __init__(self, capacity: int = 128) -> None:
        self.capacity = capacity
        self.plans: OrderedDict = OrderedDict()
        self.generation = table_generation()
        self.hits = 0
        self.misses = 0
        self.invalidations = 0
        self.lock = threading.Lock()
        self.by_roots: dict = {}  # the roots' keys -> the key of the last plan cached for them
        self.recent = None  # the wiring of the plan cached or found last (``same_wiring``)

    def get(self, key) -> Plan | None:
        with self.lock:
            generation = table_generation()
            if generation != self.generation:
                self.plans.clear()
                self.generation = generation
                self.invalidations += 1
            plan = self.plans.get(key)
            if plan is None:
                self.misses += 1
                return None
            self.plans.move_to_end(key)
            self.hits += 1
            return plan

    def find(self, roots: list[Node]) -> tuple[Graph, Plan] | None:
        """The cached plan for the graph behind ``roots``, and that graph, found from the
        roots' incremental keys without building it (``Wiring.match``); None when no plan
        was cached for these keys or the graph differs (then the caller builds the graph and
        asks ``get``, which counts the hit or the miss)."""
        root_keys = tuple([root.key for root in roots])
        with self.lock:
            key = self.by_roots.get(root_keys)
            if key is None or table_generation() != self.generation:
                return None
            plan = self.plans.get(key)
        if plan is None or plan.wiring is None:
            return None
        graph = plan.wiring.match(roots)
        if graph is None:
            return None
        with self.lock:
            if self.plans.get(key) is not plan:  # evicted or invalidated meanwhile
                return None
            self.plans.move_to_end(key)
            self.hits += 1
            self.recent = plan.wiring
        return graph, plan

    def key_of(self, roots: list[Node]):
        """The key of the plan last cached for ``roots``' keys (``find``), or None."""
        with self.lock:
            return self.by_roots.get(tuple([root.key for root in roots]))

    def holds(self, key, plan: Plan) -> bool:
        """Whether ``plan`` is still the one cached under ``key`` (counted as a hit)."""
        with self.lock:
            if table_generation() != self.generation or self.plans.get(key) is not plan:
                return False
            self.plans.move_to_end(key)
            self.hits += 1
            return True

    def same_wiring(self, roots: list[Node]) -> Graph | None:
        """The graph behind ``roots`` when it is wired as the last plan cached or found (the
        same code at a new shape, say), numbered as ``Graph.build`` would number it but found
        in one pass over the recorded ids (``Wiring.match`` without the leaves' keys); None
        otherwise (the caller builds the graph)."""
        recent = self.recent
        if recent is None or len(roots) != len(recent.roots):
            return None
        return recent.match(roots, leaf_keys=False)

    def put(self, key, plan: Plan, generation: int, graph: Graph | None = None) -> None:
        """Cache ``plan`` under ``key``; with ``graph`` (the graph it was planned for), later
        graphs with the same roots' keys are found by ``find``."""
        with self.lock:
            if generation != self.generation or self.capacity <= 0:
                return
            if graph is not None:
                plan.wiring = self.recent = graph.wiring()
                self.remember(key)
            self.plans[key] = plan
            while len(self.plans) > self.capacity:
                self.plans.popitem(last=False)

    def remember(self, key) -> None:
        """Let ``find`` look ``key``'s plan up by its roots' keys (``key[0]``)."""
        if len(self.by_roots) > 4 * max(self.capacity, 1):
            self.by_roots.clear()
        self.by_roots[key[0]] = key

    def stats(self) -> dict:
        return {"hits": self.hits, "misses": self.misses, "size": len(self.plans),
                "capacity": self.capacity, "invalidations": self.invalidations}


PLAN_CACHE = PlanCache()


def realize(nodes: list[Node], pipelined: bool = False) -> None:
    """Compute every node in ``nodes`` that is not realized yet, in one walk."""
    roots = [node for node in nodes if node.buffer is None]
    if not roots:
        return
    with op_profile.phase("realize"):
        with op_profile.phase("realize.graph"):
            found = PLAN_CACHE.find(roots)
            if found is None:
                graph = PLAN_CACHE.same_wiring(roots)
                if graph is None:
                    graph = Graph.build(roots)
                key = graph.structure_key()
            else:
                graph, plan = found
        if found is None:
            plan = PLAN_CACHE.get(key)
            if plan is not None and plan.wiring is not None:
                with PLAN_CACHE.lock:
                    PLAN_CACHE.remember(key)
        if plan is not None:
            _run_cached(graph, plan)
            return
        generation = table_generation()
        builder = PlanBuilder(graph, global_table())
        if pipelined:
            steps = list(_Walk(graph, builder.plan).run(_build_ahead(builder), keep=True))
        else:
            with op_profile.phase("realize.compile"):
                steps = list(builder.steps())
            _Walk(graph, builder.plan).run(steps)
        builder.plan.steps = steps
        PLAN_CACHE.put(key, builder.plan, generation, graph)


def _run_cached(graph: Graph, plan: Plan) -> None:
    with op_profile.phase("realize.plan_cache_hit"):
        replay = plan.replay
        if replay is None:
            replay = plan.replay = BoundPlan.bind(graph, plan) or False
        if replay is False or not replay.run(graph, plan):
            _Walk(graph, plan).run(plan.steps)


def run_cached(graph: Graph, plan: Plan) -> None:
    """Run ``plan``, a cached plan (``PlanCache.key_of``, ``PlanCache.holds``), for ``graph``,
    numbered as the graph it was planned for, and attach the roots: what ``realize`` does on a
    plan cache hit, for a caller that put the graph together itself (an autograd backward
    seen before: ``fuel.frontend.backward_plans``)."""
    with op_profile.phase("realize"):
        _run_cached(graph, plan)


class _Walk:
    """One execution of a plan: slot storages, pending handles, frees, drain, roots."""

    def __init__(self, graph: Graph, plan: Plan) -> None:
        self.graph = graph
        self.plan = plan
        self.storages: dict[int, object] = {}
        self.pending = PendingWork()
        self.taken: dict[int, object] = {}  # id(storage) -> the pool it came from
        self.last_step: Step | None = None  # the previous launch (backend boundaries)

    def run(self, steps, keep: bool = False):
        """Execute ``steps``; with ``keep`` return the list of what ran (pipelined build)."""
        graph = self.graph
        ran = [] if keep else None
        for device in self.plan.devices:  # a device unplugged since the plan was made
            get_backend(device)
        storages = self.storages
        for slot, node_id in enumerate(graph.leaves):
            storages[slot] = graph.nodes[node_id].buffer
        try:
            with op_profile.phase("realize.execute"), np.errstate(all="ignore"):
                for step in steps:
                    if keep:
                        ran.append(step)
                    if step.__class__ is tuple:
                        self._free(step)
                    else:
                        self._launch(step)
            with op_profile.phase("realize.drain"):
                self._drain()
        except BaseException:
            self.pending.close_all()
            self._release_all()
            raise
        self._attach_roots()
        return ran

    def _launch(self, step: Step) -> None:
        storages = self.storages
        inputs = [storages[slot] for slot in step.sources]
        if step.alias:
            output = inputs[0]
            check_writable(output, node_label(self.graph, step.node_id))
        else:  # held in its slot from here, so a failed launch gives it back with the rest
            output = step.pool.take(step.backend, step.device, step.dtype, step.size)
            self.taken[id(output)] = step.pool
        storages[step.target] = output
        launch_step(step, inputs, [output], self.graph, self.pending, self.last_step)
        self.last_step = step
        if step.frees:
            self._free(step.frees)

    def _free(self, slots) -> None:
        for slot in slots:
            storage = self.storages.pop(slot, None)
            self.pending.forget(slot)
            if storage is not None:
                pool = self.taken.pop(id(storage), None)
                if pool is not None:
                    pool.give_back(storage)

    def _release_all(self) -> None:
        for storage in self.storages.values():
            pool = self.taken.pop(id(storage), None)
            if pool is not None:
                pool.give_back(storage)
        self.storages.clear()
        self.taken.clear()

    def _drain(self) -> None:
        devices = set(self.plan.devices)
        for root in self.graph.roots:
            devices.add(self.graph.nodes[root].device)
        drain(self.pending, devices)

    def _attach_roots(self) -> None:
        values = self.plan.node_values
        for root in self.graph.roots:
            slot, layout = values[root]
            storage = self.storages[slot]
            pool = self.taken.pop(id(storage), None)
            if pool is not None:
                pool.disown(storage)
            self.graph.nodes[root].attach(storage, layout)


def _build_ahead(builder: PlanBuilder):
    """Build the plan on a producer thread, feeding the executor through a bounded queue."""
    channel: queue.Queue = queue.Queue(maxsize=PIPELINE_DEPTH)
    stop = threading.Event()
    done = object()

    def put(item) -> bool:
        """Hand ``item`` over unless the consumer has stopped; False once it has."""
        while not stop.is_set():
            try:
                channel.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in builder.steps():
                if not put(item):
                    return
            item = done
        except BaseException as error:  # handed to the consumer, raised in order
            item = error
        put(item)

    producer = threading.Thread(target=produce, name="fuel-compile", daemon=True)
    producer.start()
    try:
        while True:
            item = channel.get()
            if item is done:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        producer.join()


def plan_cache_stats() -> dict:
    """Hits, misses, size, capacity and invalidations of the plan cache."""
    return PLAN_CACHE.stats()


def set_plan_cache_capacity(capacity: int) -> None:
    """Bound the plan cache (0 disables caching); evicts least recently used plans."""
    with PLAN_CACHE.lock:
        PLAN_CACHE.capacity = int(capacity)
        while len(PLAN_CACHE.plans) > max(PLAN_CACHE.capacity, 0):
            PLAN_CACHE.plans.popitem(last=False)
