"""The ASGI application (starlette): OpenAI-compatible completions, chat completions and
embeddings, models, health and metrics. Every failure a client can cause is an OpenAI-style JSON
error with a 4xx status; the engine thread does all model work."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hmac
import logging
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from fuel.ir.errors import FuelError
from fuel.serve import protocol
from fuel.serve.engine import Engine, Job, QueueFull
from fuel.serve.protocol import APIError

DEFAULT_MAX_BODY_BYTES = 1 << 20
RETRY_AFTER_S = 1
log = logging.getLogger("fuel.serve")


@dataclass
class ServerSettings:
    """What the app serves and how: the engine (which holds the models), the names clients use
    for the models, the API key (None: no auth) and the request body limit."""

    engine: Engine
    model_name: str
    embedding_name: str | None = None
    api_key: str | None = None
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES


def error_response(error: APIError) -> JSONResponse:
    return JSONResponse(error.body(), status_code=error.status, headers=error.headers)


async def read_body(request: Request, limit: int) -> bytes:
    """The whole body, or a 413 as soon as it is known to exceed ``limit`` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise APIError(400, f"the Content-Length header is not a number: {declared!r}")
        if int(declared) > limit:
            raise APIError(413, f"the request body has {declared} bytes; the limit is {limit}",
                           code="request_too_large")
    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise APIError(413, f"the request body exceeds the limit of {limit} bytes",
                               code="request_too_large")
            chunks.append(chunk)
    except ClientDisconnect:  # gone, or closed by fuel.serve.limits' body deadline
        raise APIError(408, "the request body did not arrive") from None
    return b"".join(chunks)


async def wait_for_disconnect(receive) -> None:
    """Return when the client goes away (the body has been read already)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


DISCONNECTED = ("disconnected",)  # put into a request's event queue when its client leaves


def watch_disconnect(receive, events: asyncio.Queue) -> asyncio.Future:
    """A task that puts DISCONNECTED into ``events`` when the client goes away, so the
    request's reader waits on its queue alone (no task and wait set per event)."""

    async def watch() -> None:
        await wait_for_disconnect(receive)
        events.put_nowait(DISCONNECTED)

    return asyncio.ensure_future(watch())


async def take_events(events: asyncio.Queue) -> list:
    """The events waiting in ``events``, at least one (waits for it): a step's tokens of
    several choices, or a token with its request's last events, are handled together."""
    batch = [await events.get()]
    while not events.empty():
        batch.append(events.get_nowait())
    return batch


