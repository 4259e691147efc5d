"""Node (immutable op record) and Graph (the realize-time arena built from roots)."""

from fuel.graph.graph import Graph
from fuel.graph.node import Node, creation_site

__all__ = ["Graph", "Node", "creation_site"]
