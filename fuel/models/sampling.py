"""Choosing the next token from logits: greedy, or seeded temperature / top-k / top-p."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fuel.ir.errors import InvalidArgument


@dataclass(frozen=True)
class SamplingConfig:
    """How to pick tokens: ``temperature`` 0 is greedy (argmax); otherwise sample from the
    softmax of ``logits / temperature`` restricted to the ``top_k`` most likely tokens and the
    smallest set whose probability reaches ``top_p``."""

    temperature: float = 0.0
    top_k: int | None = None
    top_p: float | None = None
    seed: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.temperature, (int, float)) or not self.temperature >= 0:
            raise InvalidArgument(f"temperature must be >= 0, got {self.temperature!r}")
        if self.top_k is not None and (not isinstance(self.top_k, int) or self.top_k < 1):
            raise InvalidArgument(f"top_k must be a positive integer, got {self.top_k!r}")
        if self.top_p is not None and not 0.0 < self.top_p <= 1.0:
            raise InvalidArgument(f"top_p must be in (0, 1], got {self.top_p!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


class Sampler:
    """Draws tokens according to a SamplingConfig with its own seeded generator."""

    def __init__(self, config: SamplingConfig) -> None:
        self.config = config
        self._rng = np.random.default_rng(config.seed)

    def __call__(self, logits: np.ndarray) -> int:
        """The next token id for one row of logits."""
        logits = np.asarray(logits).reshape(-1)
        if self.config.greedy:
            return int(np.argmax(logits))
        scaled = logits.astype(np.float64) / self.config.temperature
        candidates = np.arange(scaled.size)
        if self.config.top_k is not None and self.config.top_k < scaled.size:
            candidates = np.argpartition(-scaled, self.config.top_k - 1)[:self.config.top_k]
        order = candidates[np.argsort(-scaled[candidates], kind="stable")]
        weights = np.exp(scaled[order] - scaled[order[0]])
        probabilities = weights / weights.sum()
        if self.config.top_p is not None and self.config.top_p < 1.0:
            cumulative = np.cumsum(probabilities)
            keep = int(np.searchsorted(cumulative, self.config.top_p)) + 1
            order = order[:keep]
            probabilities = probabilities[:keep] / probabilities[:keep].sum()
        return int(order[self._rng.choice(order.size, p=probabilities)])
