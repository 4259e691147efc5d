"""``fuel serve`` under abuse on 127.0.0.1: idle connections, slowloris headers, slow bodies,
connections past the cap, a request for the most tokens with the longest prompt, and streaming
requests cancelled mid-way, all at once. Invariants (every wait bounded, no timing asserted):
the server's memory and thread count stay bounded, idle and slow connections are closed by
their deadlines, connections past the cap are closed at once, and a well-behaved client is
answered correctly throughout. bench/serve_abuse.py measures the well-behaved client's
latency under the same abuse against its unloaded latency."""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path

import pytest

from tests.serve.conftest import start_server

HEADER_TIMEOUT_S = 1.0
BODY_TIMEOUT_S = 2.0
MAX_CONNECTIONS = 128
WAIT_S = 30.0  # the bound on every wait of this file


def _status(pid: int) -> tuple[int, int]:
    """(resident KiB, threads) of a process, from /proc."""
    fields = dict(line.split(":", 1) for line in
                  Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]), int(fields["Threads"])


def _connect(address) -> socket.socket:
    connection = socket.create_connection(address, timeout=WAIT_S)
    connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return connection


def _closed_by_server(connection: socket.socket, wait: float) -> bool:
    """Whether the server closes ``connection`` within ``wait`` seconds."""
    connection.settimeout(wait)
    try:
        return connection.recv(1024) == b""
    except TimeoutError:
        return False
    except OSError:  # reset
        return True


def _drip(address, stop: threading.Event, closed: list, body: bool) -> None:
    """A slowloris client: a header (or, with ``body``, a declared body) one byte at a time."""
    connection = _connect(address)
    head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    if body:
        connection.sendall(head + b"Content-Length: 1000\r\n\r\n")
    else:
        connection.sendall(head[:20])
    try:
        while not stop.is_set():
            connection.sendall(b"x" if body else b"X-a: b\r\n"[:1])
            time.sleep(0.1)
    except OSError:
        closed.append(True)  # the server closed it while it dripped
    finally:
        connection.close()


@pytest.fixture(scope="module")
def guarded_server(chat_gguf, serve_cache):
    # --quiet: no access log into the pipe start_server stops reading (a full pipe blocks)
    running = start_server(chat_gguf, serve_cache, "--slots", "2", "--embedding-model", "none",
                           "--quiet",
                           "--max-connections", str(MAX_CONNECTIONS), "--header-timeout",
                           str(HEADER_TIMEOUT_S), "--body-timeout", str(BODY_TIMEOUT_S))
    yield running
    running.stop()


def test_server_under_abuse_stays_bounded_and_answers(guarded_server, local_model):
    httpx = pytest.importorskip("httpx")
    url, model = guarded_server.url, guarded_server.model
    host, port = url.removeprefix("http://").split(":")
    address = (host, int(port))
    chat = {"model": model, "messages": [{"role": "user", "content": "the cat"}],
            "max_tokens": 4, "temperature": 0}
    with httpx.Client(timeout=WAIT_S) as client:
        expected = client.post(f"{url}/v1/chat/completions", json=chat).json()
        assert expected["choices"][0]["message"]["content"] is not None
        baseline_kib, baseline_threads = _status(guarded_server.process.pid)

        # past the cap: of 2 * MAX_CONNECTIONS connections, the server closes the extra ones
        crowd = [_connect(address) for _ in range(2 * MAX_CONNECTIONS)]
        refused = sum(_closed_by_server(c, 0.05) for c in crowd)
        assert refused >= MAX_CONNECTIONS - 8, refused  # a few may be closing from before
        # the ones it kept are idle: closed by the header deadline
        kept = [c for c in crowd if c.fileno() != -1]
        assert all(_closed_by_server(c, HEADER_TIMEOUT_S + WAIT_S) for c in kept[:16])
        for connection in crowd:
            connection.close()

        stop, dripped_closed = threading.Event(), []
        drips = [threading.Thread(target=_drip, args=(address, stop, dripped_closed, i % 3 == 0))
                 for i in range(30)]
        idle = [_connect(address) for _ in range(40)]
        for thread in drips:
            thread.start()

        # streaming requests cancelled mid-way, interleaved with well-behaved requests
        def cancelled_stream() -> None:
            body = json.dumps({**chat, "stream": True, "max_tokens": 64}).encode()
            connection = _connect(address)
            connection.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                               b"Content-Type: application/json\r\nContent-Length: "
                               + str(len(body)).encode() + b"\r\n\r\n" + body)
            connection.recv(64)  # the first bytes of the stream, then leave
            connection.close()

        answers = []
        context = local_model.config.context_length
        long_prompt = "the " * (context - 40)
        for _ in range(3):
            streams = [threading.Thread(target=cancelled_stream) for _ in range(4)]
            for thread in streams:
                thread.start()
            answers.append(client.post(f"{url}/v1/chat/completions", json=chat).json())
            longest = client.post(f"{url}/v1/completions", json={
                "model": model, "prompt": long_prompt, "max_tokens": context})
            assert longest.status_code in (200, 400), longest.text
            for thread in streams:
                thread.join(WAIT_S)
        for answer in answers:  # the well-behaved client got the right answer every time
            assert answer["choices"][0]["message"] == expected["choices"][0]["message"]

        # slow headers and slow bodies were cut by their deadlines while they dripped
        deadline = time.monotonic() + WAIT_S
        while len(dripped_closed) < len(drips) and time.monotonic() < deadline:
            time.sleep(0.1)
        stop.set()
        for thread in drips:
            thread.join(WAIT_S)
        assert len(dripped_closed) == len(drips)
        assert all(_closed_by_server(c, HEADER_TIMEOUT_S + WAIT_S) for c in idle)
        for connection in idle:
            connection.close()

        # every cancelled stream left its slot; the server is bounded and still answers
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            health = client.get(f"{url}/health").json()
            if health["active"] == 0 and health["queue_depth"] == 0:
                break
            time.sleep(0.1)
        assert health["active"] == 0 and health["queue_depth"] == 0, health
        resident_kib, threads = _status(guarded_server.process.pid)
        assert resident_kib - baseline_kib < 200 * 1024, (baseline_kib, resident_kib)
        assert threads <= baseline_threads + 4, (baseline_threads, threads)
        final = client.post(f"{url}/v1/chat/completions", json=chat).json()
        assert final["choices"][0]["message"] == expected["choices"][0]["message"]
