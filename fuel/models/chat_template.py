"""The model file's own chat template, rendered with jinja2's sandbox as transformers renders
it, and the checks of a chat's messages. Below the model (``LlamaModel.apply_chat_template``
uses it) and the chat session alike."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Protocol

from fuel.ir.errors import FuelError, InvalidArgument
from fuel.models.common import require


class TemplatedModel(Protocol):
    """What a chat template needs of a model: its template source, name, tokenizer, config."""

    chat_template: str | None
    name: str
    tokenizer: Any
    config: Any


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
    def of(cls, model: TemplatedModel) -> ChatTemplate:
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
