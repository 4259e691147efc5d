"""The executor: the realize walk."""

from fuel.runtime.executor import realize

__all__ = ["realize"]
