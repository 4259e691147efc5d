"""One generation's state machine, shared by every driver of a model: LlamaModel's
``stream_ids`` / ``generate`` / ``chat`` and ChatSession (one generation at a time, on the
model's pooled caches or the session's own), and the server's Engine (many at once, interleaved
and batched by its own scheduler).

A Generation goes prompt -> prefill -> decode steps -> finished, with a finish reason. It owns
what is per request: the prompt, the token budget, the sampler (its seeded generator and the
penalties' memory), the tokens made so far, the stop tokens (EOS and the file's other end-of-
generation ids), the text stream with its stop strings, and the timings. It never runs the
model: the driver owns the KV cache and the forward pass. Each step the driver asks
``pending_ids()`` (the prompt past what the cache already holds, then the last token), runs
those ids at the cache's next positions, and hands the last row of logits to ``advance``, which
samples the next token, releases its text and decides whether the generation is over (a stop
token, a stop string or the budget)::

    generation = model.start_generation(ids, max_new_tokens, sampling, text=True)
    while not generation.finished:
        generation.advance(model.forward(generation.pending_ids(), cache)[-1])
        print(generation.piece, end="")
    print(generation.finish_text())
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from fuel.ir.errors import InvalidArgument
from fuel.models.sampling import Sampler
from fuel.models.stop_strings import StopStringFilter
from fuel.models.tokenizer import StreamDecoder


@dataclass
class GenerationStats:
    """Timings of a generation: prompt length, tokens produced, time to the first token
    (prompt processing plus its sampling) and the decode rate after it."""

    prompt_tokens: int = 0
    new_tokens: int = 0
    time_to_first_token_s: float = 0.0
    decode_seconds: float = 0.0
    cached_tokens: int = 0  # prompt tokens whose keys and values were already in the cache
    finish_reason: str = ""  # "stop" (EOS or a stop string) or "length"

    @property
    def tokens_per_second(self) -> float:
        """Decoded tokens per second after the first token (0 when only one was made)."""
        if self.new_tokens < 2 or self.decode_seconds <= 0:
            return 0.0
        return (self.new_tokens - 1) / self.decode_seconds


class TextStream:
    """Token ids in, text pieces out, cut before the first stop string: ``push`` returns the
    text a token completes that may be shown; ``stopped`` is set once a stop string appears."""

    def __init__(self, tokenizer, stop: StopStringFilter | str | Sequence[str] | None = None
                 ) -> None:
        self.decoder = StreamDecoder(tokenizer)
        self.filter = stop if isinstance(stop, StopStringFilter) else StopStringFilter(stop)

    @property
    def stopped(self) -> bool:
        return self.filter.stopped

    def push(self, token: int) -> str:
        """The text ``token`` releases ('' while a character or a possible stop string is
        incomplete, and after a stop string)."""
        return self.filter.push(self.decoder.push(token))

    def finish(self) -> str:
        """The held-back text once the tokens end ('' after a stop string)."""
        if self.filter.stopped:
            return ""
        return self.filter.push(self.decoder.finish()) + self.filter.finish()


class Generation:
    """One request's generation (see the module docstring). ``prompt``: the checked ids;
    ``budget``: at most this many new tokens; ``cached``: how many leading prompt ids the
    driver's KV cache already holds; ``text``: where the tokens' text goes (stop strings
    included), or None for ids only.

    ``finish_reason`` is "stop" (a stop token or a stop string) or "length" (the budget);
    it reads "length" while the generation runs."""

    def __init__(self, prompt: np.ndarray, budget: int, sampler: Sampler,
                 stop_tokens: Iterable[int], cached: int = 0, text: TextStream | None = None
                 ) -> None:
        self.prompt = prompt
        self.budget = budget
        self.sampler = sampler
        self.stop_tokens = frozenset(stop_tokens)
        self.cached = cached
        self.text = text
        # a grammar over the next token (fuel.serve.constraints.TokenConstraint or alike):
        # ``apply(logits)`` masks, ``consume(token)`` advances, ``finished`` ends
        self.constraint = None
        self.tokens: list[int] = []
        self.piece = ""  # the text the last token released (with ``text``)
        self.finished = False
        self.stats = GenerationStats(prompt_tokens=int(prompt.size), cached_tokens=cached,
                                     finish_reason="length")
        self._started = 0.0
        self._decode_started = 0.0

    @property
    def finish_reason(self) -> str:
        return self.stats.finish_reason

    @property
    def produced(self) -> int:
        """How many tokens were made so far."""
        return len(self.tokens)

    @property
    def last_token(self) -> int:
        return self.tokens[-1]

    @property
    def positions_needed(self) -> int:
        """KV cache positions the whole generation may use (prompt and budget)."""
        return int(self.prompt.size) + self.budget

    @property
    def stopped_at_string(self) -> bool:
        """Whether a stop string ended the generation."""
        return self.text is not None and self.text.stopped

    def pending_ids(self) -> np.ndarray:
        """The ids to run next at the cache's next positions: the prompt past the cached
        ids (prefill), then the last token made (a decode step)."""
        if self.finished:
            raise InvalidArgument("the generation is finished: nothing more to run")
        if not self.tokens:
            self._started = time.perf_counter()
            return self.prompt[self.cached:]
        if len(self.tokens) == 1:
            self._decode_started = time.perf_counter()
        return np.array([self.tokens[-1]], np.int64)

    def advance(self, logits: np.ndarray, argmax: int | None = None) -> int:
        """Sample the next token from the last row of logits of ``pending_ids()``; set
        ``piece`` to the text it releases, and ``finished`` when the generation is over.
        ``argmax``: the row's argmax when the caller computed it (for a whole batch at once);
        used only where a greedy pick of the unmasked row is wanted."""
        if self.finished:
            raise InvalidArgument("the generation is finished: it takes no more logits")
        constraint = self.constraint
        if constraint is not None:
            logits = constraint.apply(logits)
            argmax = None
        token = self.sampler(logits, argmax)
        if constraint is not None and token not in self.stop_tokens:
            constraint.consume(token)
        now = time.perf_counter()
        self.tokens.append(token)
        stats = self.stats
        stats.new_tokens = len(self.tokens)
        if len(self.tokens) == 1:
            stats.time_to_first_token_s = now - self._started
        else:
            stats.decode_seconds = now - self._decode_started
        if token in self.stop_tokens:
            self._finish("stop")
        if self.text is not None:
            self.piece = self.text.push(token)
            if self.text.stopped:
                self._finish("stop")
        if constraint is not None and constraint.finished and not self.finished:
            self._finish("stop")
        if len(self.tokens) >= self.budget:
            self.finished = True
        return token

    def finish_text(self) -> str:
        """The text still held back once the generation ends ('' after a stop string or
        without ``text``)."""
        return self.text.finish() if self.text is not None else ""

    def _finish(self, reason: str) -> None:
        self.finished = True
        self.stats.finish_reason = reason
