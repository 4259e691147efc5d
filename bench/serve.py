"""Load test of ``fuel serve``: many concurrent streaming clients against one server on
127.0.0.1, bounded in count and time.

Starts the server itself (SmolLM2-135M-Instruct unless --model), takes each prompt's answer from
a single client first (the reference, and the single-client rate), then runs --clients
concurrent streaming chat requests and prints requests/s, aggregate tokens/s, p50/p95 time to
first token and the aggregate rate against the single client's. Every answer must equal its
reference (none lost or garbled), and the server's resident memory after the load is compared
with its baseline after a warm-up.

    python bench/serve.py [--clients 32] [--max-tokens 32] [--slots 4] [--model GGUF]
                          [--blas-threads N] [--no-batching]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import select
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
QUESTIONS = [
    "What is the capital of France?", "Name three colours.", "What is 2 + 2?",
    "Give me a synonym for happy.", "What do bees make?", "Say hello in Spanish.",
    "What is the opposite of cold?", "Name a planet.",
]
TOTAL_TIMEOUT_S = 900  # the whole run stops here, whatever happens


def start_server(options: argparse.Namespace) -> tuple[subprocess.Popen, str, str]:
    """Run ``python -m fuel serve`` on a free loopback port; (process, base URL, model)."""
    command = [sys.executable, "-m", "fuel", "serve", "--host", "127.0.0.1", "--port", "0",
               "--slots", str(options.slots), "--max-queue", str(options.clients * 2),
               "--embedding-model", "none"]
    if options.model:
        command += ["--model", options.model]
    if options.no_batching:
        command.append("--no-batching")
    environment = dict(os.environ, PYTHONPATH=str(ROOT))
    if options.blas_threads:
        environment["OPENBLAS_NUM_THREADS"] = environment["OMP_NUM_THREADS"] = \
            str(options.blas_threads)
    process = subprocess.Popen(command, cwd=ROOT, env=environment, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and process.poll() is None:
        ready, _, _ = select.select([process.stdout], [], [], 1.0)
        if ready:
            line = process.stdout.readline()
            if " on http://" in line:
                url = line.split(" on ", 1)[1].split()[0].removesuffix("/v1")
                model = line.split("fuel serve: ", 1)[1].split(" on ", 1)[0]
                return process, url, model.split(" and ")[0]
    process.kill()
    raise SystemExit("fuel serve did not start")


async def stream_chat(client: httpx.AsyncClient, url: str, model: str, question: str,
                      max_tokens: int) -> dict:
    """One streaming chat request: its text, tokens, time to first token and duration."""
    body = {"model": model, "messages": [{"role": "user", "content": question}],
            "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    started = time.perf_counter()
    first = None
    pieces, tokens, done = [], 0, False
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
                    if first is None:
                        first = time.perf_counter() - started
                    pieces.append(content)
    return {"text": "".join(pieces), "tokens": tokens, "ttft": first or 0.0,
            "seconds": time.perf_counter() - started, "done": done}


async def metric(client: httpx.AsyncClient, url: str, name: str) -> float:
    text = (await client.get(url + "/metrics")).text
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return float("nan")


async def run(options: argparse.Namespace, url: str, model: str) -> int:
    limits = httpx.Limits(max_connections=options.clients + 4)
    timeout = httpx.Timeout(TOTAL_TIMEOUT_S)
    async with httpx.AsyncClient(limits=limits, timeout=timeout) as client:
        questions = [QUESTIONS[i % len(QUESTIONS)] for i in range(options.clients)]
        # warm-up: every slot busy once, so that caches and captured steps exist
        await asyncio.gather(*(stream_chat(client, url, model, q, options.max_tokens)
                               for q in QUESTIONS[:options.slots]))
        baseline = await metric(client, url, "fuel_resident_memory_bytes")
        reference, single_tokens, single_seconds = {}, 0, 0.0
        for question in QUESTIONS:  # one client at a time: the reference answers and rate
            result = await stream_chat(client, url, model, question, options.max_tokens)
            reference[question] = result["text"]
            single_tokens += result["tokens"]
            single_seconds += result["seconds"]
        started = time.perf_counter()
        results = await asyncio.gather(*(stream_chat(client, url, model, q, options.max_tokens)
                                         for q in questions))
        elapsed = time.perf_counter() - started
        await asyncio.sleep(2.0)  # the engine releases memory once it has gone idle
        after = await metric(client, url, "fuel_resident_memory_bytes")
    failures = [r.get("error", "incomplete") for r in results
                if "error" in r or not r["done"]]
    garbled = [q for q, r in zip(questions, results)
               if "error" not in r and r["text"] != reference[q]]
    tokens = sum(r.get("tokens", 0) for r in results)
    first_tokens = sorted(r["ttft"] for r in results if "ttft" in r)
    single_rate = single_tokens / single_seconds
    aggregate = tokens / elapsed
    p95 = first_tokens[min(len(first_tokens) - 1, int(round(0.95 * (len(first_tokens) - 1))))]
    threads = options.blas_threads or "default"
    print(f"fuel serve, {model}, {options.slots} slots, {options.clients} concurrent streaming "
          f"clients x 1 chat request, max_tokens {options.max_tokens}, greedy, BLAS threads "
          f"{threads}, decode {'in turn' if options.no_batching else 'batched'}")
    print(f"{'requests':<34}{len(results):>10}")
    print(f"{'lost or failed':<34}{len(failures):>10}")
    print(f"{'answers differing from 1 client':<34}{len(garbled):>10}")
    print(f"{'wall time s':<34}{elapsed:>10.2f}")
    print(f"{'requests/s':<34}{len(results) / elapsed:>10.2f}")
    print(f"{'aggregate tokens/s':<34}{aggregate:>10.1f}")
    print(f"{'single client tokens/s':<34}{single_rate:>10.1f}")
    print(f"{'aggregate / single client':<34}{aggregate / single_rate:>10.2f}")
    print(f"{'time to first token p50 ms':<34}{statistics.median(first_tokens) * 1e3:>10.0f}")
    print(f"{'time to first token p95 ms':<34}{p95 * 1e3:>10.0f}")
    print(f"{'server memory before MiB':<34}{baseline / 2**20:>10.1f}")
    print(f"{'server memory after MiB':<34}{after / 2**20:>10.1f}")
    if failures or garbled:
        print(f"FAILED: {failures[:3]} {garbled[:3]}")
        return 1
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--model", default=None, help="a Llama GGUF (default SmolLM2)")
    parser.add_argument("--no-batching", action="store_true",
                        help="serve with decode steps in turn instead of batched")
    parser.add_argument("--blas-threads", type=int, default=None,
                        help="BLAS threads of the server (steadier on a busy machine: 1)")
    options = parser.parse_args()
    if not 1 <= options.clients <= 256:
        raise SystemExit("--clients must be in 1..256")
    process, url, model = start_server(options)
    try:
        return asyncio.run(asyncio.wait_for(run(options, url, model), TOTAL_TIMEOUT_S))
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


if __name__ == "__main__":
    sys.exit(main())
