"""Decompositions: rewrite a node whose backend has no kernel into more primitive nodes.

``DECOMPOSITIONS`` maps an op to its function; ``expand_graph`` applies them (recursively)
to every node of a graph that lacks a kernel. Graph layer only: no front end, no backends.
"""

from fuel.graph.decompositions import (  # noqa: F401 - registration
    attention,
    contraction,
    elementwise,
    indexing,
    placement,
    qlinear,
    quantized,
    reductions,
    rows,
    windows,
)
from fuel.graph.decompositions.builder import Builder
from fuel.graph.decompositions.expand import Expansion, expand_graph, needs_kernel
from fuel.graph.decompositions.registry import DECOMPOSITIONS, decomposes

__all__ = ["DECOMPOSITIONS", "Builder", "Expansion", "decomposes", "expand_graph",
           "needs_kernel"]