class Mailbox:
    """Hands the engine thread's events to one event loop's request queues: posts made while
    a delivery is pending join it, so a step's tokens for many requests wake the loop once
    (one ``call_soon_threadsafe`` instead of one per token and request)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._lock = threading.Lock()
        self._items: list = []
        self._scheduled = False

    def post(self, queue: asyncio.Queue, item) -> None:
        """Queue ``item`` for ``queue`` (any thread)."""
        with self._lock:
            self._items.append((queue, item))
            if self._scheduled:
                return
            self._scheduled = True
        try:
            self.loop.call_soon_threadsafe(self._deliver)
        except RuntimeError:  # the loop closed: nobody listens
            pass

    def _deliver(self) -> None:
        with self._lock:
            items, self._items, self._scheduled = self._items, [], False
        for queue, item in items:
            queue.put_nowait(item)


class EventStream(Response):
    """A server-sent event stream of the chunks of a request's jobs (one per choice); a client
    that disconnects cancels them at once (their slots are free before the engine's next
    step)."""

    def __init__(self, jobs: list[Job], events: asyncio.Queue, render: Callable) -> None:
        self.jobs, self.events, self.render = jobs, events, render
        self.status_code = 200
        self.background = None

    async def __call__(self, scope, receive, send) -> None:
        watcher = watch_disconnect(receive, self.events)
        try:
            await send({"type": "http.response.start", "status": 200, "headers": [
                (b"content-type", b"text/event-stream; charset=utf-8"),
                (b"cache-control", b"no-cache"), (b"x-accel-buffering", b"no")]})
            running = len(self.jobs)
            failed = False
            while running and not failed:
                body = []
                for event in await take_events(self.events):
                    if event is DISCONNECTED:
                        return  # the client left
                    index, kind, payload = event
                    running -= kind in ("done", "error")
                    body += [protocol.server_event(data)
                             for data in self.render(index, kind, payload, running == 0)]
                    if kind == "error" or not running:
                        failed = kind == "error"
                        break
                if body:  # the events that arrived together, one write
                    await send({"type": "http.response.body", "body": b"".join(body),
                                "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:
            pass  # the connection broke while sending
        finally:
            for job in self.jobs:
                job.cancel()  # a no-op for a finished job; frees the slot of a live one
            watcher.cancel()


def build_app(settings: ServerSettings) -> Starlette:
    """The starlette application serving ``settings``."""
    engine = settings.engine
    model = engine.model
    context = model.config.context_length

    def endpoint(path: str, handler: Callable[[Request], Awaitable[Response]],
                 methods: list[str], public: bool = False) -> Route:
        async def guarded(request: Request) -> Response:
            try:
                if not public:
                    authorize(request)
                response = await handler(request)
            except APIError as error:
                response = error_response(error)
            except Exception:  # never a dead server: log it, answer 500
                log.exception("unexpected error in %s", path)
                response = error_response(APIError(500, "internal server error; see the "
                                                        "server log", kind="server_error"))
            engine.metrics.count_request(path, response.status_code)
            return response

        return Route(path, guarded, methods=methods)

    def authorize(request: Request) -> None:
        if settings.api_key is None:
            return
        given = request.headers.get("authorization", "")
        scheme, _, token = given.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
                token.strip().encode(), settings.api_key.encode()):
            raise APIError(401, "a valid API key is required: send 'Authorization: Bearer "
                                "KEY'", code="invalid_api_key")

    mailboxes: list[Mailbox] = []  # the serving loop's (one; a new loop gets its own)

    def submit(*jobs: Job) -> asyncio.Queue:
        """Queue ``jobs``; their events arrive as (job's index, kind, payload)."""
        events: asyncio.Queue = asyncio.Queue()
        loop = asyncio.get_running_loop()
        if not mailboxes or mailboxes[0].loop is not loop:
            mailboxes[:] = [Mailbox(loop)]
        mailbox = mailboxes[0]

        def emitter(index: int):
            def emit(kind: str, payload) -> None:
                mailbox.post(events, (index, kind, payload))

            return emit

        for index, job in enumerate(jobs):
            job.emit = emitter(index)
            try:
                engine.submit(job)
            except QueueFull as error:
                for queued in jobs[:index]:
                    queued.cancel()
                raise APIError(503, str(error), code="server_overloaded", kind="server_error",
                               headers={"Retry-After": str(RETRY_AFTER_S)}) from None
        return events

    async def collect(request: Request, jobs: list[Job], events: asyncio.Queue) -> list:
        """Wait for the jobs' events (the client leaving cancels them): per job (pieces, done
        payload, log-probability entries)."""
        watcher = watch_disconnect(request.receive, events)
        results: list = [([], None, []) for _ in jobs]
        running = len(jobs)
        try:
            while running:
                for event in await take_events(events):
                    if event is DISCONNECTED:
                        raise APIError(499, "the client closed the connection")
                    index, kind, payload = event
                    pieces, _, logprobs = results[index]
                    if kind == "error":
                        raise APIError(500, payload, kind="server_error")
                    if kind in ("done", "embeddings"):
                        results[index] = (pieces, payload, logprobs)
                        running -= 1
                    elif kind == "logprobs":
                        logprobs.append(payload)
                    else:
                        pieces.append(payload)
            return results
        finally:
            for job in jobs:
                job.cancel()
            watcher.cancel()

    async def generate(request: Request, chat: bool) -> Response:
        body = protocol.parse_json(await read_body(request, settings.max_body_bytes))
        options = protocol.parse_generation(body, context)
        if options.model != settings.model_name:
            raise protocol.unknown_model(options.model, [settings.model_name])
        try:
            if chat:
                ids = model.encode_chat(body.get("messages"))
            else:
                ids = model.encode(protocol.parse_prompt(body))
        except FuelError as error:
            raise APIError(400, str(error), param="messages" if chat else "prompt") from None
        if len(ids) >= context:
            raise protocol.context_error(len(ids), context)
        if options.schema is not None:
            try:
                engine.grammars.grammar(options.schema)
            except FuelError as error:
                raise APIError(400, str(error), param="response_format") from None
        jobs = [Job(emit=None, ids=ids, max_tokens=min(options.max_tokens, context - len(ids)),
                    sampling=sampling, stop=options.stop, schema=options.schema,
                    logprobs=options.logprobs)
                for sampling in options.choice_samplings()]

        def text_of(token: int) -> str:
            return model.tokenizer.decode([token], skip_special_tokens=False)

        def logprobs_of(entries: list) -> dict | None:
            return protocol.logprobs_body(chat, entries, text_of)

        events = submit(*jobs)
        identifier = protocol.new_id("chatcmpl" if chat else "cmpl")
        name = settings.model_name
        if options.stream:
            first = [True] * len(jobs)
            pending: list[list] = [[] for _ in jobs]
            usage = [0, 0]

            def render(index: int, kind: str, payload, last: bool) -> list:
                if kind == "logprobs":  # sent with the choice's next chunk
                    pending[index].append(payload)
                    return []
                entries, pending[index] = pending[index], []
                if kind == "piece":
                    chunk = protocol.chunk_body(chat, identifier, name, payload,
                                                first=first[index], index=index,
                                                logprobs=logprobs_of(entries))
                    first[index] = False
                    return [chunk]
                if kind == "error":
                    return [APIError(500, payload, kind="server_error").body(), "[DONE]"]
                finish_reason, prompt_tokens, completion_tokens = payload
                usage[0] = prompt_tokens
                usage[1] += completion_tokens
                chunks = [protocol.chunk_body(chat, identifier, name, None, finish_reason,
                                              first=first[index], index=index,
                                              logprobs=logprobs_of(entries))]
                if not last:
                    return chunks
                if options.include_usage:
                    chunks.append(protocol.usage_chunk(chat, identifier, name, *usage))
                return chunks + ["[DONE]"]

            return EventStream(jobs, events, render)
        results = await collect(request, jobs, events)
        choices = [protocol.choice_body(chat, index, "".join(pieces), done[0],
                                        logprobs_of(entries))
                   for index, (pieces, done, entries) in enumerate(results)]
        prompt_tokens = results[0][1][1]
        completion_tokens = sum(done[2] for _, done, _ in results)
        return JSONResponse(protocol.completion_body(chat, identifier, name, choices,
                                                     prompt_tokens, completion_tokens))

    async def chat_completions(request: Request) -> Response:
        return await generate(request, chat=True)

    async def completions(request: Request) -> Response:
        return await generate(request, chat=False)

    async def embeddings(request: Request) -> Response:
        body = protocol.parse_json(await read_body(request, settings.max_body_bytes))
        name, texts, encoding = protocol.parse_embedding_input(body)
        if engine.encoder is None or name != settings.embedding_name:
            known = [settings.embedding_name] if engine.encoder is not None else []
            raise protocol.unknown_model(name, known)
        job = Job(emit=None, texts=texts)
        (_, vectors, _), = await collect(request, [job], submit(job))
        tokens = sum(len(e.ids) for e in engine.encoder.tokenizer.encode_batch(texts))
        data = []
        for index, row in enumerate(vectors):
            value = (base64.b64encode(row.astype("<f4").tobytes()).decode()
                     if encoding == "base64" else row.tolist())
            data.append({"object": "embedding", "index": index, "embedding": value})
        return JSONResponse({"object": "list", "data": data, "model": name,
                             "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})

    async def models(request: Request) -> Response:
        names = [settings.model_name] + ([settings.embedding_name]
                                         if engine.encoder is not None else [])
        return JSONResponse({"object": "list", "data": [
            {"id": name, "object": "model", "created": 0, "owned_by": "fuel"}
            for name in names]})

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok", "queue_depth": engine.queue_depth,
                             "active": engine.active_count})

    async def metrics(request: Request) -> Response:
        return PlainTextResponse(engine.metrics.render(engine.slots),
                                 media_type="text/plain; version=0.0.4")

    async def http_error(request: Request, error: HTTPException) -> Response:
        message = {404: f"no such endpoint: {request.url.path}",
                   405: f"{request.method} is not allowed on {request.url.path}"}.get(
            error.status_code, str(error.detail))
        engine.metrics.count_request("other", error.status_code)
        return error_response(APIError(error.status_code, message))

    @contextlib.asynccontextmanager
    async def lifespan(app):
        engine.start()
        try:
            yield
        finally:
            engine.stop()

    routes = [
        endpoint("/v1/chat/completions", chat_completions, ["POST"]),
        endpoint("/v1/completions", completions, ["POST"]),
        endpoint("/v1/embeddings", embeddings, ["POST"]),
        endpoint("/v1/models", models, ["GET"]),
        endpoint("/health", health, ["GET"], public=True),
        endpoint("/metrics", metrics, ["GET"], public=True),
    ]
    return Starlette(routes=routes, exception_handlers={HTTPException: http_error},
                     lifespan=lifespan)
