"""Load test of ``fuel serve`` against llama-cpp-python's server, on one GGUF (SmolLM2-135M
Q4_1 unless --model), both on 127.0.0.1, every wait bounded.

Phases, each printed as a table row:
  1. one client: every (distinct) prompt asked alone, in turn: the reference answers and the
     single-client rate (streamed chat, greedy, --max-tokens answers);
  2. N concurrent streaming clients for each N of --clients (distinct prompts): aggregate
     tokens/s and its ratio to one client's, time to first token p50/p95, requests lost, and
     answers differing from the same question asked alone;
  3. a shared system prompt of about 500 tokens: time to first token of a second request
     (another question) against the first's;
  4. --json requests with a ``json_schema`` response format: how many parse and validate;
  5. the server's resident memory after a warm-up (every step shape once, then a rehearsal of
     phases 1, 2 and 4: the steady state its caches reach) and after the load;
  6. llama-cpp-python's server (``python -m llama_cpp.server``, same file, same threads): the
     one-client rate over the same prompts, when it is installed.

    python bench/serve.py [--clients 8,32] [--max-tokens 48] [--slots 32] [--model GGUF]
                          [--threads N] [--json 100] [--no-llama-cpp]
    python bench/serve.py --steps [--step-rows 1,8,32]   # one engine step of B rows, no server
    python bench/serve.py --kernels   # a step's quantized matmuls per tile, the multiply floor
    python bench/serve.py --profile [--step-rows 1,8,32]   # one step of B rows by kernel
    python bench/serve.py --engine [--clients 8,32]   # the load in-process, CPU per token
(those four: bench/serve_steps.py)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import select
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import serve_steps

ROOT = Path(__file__).resolve().parents[1]
TOPICS = [
    "the sea", "a forest", "the moon", "a city at night", "bees", "a mountain", "rain",
    "a library", "the desert", "a river", "winter", "a train journey", "the stars", "a garden",
    "an old house", "the wind", "a lighthouse", "autumn leaves", "a market", "the sun",
    "a bridge", "snow", "a cat", "a ship", "the ocean floor", "a volcano", "a meadow",
    "a castle", "the sky", "a waterfall", "an island", "a storm",
]
SYSTEM_SENTENCE = ("You are a careful assistant who answers briefly, names sources when it "
                   "can, and says so when it does not know. ")
JSON_MAX_TOKENS = 128  # room for the schemas' bounded records
TOTAL_TIMEOUT_S = 1800  # the whole run stops here, whatever happens


def progress(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_ready(process: subprocess.Popen, marker: str, what: str) -> str:
    """The first output line holding ``marker`` (the process's output is merged). Reads the
    pipe's bytes as they come (a buffered readline after select would leave a second line
    that arrived with the first unseen until more output came); afterwards a thread drains
    the pipe, so the server's log never fills it."""
    deadline = time.monotonic() + 300
    descriptor = process.stdout.fileno()
    pending, lines = b"", []
    while time.monotonic() < deadline and process.poll() is None:
        ready, _, _ = select.select([descriptor], [], [], 1.0)
        if not ready:
            continue
        data = os.read(descriptor, 65536)
        if not data:
            break
        *complete, pending = (pending + data).split(b"\n")
        for raw in complete:
            line = raw.decode(errors="replace")
            lines.append(line)
            if marker in line:
                threading.Thread(target=_drain, args=(descriptor,), daemon=True).start()
                return line
    process.kill()
    raise SystemExit(f"{what} did not start:\n{chr(10).join(lines[-20:])}")


def _drain(descriptor: int) -> None:
    try:
        while os.read(descriptor, 65536):
            pass
    except OSError:
        pass


def environment(options: argparse.Namespace) -> dict:
    values = dict(os.environ, PYTHONPATH=str(ROOT))
    threads = str(options.threads)
    values.update(FUEL_THREADS=threads, OMP_NUM_THREADS=threads, OPENBLAS_NUM_THREADS=threads)
    return values


