"""The OpenAI wire format: checking request bodies (each problem an APIError naming the field)
and shaping responses, stream chunks and errors."""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from dataclasses import dataclass

from fuel.ir.errors import FuelError
from fuel.models.sampling import SamplingConfig
from fuel.models.stop_strings import check_stop_strings

DEFAULT_MAX_TOKENS = 256
MAX_CHOICES = 16
MAX_EMBEDDING_INPUTS = 256


class APIError(Exception):
    """An error answered as OpenAI does: ``{"error": {"message", "type", "param", "code"}}``
    with an HTTP status (and headers, e.g. Retry-After)."""

    def __init__(self, status: int, message: str, param: str | None = None,
                 code: str | None = None, kind: str = "invalid_request_error",
                 headers: dict | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.kind = kind
        self.headers = headers or {}

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param,
                          "code": self.code}}


def parse_json(raw: bytes) -> dict:
    """The request body as a JSON object, or a 400 naming what is wrong with it."""
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise APIError(400, f"the request body is not valid JSON: {error}") from None
    if not isinstance(body, dict):
        raise APIError(400, f"the request body must be a JSON object, got "
                            f"{type(body).__name__}")
    return body


def _typed(body: dict, name: str, kinds: tuple, default=None, what: str = ""):
    value = body.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) and bool not in kinds:
        value = object()  # True is not a number here
    if not isinstance(value, kinds):
        raise APIError(400, f"'{name}' must be {what}, got {json.dumps(body.get(name))}",
                       param=name)
    return value


NUMBER = (int, float)


@dataclass
class GenerationRequest:
    """A checked completion or chat completion request."""

    model: str
    max_tokens: int
    sampling: SamplingConfig
    stop: tuple[str, ...]
    stream: bool
    include_usage: bool
    schema: dict | None = None  # response_format's JSON schema (json_object: any object)
    logprobs: int | None = None  # None: no log probabilities; k: the chosen token's and k top
    n: int = 1  # choices

    def choice_samplings(self) -> list[SamplingConfig]:
        """Each choice's sampling: with a seed, choice i samples with seed + i (so choices
        differ and each is reproducible); without, each draws its own."""
        if self.sampling.seed is None:
            return [self.sampling] * self.n
        return [dataclasses.replace(self.sampling, seed=self.sampling.seed + index)
                for index in range(self.n)]


def parse_generation(body: dict, context_length: int) -> GenerationRequest:
    """The common fields of /v1/completions and /v1/chat/completions."""
    model = _typed(body, "model", (str,), what="a string")
    if model is None:
        raise APIError(400, "'model' is required", param="model")
    name = "max_completion_tokens" if body.get("max_completion_tokens") is not None \
        else "max_tokens"
    max_tokens = _typed(body, name, (int,), DEFAULT_MAX_TOKENS, "an integer")
    if not 1 <= max_tokens <= context_length:
        raise APIError(400, f"'{name}' must be between 1 and the context length "
                            f"{context_length}, got {max_tokens}", param=name)
    n = _typed(body, "n", (int,), 1, "an integer")
    if not 1 <= n <= MAX_CHOICES:
        raise APIError(400, f"'n' must be between 1 and {MAX_CHOICES}, got {n}", param="n")
    logprobs = parse_logprobs(body, chat="messages" in body)
    stream = _typed(body, "stream", (bool,), False, "a boolean")
    options = _typed(body, "stream_options", (dict,), {}, "an object")
    include_usage = bool(options.get("include_usage", False))
    values = {}
    for field, kinds, default, what in (
            ("temperature", NUMBER, 1.0, "a number"), ("top_p", NUMBER, 1.0, "a number"),
            ("top_k", (int,), None, "an integer"), ("min_p", NUMBER, None, "a number"),
            ("seed", (int,), None, "an integer"),
            ("frequency_penalty", NUMBER, 0.0, "a number"),
            ("presence_penalty", NUMBER, 0.0, "a number"),
            ("repetition_penalty", NUMBER, 1.0, "a number")):
        values[field] = _typed(body, field, kinds, default, what)
    if not 0 <= values["temperature"] <= 2:
        raise APIError(400, f"'temperature' must be between 0 and 2, got "
                            f"{values['temperature']}", param="temperature")
    if values["top_k"] == 0:
        values["top_k"] = None
    try:
        sampling = SamplingConfig(**values)
    except FuelError as error:
        raise APIError(400, str(error), param=str(error).split(" ", 1)[0]) from None
    stop = body.get("stop")
    try:
        stop = check_stop_strings(stop)
    except FuelError as error:
        raise APIError(400, str(error), param="stop") from None
    schema = parse_response_format(body.get("response_format"))
    return GenerationRequest(model, max_tokens, sampling, stop, stream, include_usage, schema,
                             logprobs, n)


