"""Chat: the model file's own chat template rendered with jinja2 (as transformers renders it),
and ChatSession, a multi-turn conversation whose KV cache is kept between turns so that a
follow-up turn processes only its new tokens."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import TYPE_CHECKING

import numpy as np

from fuel.ir.errors import FuelError, InvalidArgument
from fuel.models.common import require
from fuel.models.sampling import SamplingConfig

if TYPE_CHECKING:
    from fuel.models.kv_cache import KVCache
    from fuel.models.llama import LlamaModel

ROLES = ("system", "user", "assistant", "tool")


class ChatTemplateError(FuelError):
    """The model has no chat template, or its template failed on these messages."""


def check_messages(messages: Sequence[dict]) -> list[dict]:
    """``messages`` as a list of ``{"role", "content"}`` dicts with string values; content
    given as OpenAI text parts (``[{"type": "text", "text": ...}]``) is joined."""
    if not isinstance(messages, (list, tuple)) or not messages:
        raise InvalidArgument("messages must be a non-empty list of {role, content} objects")
    checked = []
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            raise InvalidArgument(f"messages[{index}] must be an object with role and content, "
                                  f"got {type(message).__name__}")
        role, content = message.get("role"), message.get("content")
        if role not in ROLES:
            raise InvalidArgument(f"messages[{index}].role must be one of {', '.join(ROLES)}, "
                                  f"got {role!r}")
        if isinstance(content, list):
            parts = []
            for part in content:
                if not isinstance(part, dict) or part.get("type") != "text" or \
                        not isinstance(part.get("text"), str):
                    raise InvalidArgument(f"messages[{index}].content parts must be "
                                          "{type: text, text: string} objects")
                parts.append(part["text"])
            content = "".join(parts)
        if not isinstance(content, str):
            raise InvalidArgument(f"messages[{index}].content must be a string, got "
                                  f"{type(content).__name__}")
        checked.append({"role": role, "content": content})
    return checked


class ChatTemplate:
    """A compiled chat template: jinja2's sandbox with the globals and filters transformers
    gives templates (``raise_exception``, ``strftime_now``, a non-escaping ``tojson``)."""

    def __init__(self, source: str, bos_token: str = "", eos_token: str = "") -> None:
        jinja2 = require("jinja2", "chat templates")
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(message: str):
            raise jinja2.exceptions.TemplateError(message)

        def tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
            return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent,
                              separators=separators, sort_keys=sort_keys)

        environment = ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
        environment.filters["tojson"] = tojson
        environment.globals["raise_exception"] = raise_exception
        environment.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
        try:
            self._template = environment.from_string(source)
        except jinja2.exceptions.TemplateError as error:
            raise ChatTemplateError(f"the model's chat template does not compile: {error}"
                                    ) from None
        self._errors = jinja2.exceptions.TemplateError
        self.bos_token, self.eos_token = bos_token, eos_token

    @classmethod
    def of(cls, model: LlamaModel) -> ChatTemplate:
        """The template of ``model`` (compiled once and kept on it)."""
        template = getattr(model, "_compiled_chat_template", None)
        if template is None:
            if not model.chat_template:
                raise ChatTemplateError(
                    f"the model file {model.name} has no chat template (GGUF key "
                    "tokenizer.chat_template); use plain generation instead of chat")

            def token(index: int | None) -> str:
                return "" if index is None else (model.tokenizer.id_to_token(index) or "")

            template = cls(model.chat_template, token(model.config.bos_token_id),
                           token(model.config.eos_token_id))
            model._compiled_chat_template = template
        return template

    def render(self, messages: Sequence[dict], add_generation_prompt: bool = True) -> str:
        """The prompt text of ``messages`` (ending with the assistant's header when
        ``add_generation_prompt``)."""
        messages = check_messages(messages)
        try:
            return self._template.render(messages=messages,
                                         add_generation_prompt=add_generation_prompt,
                                         bos_token=self.bos_token, eos_token=self.eos_token)
        except self._errors as error:
            raise ChatTemplateError(f"the model's chat template rejected the messages: {error}"
                                    ) from None


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
            ended = generated and generated[-1] == model.config.eos_token_id
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
