"""Resource limits on sizes that come from untrusted files: a model declaring a 2^40 dim, a
context of 10^9 positions or a vocabulary of 10^9 tokens is refused before anything is
allocated. Each limit has a default far above real models and an environment variable that
raises it."""

from __future__ import annotations

import os
from dataclasses import dataclass

from fuel.ir.errors import ResourceLimitError


@dataclass(frozen=True)
class Limit:
    """One limit: its default and the environment variable that overrides it."""

    variable: str
    default: int
    what: str


LIMITS: dict[str, Limit] = {
    "dim": Limit("FUEL_MAX_DIM", 1 << 20, "a tensor dim"),
    "context": Limit("FUEL_MAX_CONTEXT", 1 << 20, "a context length"),
    "vocab": Limit("FUEL_MAX_VOCAB", 1 << 22, "a vocabulary"),
    "layers": Limit("FUEL_MAX_LAYERS", 4096, "a layer count"),
    "elements": Limit("FUEL_MAX_ELEMENTS", 1 << 34, "a tensor's element count"),
}


def limit(kind: str) -> int:
    """The current value of limit ``kind`` (its variable when set, else the default)."""
    entry = LIMITS[kind]
    text = os.environ.get(entry.variable)
    if text is None:
        return entry.default
    try:
        return int(text)
    except ValueError:
        raise ResourceLimitError(f"{entry.variable} must be an integer, got {text!r}") from None


def check_limit(kind: str, value: int, what: str) -> None:
    """ResourceLimitError when ``value`` exceeds limit ``kind``; ``what`` names the value
    and where it came from (``model.gguf: the context length``)."""
    bound = limit(kind)
    if value > bound:
        entry = LIMITS[kind]
        raise ResourceLimitError(
            f"{what} is {value}, over fuel's limit of {bound} for {entry.what}; if the file is "
            f"trusted, raise it with the environment variable {entry.variable}")
