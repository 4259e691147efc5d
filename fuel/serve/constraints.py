"""Structured outputs: ``response_format`` ``json_object`` / ``json_schema`` as token masks
from llguidance (the ``serve`` extra), applied to a request's logits before its sampler picks,
so every token keeps the text a prefix of a document the grammar accepts. The mask's grammar
ends the generation (finish reason "stop") once the document is complete."""

from __future__ import annotations

import json
import threading

import numpy as np

from fuel.ir.errors import InvalidArgument
from fuel.models.common import require


class TokenConstraint:
    """One request's grammar state over the model's vocabulary: ``apply`` masks a row of
    logits to the tokens the grammar allows next; ``consume`` advances it by the token
    picked; ``finished`` once the grammar accepts nothing more."""

    def __init__(self, matcher, vocab_size: int) -> None:
        from llguidance import numpy as masks

        self._masks = masks
        self._matcher = matcher
        self._bitmask = masks.allocate_token_bitmask(1, vocab_size)

    def apply(self, logits: np.ndarray) -> np.ndarray:
        """A masked copy of ``logits`` (one row): disallowed tokens at -inf."""
        self._masks.fill_next_token_bitmask(self._matcher, self._bitmask)
        row = np.array(logits, np.float32).reshape(1, -1)
        self._masks.apply_token_bitmask_inplace(row, self._bitmask)
        return row[0]

    def consume(self, token: int) -> None:
        self._matcher.consume_token(int(token))

    @property
    def finished(self) -> bool:
        return self._matcher.is_stopped()


class GrammarFactory:
    """Makes TokenConstraints for one model's tokenizer (its llguidance view is built once,
    on first use: about a second)."""

    def __init__(self, tokenizer, vocab_size: int, eos_token_id: int | None) -> None:
        self._tokenizer = tokenizer
        self.vocab_size = vocab_size
        self._eos = eos_token_id
        self._built = None
        self._lock = threading.Lock()

    def _llguidance_tokenizer(self):
        llguidance = require("llguidance", "structured outputs (response_format)", extra="serve")
        with self._lock:
            if self._built is None:
                self._built = llguidance.LLTokenizer(self._tokenizer.to_str(),
                                                     n_vocab=self.vocab_size,
                                                     eos_token=self._eos)
        return self._built

    @staticmethod
    def grammar(schema: dict) -> str:
        """llguidance's grammar of documents valid under the JSON ``schema`` (compact JSON);
        InvalidArgument naming the problem when it cannot be compiled."""
        llguidance = require("llguidance", "structured outputs (response_format)", extra="serve")
        try:
            grammar = llguidance.LLMatcher.grammar_from_json_schema(
                json.dumps(schema), defaults={"whitespace_flexible": False})
            failed, messages = llguidance.LLMatcher.validate_grammar_with_warnings(grammar)
        except (ValueError, TypeError, RuntimeError) as error:
            raise InvalidArgument(f"the JSON schema cannot be used: {error}") from None
        if failed:
            raise InvalidArgument(f"the JSON schema cannot be used: {'; '.join(messages)}")
        return grammar

    def constraint(self, schema: dict) -> TokenConstraint:
        """A constraint to documents valid under the JSON ``schema``; InvalidArgument naming
        the problem when llguidance cannot compile it."""
        llguidance = require("llguidance", "structured outputs (response_format)", extra="serve")
        matcher = llguidance.LLMatcher(self._llguidance_tokenizer(), self.grammar(schema))
        if matcher.is_error():
            raise InvalidArgument(f"the JSON schema cannot be used: {matcher.get_error()}")
        return TokenConstraint(matcher, self.vocab_size)
