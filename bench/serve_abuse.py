"""A well-behaved client's latency on ``fuel serve`` alone and under abuse, as a ratio.

    python bench/serve_abuse.py                      # a tiny random Llama, 20 requests each
    python bench/serve_abuse.py --model smollm.gguf --requests 10

The abuse runs for the whole second phase: idle connections, slowloris headers and slow bodies
(one byte every 0.1 s, reopened when the server cuts them), and streaming requests cancelled
after their first bytes. The well-behaved client sends the same chat request (greedy, a few
tokens) one at a time; the script prints the median latency of each phase and their ratio
(issue 33's target: at most 2x), with the server's resident memory and thread count before and
after. The machine's load changes both phases alike; run it on a quiet machine for numbers to
quote.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def start(model: Path, cache: Path, options: list[str]) -> tuple[subprocess.Popen, str]:
    """``fuel serve`` on a free port; ``--quiet``: its stdout is a pipe read only until the
    address line, and an access log line per request would fill it and block the server."""
    environment = dict(os.environ, FUEL_CACHE_DIR=str(cache), PYTHONPATH=str(ROOT))
    process = subprocess.Popen(
        [sys.executable, "-m", "fuel", "serve", "--model", str(model), "--port", "0",
         "--embedding-model", "none", "--quiet", *options], cwd=ROOT, env=environment,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if select.select([process.stdout], [], [], 1.0)[0]:
            line = process.stdout.readline()
            if " on http://" in line:
                return process, line.split(" on ", 1)[1].split()[0].removesuffix("/v1")
            if not line:
                break
    process.kill()
    raise SystemExit("fuel serve did not start")


def status(pid: int) -> tuple[int, int]:
    fields = dict(line.split(":", 1) for line in
                  Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]), int(fields["Threads"])


def abuse(address, stop: threading.Event, kind: str, body: bytes, pause: float) -> None:
    """One abusive client, reconnecting whenever the server cuts it, until ``stop`` (a
    canceller waits ``pause`` seconds between its streams)."""
    while not stop.is_set():
        try:
            connection = socket.create_connection(address, timeout=5)
            if kind == "idle":
                connection.recv(1)  # until the server closes it
            elif kind == "cancel":
                connection.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                                   b"Content-Type: application/json\r\nContent-Length: "
                                   + str(len(body)).encode() + b"\r\n\r\n" + body)
                connection.recv(64)
                time.sleep(pause)
            else:
                head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                connection.sendall(head + (b"Content-Length: 1000\r\n\r\n" if kind == "body"
                                           else b""))
                while not stop.is_set():
                    connection.sendall(b"x")
                    time.sleep(0.1)
            connection.close()
        except OSError:
            time.sleep(0.05)


def latencies(client, url: str, request: dict, count: int) -> list[float]:
    times = []
    for _ in range(count):
        started = time.perf_counter()
        response = client.post(f"{url}/v1/chat/completions", json=request)
        response.raise_for_status()
        times.append(time.perf_counter() - started)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, help="a Llama GGUF (default: a tiny random one)")
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--idle", type=int, default=200, help="idle connections")
    parser.add_argument("--slow", type=int, default=40, help="slowloris clients (headers, bodies)")
    parser.add_argument("--cancellers", type=int, default=4, help="cancelled-stream clients")
    parser.add_argument("--cancel-pause", type=float, default=0.25, metavar="S",
                        help="seconds each canceller waits between its streams (0: back to "
                             "back, four clients hammering the two slots)")
    args = parser.parse_args()
    import httpx

    folder = Path(tempfile.mkdtemp(prefix="fuel-serve-abuse-"))
    model = args.model
    if model is None:
        sys.path.insert(0, str(ROOT / "tests" / "models"))
        from tiny_gguf import CHATML_TEMPLATE, TinyLlama, write_tiny_llama

        model = write_tiny_llama(folder / "tiny-chat.gguf",
                                 TinyLlama(context=256, chat_template=CHATML_TEMPLATE))
    process, url = start(model, folder / "cache", ["--slots", "2", "--header-timeout", "2",
                                                   "--body-timeout", "4"])
    host, port = url.removeprefix("http://").split(":")
    address = (host, int(port))
    name = model.name.removesuffix(".gguf")
    request = {"model": name, "messages": [{"role": "user", "content": "the cat"}],
               "max_tokens": 8, "temperature": 0}
    stream = json.dumps({**request, "stream": True, "max_tokens": 64}).encode()
    try:
        with httpx.Client(timeout=120) as client:
            latencies(client, url, request, 3)  # warm: kernels, plans
            before = status(process.pid)
            alone = latencies(client, url, request, args.requests)
            stop = threading.Event()
            kinds = (["idle"] * args.idle + ["headers", "body"] * (args.slow // 2)
                     + ["cancel"] * args.cancellers)
            threads = [threading.Thread(target=abuse, args=(address, stop, kind, stream,
                                                             args.cancel_pause),
                                        daemon=True) for kind in kinds]
            for thread in threads:
                thread.start()
            time.sleep(1.0)
            abused = latencies(client, url, request, args.requests)
            after = status(process.pid)
            stop.set()
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            output = process.stdout.read()
            print(f"fuel serve did not stop within 30 s of SIGTERM; its output:\n{output[-3000:]}")
            process.wait(timeout=30)
    load = os.getloadavg()[0]
    ratio = statistics.median(abused) / statistics.median(alone)
    print(f"well-behaved chat request, median of {args.requests}: alone "
          f"{statistics.median(alone) * 1e3:.1f} ms, under abuse "
          f"{statistics.median(abused) * 1e3:.1f} ms ({len(kinds)} abusive clients): "
          f"{ratio:.2f}x (target <= 2x; cancel pause {args.cancel_pause} s; load average "
          f"{load:.1f})")
    print(f"server: resident {before[0] / 1024:.0f} -> {after[0] / 1024:.0f} MiB, threads "
          f"{before[1]} -> {after[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
