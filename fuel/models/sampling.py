"""Choosing the next token from logits: greedy, or seeded temperature / top-k / min-p / top-p,
after the repetition, frequency and presence penalties."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fuel.ir.errors import InvalidArgument


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass(frozen=True)
class SamplingConfig:
    """How to pick tokens. First the penalties adjust the logits: ``repetition_penalty``
    (Hugging Face's: every token already in the prompt or the output has a positive logit
    divided by it, a negative one multiplied), ``frequency_penalty`` and ``presence_penalty``
    (OpenAI's: an output token's logit loses ``count * frequency + presence``). Then
    ``temperature`` 0 is greedy (argmax); otherwise sample from the softmax of
    ``logits / temperature`` restricted to the ``top_k`` most likely tokens, those at least
    ``min_p`` times as likely as the best, and the smallest set whose probability reaches
    ``top_p``."""

    temperature: float = 0.0
    top_k: int | None = None
    top_p: float | None = None
    seed: int | None = None
    min_p: float | None = None
    repetition_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0

    def __post_init__(self) -> None:
        if not _is_number(self.temperature) or not self.temperature >= 0:
            raise InvalidArgument(f"temperature must be >= 0, got {self.temperature!r}")
        if self.top_k is not None and (isinstance(self.top_k, bool)
                                       or not isinstance(self.top_k, int) or self.top_k < 1):
            raise InvalidArgument(f"top_k must be a positive integer, got {self.top_k!r}")
        if self.top_p is not None and not (_is_number(self.top_p) and 0.0 < self.top_p <= 1.0):
            raise InvalidArgument(f"top_p must be in (0, 1], got {self.top_p!r}")
        if self.min_p is not None and not (_is_number(self.min_p) and 0.0 <= self.min_p <= 1.0):
            raise InvalidArgument(f"min_p must be in [0, 1], got {self.min_p!r}")
        if not _is_number(self.repetition_penalty) or not self.repetition_penalty > 0:
            raise InvalidArgument(f"repetition_penalty must be > 0, got "
                                  f"{self.repetition_penalty!r}")
        for name in ("frequency_penalty", "presence_penalty"):
            value = getattr(self, name)
            if not _is_number(value) or not -2.0 <= value <= 2.0:
                raise InvalidArgument(f"{name} must be in [-2, 2], got {value!r}")
        if self.seed is not None and (isinstance(self.seed, bool)
                                      or not isinstance(self.seed, int)):
            raise InvalidArgument(f"seed must be an integer, got {self.seed!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @property
    def penalized(self) -> bool:
        return (self.repetition_penalty != 1.0 or self.frequency_penalty != 0.0
                or self.presence_penalty != 0.0)


class Sampler:
    """Draws tokens according to a SamplingConfig with its own seeded generator; remembers the
    prompt and every token it drew, which the penalties look at."""

    def __init__(self, config: SamplingConfig, prompt: Sequence[int] = ()) -> None:
        self.config = config
        self._rng = np.random.default_rng(config.seed)
        self._seen = {int(token) for token in prompt}
        self._counts: dict[int, int] = {}

    def penalize(self, logits: np.ndarray) -> np.ndarray:
        """``logits`` (one row) after the repetition, frequency and presence penalties."""
        config = self.config
        logits = np.array(logits, dtype=np.float64).reshape(-1)
        if config.repetition_penalty != 1.0 and self._seen:
            seen = np.fromiter(self._seen, np.int64)
            values = logits[seen]
            logits[seen] = np.where(values > 0, values / config.repetition_penalty,
                                    values * config.repetition_penalty)
        if (config.frequency_penalty or config.presence_penalty) and self._counts:
            tokens = np.fromiter(self._counts, np.int64)
            counts = np.fromiter(self._counts.values(), np.float64)
            logits[tokens] -= counts * config.frequency_penalty + config.presence_penalty
        return logits

    @property
    def plain_greedy(self) -> bool:
        """Whether the pick is the row's argmax as given (greedy, no penalties)."""
        return self.config.greedy and not self.config.penalized

    def __call__(self, logits: np.ndarray, argmax: int | None = None) -> int:
        """The next token id for one row of logits (and remember it); ``argmax``: the row's
        argmax when the caller has it (a batch's rows in one call), used when
        ``plain_greedy``."""
        token = int(argmax) if argmax is not None and self.plain_greedy else self._choose(logits)
        self._seen.add(token)
        self._counts[token] = self._counts.get(token, 0) + 1
        return token

    def _choose(self, logits: np.ndarray) -> int:
        config = self.config
        if config.penalized:
            logits = self.penalize(logits)
        else:
            logits = np.asarray(logits).reshape(-1)
        if config.greedy:
            return int(np.argmax(logits))
        scaled = logits.astype(np.float64) / config.temperature
        candidates = np.arange(scaled.size)
        if config.top_k is not None and config.top_k < scaled.size:
            candidates = np.argpartition(-scaled, config.top_k - 1)[:config.top_k]
        order = candidates[np.argsort(-scaled[candidates], kind="stable")]
        weights = np.exp(scaled[order] - scaled[order[0]])
        probabilities = weights / weights.sum()
        if config.min_p:
            keep = int(np.count_nonzero(probabilities >= config.min_p * probabilities[0]))
            order = order[:keep]
            probabilities = probabilities[:keep] / probabilities[:keep].sum()
        if config.top_p is not None and config.top_p < 1.0:
            cumulative = np.cumsum(probabilities)
            keep = int(np.searchsorted(cumulative, config.top_p)) + 1
            order = order[:keep]
            probabilities = probabilities[:keep] / probabilities[:keep].sum()
        return int(order[self._rng.choice(order.size, p=probabilities)])
