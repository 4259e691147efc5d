"""Neural-network functions (``fuel.nn.functional``), torch's names and semantics."""

from fuel.nn import functional

__all__ = ["functional"]