def start_fuel(options: argparse.Namespace) -> tuple[subprocess.Popen, str, str]:
    """``python -m fuel serve`` on a free loopback port; (process, base URL, model name)."""
    command = [sys.executable, "-m", "fuel", "serve", "--host", "127.0.0.1", "--port", "0",
               "--slots", str(options.slots), "--token-budget", str(options.token_budget),
               "--max-queue", str(max(options.clients) * 2), "--embedding-model", "none"]
    if options.model:
        command += ["--model", options.model]
    if options.block_size:
        command += ["--block-size", str(options.block_size)]
    command += ["--activations", options.activations]
    process = subprocess.Popen(command, cwd=ROOT, env=environment(options),
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    line = wait_ready(process, " on http://", "fuel serve")
    url = line.split(" on ", 1)[1].split()[0].removesuffix("/v1")
    model = line.split("fuel serve: ", 1)[1].split(" on ", 1)[0]
    return process, url, model.split(" and ")[0]


def start_llama_cpp(options: argparse.Namespace, path: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    command = [sys.executable, "-m", "llama_cpp.server", "--model", path, "--host",
               "127.0.0.1", "--port", str(port), "--n_threads", str(options.threads),
               "--n_threads_batch", str(options.threads), "--n_ctx", "2048"]
    process = subprocess.Popen(command, env=environment(options), stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if httpx.get(url + "/v1/models", timeout=5).status_code == 200:
                return process, url
        except httpx.HTTPError:
            pass
        time.sleep(1.0)
    process.kill()
    raise SystemExit("llama_cpp.server did not start (python -m llama_cpp.server)")


def stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()


def messages(topic: str, system: str | None = None) -> list[dict]:
    chat = [{"role": "user", "content": f"Write a short paragraph about {topic}."}]
    return ([{"role": "system", "content": system}] if system else []) + chat


async def stream_chat(client: httpx.AsyncClient, url: str, model: str, chat: list[dict],
                      max_tokens: int, extra: dict | None = None) -> dict:
    """One streaming chat request: its text, tokens, time to first token and duration."""
    body = {"model": model, "messages": chat, "max_tokens": max_tokens, "temperature": 0,
            "stream": True, "stream_options": {"include_usage": True}, **(extra or {})}
    started = time.perf_counter()
    first = None
    pieces, tokens, chunks, done = [], 0, 0, False
    try:
        async with client.stream("POST", url + "/v1/chat/completions", json=body) as response:
            if response.status_code != 200:
                return {"error": f"HTTP {response.status_code}: {await response.aread()}"}
            async for line in response.aiter_lines():
                if not line.startswith("data: "):
                    continue
                data = line[len("data: "):]
                if data == "[DONE]":
                    done = True
                    break
                chunk = json.loads(data)
                if chunk.get("usage"):
                    tokens = chunk["usage"]["completion_tokens"]
                for choice in chunk.get("choices", []):
                    content = choice["delta"].get("content")
                    if content:
                        chunks += 1
                        if first is None:
                            first = time.perf_counter() - started
                        pieces.append(content)
    except httpx.HTTPError as error:
        return {"error": f"{type(error).__name__}: {error}"}
    # a server that leaves usage out (llama-cpp-python) streams a token per chunk
    return {"text": "".join(pieces), "tokens": tokens or chunks, "ttft": first or 0.0,
            "seconds": time.perf_counter() - started, "done": done}


async def metric(client: httpx.AsyncClient, url: str, name: str) -> float:
    text = (await client.get(url + "/metrics")).text
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return float("nan")


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(fraction * (len(ordered) - 1))))]


async def one_client(client, url, model, topics, max_tokens) -> tuple[dict, float]:
    """Each topic alone, in turn: the answers and the one-client tokens/s."""
    answers, tokens, seconds = {}, 0, 0.0
    for topic in topics:
        result = await stream_chat(client, url, model, messages(topic), max_tokens)
        if "error" in result:
            raise SystemExit(f"one-client request failed: {result['error']}")
        answers[topic] = result["text"]
        tokens += result["tokens"]
        seconds += result["seconds"]
    return answers, tokens / seconds


async def concurrent(client, url, model, topics, max_tokens, reference) -> dict:
    started = time.perf_counter()
    results = await asyncio.gather(*(stream_chat(client, url, model, messages(t), max_tokens)
                                     for t in topics))
    elapsed = time.perf_counter() - started
    lost = [r.get("error", "incomplete") for r in results if "error" in r or not r["done"]]
    differing = [t for t, r in zip(topics, results)
                 if "error" not in r and r["text"] != reference[t]]
    ttfts = [r["ttft"] for r in results if "ttft" in r]
    return {"clients": len(topics), "rate": sum(r.get("tokens", 0) for r in results) / elapsed,
            "p50": statistics.median(ttfts) if ttfts else float("nan"),
            "p95": percentile(ttfts, 0.95) if ttfts else float("nan"), "lost": lost,
            "differing": differing}


async def shared_prefix(client, url, model) -> tuple[float, float]:
    """TTFT of two requests sharing a ~500-token system prompt (after a warm-up request
    with another long system prompt, so no step shape is new)."""
    system = SYSTEM_SENTENCE * 20
    await stream_chat(client, url, model, messages("a lake", "Be terse. " * 250), 4)
    first = await stream_chat(client, url, model, messages("a cloud", system), 4)
    second = await stream_chat(client, url, model, messages("a field", system), 4)
    return first.get("ttft", float("nan")), second.get("ttft", float("nan"))


