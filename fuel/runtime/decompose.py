"""Where a plan built over an expanded graph meets the user's graph: the translation of its
steps back to the user's node ids (so the plan cache keys on, and replays against, the graph
the user built). Which nodes decompose, and why, is decided by ``fuel.runtime.resolve``."""

from __future__ import annotations

from collections.abc import Iterator

from fuel.graph.decompositions import Expansion


def translate_steps(expansion: Expansion, steps: Iterator, plan) -> Iterator:
    """Relabel the steps of a plan built over the expanded graph with the user's node ids,
    and, once all are out, re-index ``plan.node_values`` by the user's node ids."""
    origin = expansion.origin
    for step in steps:
        if step.__class__ is not tuple:
            step.node_id = origin[step.node_id]
        yield step
    values = plan.node_values
    plan.node_values[:] = [values[p] for p in expansion.position]
