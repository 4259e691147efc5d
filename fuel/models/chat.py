"""Chat: the model file's own chat template rendered with jinja2 (as transformers renders it),
and ChatSession, a multi-turn conversation whose KV cache is kept between turns so that a
follow-up turn processes only its new tokens."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np

from fuel.ir.errors import InvalidArgument
from fuel.models.chat_template import (  # noqa: F401  (the chat API's names)
    ROLES,
    ChatTemplate,
    ChatTemplateError,
    check_messages,
)
from fuel.models.sampling import SamplingConfig

if TYPE_CHECKING:
    from fuel.models.kv_cache import KVCache
    from fuel.models.llama import LlamaModel

def common_prefix_length(first: Sequence[int], second: Sequence[int]) -> int:
    """How many leading ids ``first`` and ``second`` share."""
    count = min(len(first), len(second))
    a, b = np.asarray(first[:count]), np.asarray(second[:count])
    different = np.flatnonzero(a != b)
    return int(different[0]) if different.size else count


class ChatSession:
    """A conversation with ``model``: ``send(text)`` streams the answer. The KV cache lives on
    between turns; each turn re-renders the whole conversation with the chat template and
    processes only the tokens past what the cache already holds."""

    def __init__(self, model: LlamaModel, system: str | None = None) -> None:
        ChatTemplate.of(model)  # fail now when the model has no template
        self.model = model
        self.messages: list[dict] = []
        if system:
            self.messages.append({"role": "system", "content": system})
        self.cache: KVCache | None = None
        self.cached_ids: list[int] = []  # the ids whose keys and values the cache holds
        # the conversation so far as text and as the ids the model saw (its own answers as it
        # generated them, not re-tokenized)
        self.transcript_text = ""
        self.transcript_ids: list[int] = []

    def encode(self, messages: list[dict]) -> list[int]:
        """Token ids of the templated ``messages``: the transcript's ids for the part that is
        unchanged, the tokenizer's for the rest."""
        text = ChatTemplate.of(self.model).render(messages)
        known = self.transcript_text
        if known and text.startswith(known):
            rest = self.model.tokenizer.encode(text[len(known):], add_special_tokens=False)
            return self.transcript_ids + rest.ids
        return self.model.tokenizer.encode(text, add_special_tokens=False).ids

    def send(self, text: str, max_new_tokens: int = 256,
             sampling: SamplingConfig | None = None,
             stop: str | Sequence[str] | None = None) -> Iterator[str]:
        """Add the user's ``text``, then yield the assistant's answer piece by piece; the
        answer joins the conversation once it is complete."""
        if not isinstance(text, str) or not text.strip():
            raise InvalidArgument("the message is empty: type something to send")
        model = self.model
        messages = self.messages + [{"role": "user", "content": text}]
        ids = self.encode(messages)
        context = model.config.context_length
        if len(ids) >= context:
            raise InvalidArgument(f"the conversation has {len(ids)} tokens; the context holds "
                                  f"{context}: start a new chat")
        self._prepare_cache(ids, min(len(ids) + max_new_tokens, context))
        generation = model.start_generation(ids, max_new_tokens, sampling, self.cache,
                                            text=True, stop=stop)
        pieces: list[str] = []
        for piece in model.drive_text(generation, self.cache):
            pieces.append(piece)
            yield piece
        answer = "".join(pieces)
        generated = generation.tokens
        # the last token was sampled but never run through the model
        self.cached_ids = ids + generated[:-1]
        self.messages = messages + [{"role": "assistant", "content": answer}]
        self.transcript_text = ChatTemplate.of(model).render(messages) + answer
        self.transcript_ids = ids
        if not generation.stopped_at_string:
            ended = generated and generated[-1] in model.config.stop_ids
            self.transcript_ids = ids + (generated[:-1] if ended else generated)
        else:
            self.transcript_text = ""

    def _prepare_cache(self, ids: list[int], needed: int) -> None:
        """Keep the cached prefix that ``ids`` shares (at least one id stays to process), and
        grow the cache when ``needed`` positions do not fit."""
        reuse = min(common_prefix_length(self.cached_ids, ids), len(ids) - 1)
        capacity = self.model.cache_capacity(needed)
        if self.cache is None or self.cache.capacity < needed:
            old = self.cache
            self.cache = self.model.new_cache(capacity)
            if old is not None and reuse:
                self.cache.copy_prefix(old, reuse)
            else:
                reuse = 0
        self.cache.length = reuse
        self.cached_ids = ids[:reuse]