MAX_TOP_LOGPROBS = 20


def parse_logprobs(body: dict, chat: bool) -> int | None:
    """How many top alternatives to report per token, or None for no log probabilities:
    chat's ``logprobs`` (a boolean) and ``top_logprobs`` (0..20), or completions'
    ``logprobs`` (an integer 0..20)."""
    if chat:
        wanted = _typed(body, "logprobs", (bool,), False, "a boolean")
        top = _typed(body, "top_logprobs", (int,), None, "an integer")
        if top is not None and not wanted:
            raise APIError(400, "'top_logprobs' needs 'logprobs': true", param="top_logprobs")
        name, top = "top_logprobs", top or 0
        if not wanted:
            return None
    else:
        top = _typed(body, "logprobs", (int,), None, "an integer")
        name = "logprobs"
        if top is None:
            return None
    if not 0 <= top <= MAX_TOP_LOGPROBS:
        raise APIError(400, f"'{name}' must be between 0 and {MAX_TOP_LOGPROBS}, got {top}",
                       param=name)
    return top


def logprobs_body(chat: bool, entries: list, text_of) -> dict | None:
    """The ``logprobs`` of a choice for ``entries`` ((token, logprob, [(token, logprob)]) per
    generated token; ``text_of(token)`` its text), in chat's or completions' shape."""
    if not entries:
        return None
    if chat:
        def item(token: int, value: float) -> dict:
            text = text_of(token)
            return {"token": text, "logprob": value, "bytes": list(text.encode())}

        return {"content": [{**item(token, value), "top_logprobs": [item(*t) for t in top]}
                            for token, value, top in entries]}
    texts = [text_of(token) for token, _, _ in entries]
    offsets, offset = [], 0
    for text in texts:
        offsets.append(offset)
        offset += len(text)
    return {"tokens": texts, "token_logprobs": [value for _, value, _ in entries],
            "top_logprobs": [{text_of(t): v for t, v in top} for _, _, top in entries],
            "text_offset": offsets}


def parse_response_format(value) -> dict | None:
    """The JSON schema ``response_format`` asks for: None for text, ``{"type": "object"}``
    for json_object, the given schema for json_schema; a 400 naming what is wrong."""
    if value is None:
        return None
    param = "response_format"
    if not isinstance(value, dict) or not isinstance(value.get("type"), str):
        raise APIError(400, "'response_format' must be an object with a 'type' ('text', "
                            "'json_object' or 'json_schema')", param=param)
    kind = value["type"]
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "object"}
    if kind != "json_schema":
        raise APIError(400, f"'response_format.type' must be 'text', 'json_object' or "
                            f"'json_schema', got {json.dumps(kind)}", param=param)
    spec = value.get("json_schema")
    if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
        raise APIError(400, "'response_format.json_schema' must be an object with a 'name' "
                            "and a 'schema'", param=param)
    schema = spec.get("schema", {})
    if not isinstance(schema, (dict, bool)):
        raise APIError(400, "'response_format.json_schema.schema' must be a JSON schema "
                            "object", param=param)
    return schema if isinstance(schema, dict) else ({} if schema else {"not": {}})