def schema_for(index: int) -> dict:
    """Distinct small schemas: an object with a few typed, required fields."""
    text = {"type": "string", "maxLength": 24}  # bounded, so answers end within max_tokens
    fields = [("name", text), ("age", {"type": "integer", "minimum": 0, "maximum": 150}),
              ("city", text), ("tags", {"type": "array", "items": text, "maxItems": 3}),
              ("score", {"type": "number"}), ("active", {"type": "boolean"})]
    chosen = [fields[(index + k) % len(fields)] for k in range(2 + index % 3)]
    return {"type": "object", "properties": dict(chosen), "required": [n for n, _ in chosen],
            "additionalProperties": False}


async def json_requests(client, url, model, count: int, max_tokens: int) -> tuple[int, int]:
    """``count`` json_schema requests (8 at a time): how many answers parse and validate."""
    import jsonschema

    valid = 0
    semaphore = asyncio.Semaphore(8)

    async def one(index: int) -> bool:
        schema = schema_for(index)
        extra = {"response_format": {"type": "json_schema", "json_schema": {
            "name": f"record{index}", "schema": schema, "strict": True}}}
        async with semaphore:
            chat = [{"role": "user", "content": f"Describe {TOPICS[index % 32]} as a JSON "
                                                f"record."}]
            result = await stream_chat(client, url, model, chat, max_tokens, extra)
        try:
            jsonschema.validate(json.loads(result.get("text", "")), schema)
            return True
        except (ValueError, jsonschema.ValidationError):
            return False

    outcomes = await asyncio.gather(*(one(i) for i in range(count)))
    valid = sum(outcomes)
    return valid, count


async def run_fuel(options, url, model) -> dict:
    limits = httpx.Limits(max_connections=max(options.clients) + 8)
    async with httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(TOTAL_TIMEOUT_S)) as client:
        topics = TOPICS[:max(options.clients)]
        progress("fuel serve: warming up")
        # warm-up: every step shape a run meets (one prompt alone, then each client count)
        await stream_chat(client, url, model, messages("a pond"), options.max_tokens)
        for count in options.clients:
            await asyncio.gather(*(stream_chat(client, url, model, messages(f"{t}s"),
                                               options.max_tokens) for t in topics[:count]))
        await stream_chat(client, url, model, messages("a pond", "Be kind. " * 250), 4)
        await asyncio.sleep(2.0)
        warmed = await metric(client, url, "fuel_resident_memory_bytes")
        # then a rehearsal of the load's phases (not the shared prefix, which must be new):
        # the server's caches (step captures of each row and logit-row bucket, at most
        # DEFAULT_KEPT_CAPTURES kept; llguidance's state) fill during a first pass of a load
        # and not in a second, so "before" is the steady state a served load returns to
        progress("fuel serve: rehearsing the load")
        reference, _ = await one_client(client, url, model, topics, options.max_tokens)
        for count in options.clients:
            await concurrent(client, url, model, topics[:count], options.max_tokens, reference)
        if options.json:
            await json_requests(client, url, model, options.json, JSON_MAX_TOKENS)
        await asyncio.sleep(2.0)
        before = await metric(client, url, "fuel_resident_memory_bytes")
        progress("fuel serve: one client")
        reference, single = await one_client(client, url, model, topics, options.max_tokens)
        progress("fuel serve: concurrent clients")
        results = [await concurrent(client, url, model, topics[:n], options.max_tokens,
                                    reference) for n in options.clients]
        progress("fuel serve: shared prefix")
        first, second = await shared_prefix(client, url, model)
        progress("fuel serve: json_schema")
        valid = (await json_requests(client, url, model, options.json, JSON_MAX_TOKENS)
                 if options.json else None)
        await asyncio.sleep(2.0)  # the engine releases memory once it has gone idle
        after = await metric(client, url, "fuel_resident_memory_bytes")
    return {"single": single, "results": results, "prefix": (first, second),
            "json": valid, "memory": (warmed, before, after), "topics": topics}


async def run_llama_cpp(options, url, topics) -> float:
    async with httpx.AsyncClient(timeout=httpx.Timeout(TOTAL_TIMEOUT_S)) as client:
        await stream_chat(client, url, "model", messages("a pond"), options.max_tokens)
        _, rate = await one_client(client, url, "model", topics, options.max_tokens)
    return rate


def report(options, model, fuel_run: dict) -> int:
    single = fuel_run["single"]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"fuel serve, {model}, {options.slots} slots, token budget {options.token_budget}, "
          f"streamed chat, greedy, max_tokens {options.max_tokens}, {options.threads} threads, "
          f"distinct prompts; load average {load:.2f} on {os.cpu_count()} cores")
    print(f"{'clients':>8}{'tokens/s':>11}{'x 1 client':>12}{'TTFT p50 ms':>13}"
          f"{'TTFT p95 ms':>13}{'lost':>6}{'differ':>8}")
    print(f"{1:>8}{single:>11.1f}{1.0:>12.2f}{'':>13}{'':>13}{0:>6}{0:>8}")
    failed = False
    for row in fuel_run["results"]:
        print(f"{row['clients']:>8}{row['rate']:>11.1f}{row['rate'] / single:>12.2f}"
              f"{row['p50'] * 1e3:>13.0f}{row['p95'] * 1e3:>13.0f}{len(row['lost']):>6}"
              f"{len(row['differing']):>8}")
        failed |= bool(row["lost"] or row["differing"])
    first, second = fuel_run["prefix"]
    print(f"shared ~500-token system prompt: TTFT first {first * 1e3:.0f} ms, second "
          f"{second * 1e3:.0f} ms, ratio {second / first:.2f}")
    if fuel_run["json"] is not None:
        valid, count = fuel_run["json"]
        print(f"json_schema requests: {valid} of {count} parse and validate")
    warmed, before, after = fuel_run["memory"]
    print(f"server memory: before {before / 2**20:.1f} MiB, after {after / 2**20:.1f} MiB "
          f"({(after / before - 1) * 100:+.1f}%); after the shapes' warm-up "
          f"{warmed / 2**20:.1f} MiB, which the rehearsal grew {(before / warmed - 1) * 100:+.1f}%")
    for row in fuel_run["results"]:
        if row["lost"] or row["differing"]:
            print(f"FAILED at {row['clients']} clients: {row['lost'][:3]} "
                  f"{row['differing'][:3]}")
    return 1 if failed else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", default="8,32",
                        help="comma-separated concurrent client counts (at most 32)")
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--slots", type=int, default=32)
    parser.add_argument("--token-budget", type=int, default=64)
    parser.add_argument("--model", default=None, help="a Llama GGUF (default SmolLM2 Q4_1)")
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)),
                        help="threads of both servers (default: this process's cores)")
    parser.add_argument("--json", type=int, default=100,
                        help="json_schema requests to validate (0: none)")
    parser.add_argument("--no-llama-cpp", action="store_true",
                        help="skip llama-cpp-python's server")
    parser.add_argument("--steps", action="store_true",
                        help="only time one engine step of B rows in-process (no server)")
    parser.add_argument("--step-rows", default="1,8,32", help="the B values of --steps")
    parser.add_argument("--kernels", action="store_true",
                        help="only time a step's quantized matmuls per tile and the core's "
                             "multiply floor (no server)")
    parser.add_argument("--engine", action="store_true",
                        help="only run the load in-process on the engine (no HTTP, one "
                             "thread): CPU time per token at each client count")
    parser.add_argument("--block-size", type=int, default=None,
                        help="positions per KV block (default: the server's)")
    parser.add_argument("--activations", choices=("int8", "int16"), default="int8",
                        help="fuel's serving precision (fuel serve --activations; --steps and "
                             "--profile too)")
    parser.add_argument("--profile", action="store_true",
                        help="only profile one engine step of each --step-rows B by kernel "
                             "(fuel.profile, one thread, no server)")
    options = parser.parse_args()
    if options.steps:
        return serve_steps.step_ratios(options, environment(options))
    if options.kernels:
        return serve_steps.kernel_ratios(options, environment(options))
    if options.profile:
        return serve_steps.step_profiles(options, environment(options))
    options.clients = [int(n) for n in options.clients.split(",")]
    if not all(1 <= n <= len(TOPICS) for n in options.clients):
        raise SystemExit(f"--clients must be in 1..{len(TOPICS)}")
    if options.engine:
        return serve_steps.engine_ratios(options, environment(options),
                                         TOPICS[:max(options.clients)])
    progress("starting fuel serve")
    process, url, model = start_fuel(options)
    try:
        fuel_run = asyncio.run(asyncio.wait_for(run_fuel(options, url, model),
                                                TOTAL_TIMEOUT_S))
    finally:
        stop(process)
    failed = report(options, model, fuel_run)
    if not options.no_llama_cpp:
        import importlib.util

        if importlib.util.find_spec("llama_cpp") is None:
            print("llama-cpp-python is not installed: no llama.cpp server row")
        else:
            from fuel.models.common import model_file
            from fuel.models.llama import DEFAULT_FILE, DEFAULT_PACKAGE

            path = str(model_file(options.model, DEFAULT_PACKAGE, DEFAULT_FILE, "the GGUF"))
            progress("starting llama_cpp.server")
            process, url = start_llama_cpp(options, path)
            try:
                rate = asyncio.run(asyncio.wait_for(
                    run_llama_cpp(options, url, fuel_run["topics"]), TOTAL_TIMEOUT_S))
            finally:
                stop(process)
            print(f"llama-cpp-python server, 1 client: {rate:.1f} tokens/s; fuel 1 client / "
                  f"llama.cpp {fuel_run['single'] / rate:.2f}")
    return failed


if __name__ == "__main__":
    sys.exit(main())