def parse_prompt(body: dict) -> str:
    """The prompt of /v1/completions: a string, or a list holding one string."""
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if not isinstance(prompt, str):
        raise APIError(400, "'prompt' must be a string (or a list of one string)",
                       param="prompt")
    if not prompt:
        raise APIError(400, "'prompt' is empty", param="prompt")
    return prompt


def parse_embedding_input(body: dict) -> tuple[str, list[str], str]:
    """(model, texts, encoding format) of /v1/embeddings."""
    model = _typed(body, "model", (str,), what="a string")
    if model is None:
        raise APIError(400, "'model' is required", param="model")
    texts = body.get("input")
    if isinstance(texts, str):
        texts = [texts]
    if not isinstance(texts, list) or not texts or \
            not all(isinstance(text, str) for text in texts):
        raise APIError(400, "'input' must be a string or a non-empty list of strings",
                       param="input")
    if len(texts) > MAX_EMBEDDING_INPUTS:
        raise APIError(400, f"'input' holds {len(texts)} texts; the limit is "
                            f"{MAX_EMBEDDING_INPUTS}", param="input")
    encoding = _typed(body, "encoding_format", (str,), "float", "a string")
    if encoding not in ("float", "base64"):
        raise APIError(400, f"'encoding_format' must be float or base64, got {encoding!r}",
                       param="encoding_format")
    return model, texts, encoding


def context_error(prompt_tokens: int, context_length: int) -> APIError:
    return APIError(400, f"the prompt has {prompt_tokens} tokens; the model's context holds "
                         f"{context_length}, leaving no room for a new token",
                    param="messages", code="context_length_exceeded")


def unknown_model(name: str, known: list[str]) -> APIError:
    return APIError(404, f"the model '{name}' does not exist here; this server has: "
                         f"{', '.join(known) or 'none'}", param="model",
                    code="model_not_found")


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def choice_body(chat: bool, index: int, text: str, finish_reason: str,
                logprobs: dict | None = None) -> dict:
    """One choice of a whole (non-streamed) answer."""
    if chat:
        return {"index": index, "message": {"role": "assistant", "content": text},
                "finish_reason": finish_reason, "logprobs": logprobs}
    return {"index": index, "text": text, "finish_reason": finish_reason, "logprobs": logprobs}


def completion_body(chat: bool, identifier: str, model: str, choices: list[dict],
                    prompt_tokens: int, completion_tokens: int) -> dict:
    """A whole (non-streamed) chat.completion or text_completion of ``choices``."""
    return {"id": identifier, "object": "chat.completion" if chat else "text_completion",
            "created": int(time.time()), "model": model, "choices": choices,
            "usage": usage(prompt_tokens, completion_tokens)}


def chunk_body(chat: bool, identifier: str, model: str, text: str | None,
               finish_reason: str | None = None, first: bool = False,
               logprobs: dict | None = None, index: int = 0) -> dict:
    """One streamed chunk (``text`` None: the closing chunk with the finish reason)."""
    if chat:
        delta = {} if text is None else {"content": text}
        if first:
            delta["role"] = "assistant"
        choice = {"index": index, "delta": delta, "finish_reason": finish_reason,
                  "logprobs": logprobs}
    else:
        choice = {"index": index, "text": text or "", "finish_reason": finish_reason,
                  "logprobs": logprobs}
    return {"id": identifier, "object": "chat.completion.chunk" if chat else "text_completion",
            "created": int(time.time()), "model": model, "choices": [choice]}


def usage_chunk(chat: bool, identifier: str, model: str, prompt_tokens: int,
                completion_tokens: int) -> dict:
    """The last streamed chunk when ``stream_options.include_usage`` asks for it."""
    return {"id": identifier, "object": "chat.completion.chunk" if chat else "text_completion",
            "created": int(time.time()), "model": model, "choices": [],
            "usage": usage(prompt_tokens, completion_tokens)}


def server_event(data: dict | str) -> bytes:
    """One server-sent event carrying ``data`` (JSON, or a literal such as ``[DONE]``)."""
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    return f"data: {text}\n\n".encode()
