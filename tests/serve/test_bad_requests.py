"""Bad requests get OpenAI-style JSON errors with a 4xx status, never a 500 or a dead server;
past the queue limit a request gets 503 with Retry-After; a client killed mid-stream frees its
slot; the API key is checked. After all of it the server still answers correctly."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from tests.serve.conftest import start_server

POLL_LIMIT = 300  # bounded waits: at most this many polls of POLL_STEP_S
POLL_STEP_S = 0.1


@pytest.fixture(scope="module")
def http():
    httpx = pytest.importorskip("httpx")
    with httpx.Client(timeout=60) as client:
        yield client


def _cases(model: str) -> list:
    chat = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
    return [
        ("/v1/chat/completions", b"{not json", 400, None),
        ("/v1/chat/completions", b"\xff\xfe", 400, None),
        ("/v1/chat/completions", json.dumps([1, 2]).encode(), 400, None),
        ("/v1/chat/completions", {**chat, "max_tokens": "5"}, 400, "max_tokens"),
        ("/v1/chat/completions", {**chat, "temperature": "hot"}, 400, "temperature"),
        ("/v1/chat/completions", {**chat, "stream": "yes"}, 400, "stream"),
        ("/v1/chat/completions", {**chat, "seed": 1.5}, 400, "seed"),
        ("/v1/chat/completions", {**chat, "stop": [1, 2]}, 400, "stop"),
        ("/v1/chat/completions", {**chat, "top_p": 0}, 400, None),
        ("/v1/chat/completions", {**chat, "n": 17}, 400, "n"),
        ("/v1/chat/completions", {**chat, "n": 0}, 400, "n"),
        ("/v1/chat/completions", {**chat, "response_format": "json"}, 400, "response_format"),
        ("/v1/chat/completions", {**chat, "top_logprobs": 2}, 400, "top_logprobs"),
        ("/v1/chat/completions", {**chat, "logprobs": True, "top_logprobs": 50}, 400,
         "top_logprobs"),
        ("/v1/completions", {"model": model, "prompt": "a", "logprobs": -1}, 400, "logprobs"),
        ("/v1/chat/completions", {**chat, "response_format": {"type": "xml"}}, 400,
         "response_format"),
        ("/v1/chat/completions", {**chat, "response_format": {"type": "json_schema"}}, 400,
         "response_format"),
        ("/v1/chat/completions", {**chat, "response_format": {
            "type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "objectx"}}}},
         400, "response_format"),
        ("/v1/chat/completions", {"model": model, "messages": "hi"}, 400, "messages"),
        ("/v1/chat/completions", {"model": model, "messages": [{"role": "x", "content": "a"}]},
         400, "messages"),
        ("/v1/chat/completions", {"messages": chat["messages"]}, 400, "model"),
        ("/v1/chat/completions", {**chat, "model": "gpt-4o"}, 404, "model"),
        ("/v1/chat/completions", {**chat, "max_tokens": 0}, 400, "max_tokens"),
        ("/v1/chat/completions", {**chat, "max_tokens": 10**9}, 400, "max_tokens"),
        ("/v1/completions", {"model": model, "prompt": "x" * 400}, 400, None),
        ("/v1/completions", {"model": model, "prompt": 42}, 400, "prompt"),
        ("/v1/completions", {"model": model, "prompt": ""}, 400, "prompt"),
        ("/v1/embeddings", {"model": "nope", "input": "a"}, 404, "model"),
        ("/v1/embeddings", {"model": model, "input": [1, 2]}, 400, "input"),
        ("/v1/completions", b"{" + b" " * 70_000 + b"}", 413, None),
    ]


def _check_error(response, status: int, param) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert isinstance(error["message"], str) and error["message"]
    assert error["type"] in ("invalid_request_error", "server_error")
    if param is not None:
        assert error["param"] == param
    return error


def _wait_until_idle(http, url: str) -> dict:
    for _ in range(POLL_LIMIT):
        health = http.get(url + "/health").json()
        if health["active"] == 0 and health["queue_depth"] == 0:
            return health
        time.sleep(POLL_STEP_S)
    pytest.fail(f"the server never went idle: {health}")


def _metric(http, url: str, name: str) -> float:
    for line in http.get(url + "/metrics").text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} missing from /metrics")


def test_every_malformed_request_gets_a_json_4xx(server, http):
    for path, body, status, param in _cases(server.model):
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        response = http.post(server.url + path, content=content,
                             headers={"content-type": "application/json"})
        error = _check_error(response, status, param)
        if b"x" * 400 in content:
            assert error["code"] == "context_length_exceeded"
    _check_error(http.get(server.url + "/v1/nothing"), 404, None)
    _check_error(http.get(server.url + "/v1/chat/completions"), 405, None)
    metrics = http.get(server.url + "/metrics").text
    assert 'status="500"' not in metrics


def test_the_server_answers_correctly_after_the_bad_requests(server, http, local_model):
    test_every_malformed_request_gets_a_json_4xx(server, http)
    answer = http.post(server.url + "/v1/completions", json={
        "model": server.model, "prompt": "the cat", "max_tokens": 8, "temperature": 0})
    assert answer.status_code == 200
    expected = "".join(local_model.generate("the cat", 8))
    assert answer.json()["choices"][0]["text"] == expected


# The busy server's model has no EOS token, so this request keeps its slot for all its 4000
# tokens (seconds of work) until the client is killed.
KILLED_CLIENT = """
import sys, httpx
with httpx.stream("POST", sys.argv[1] + "/v1/completions", timeout=60,
                  headers={"authorization": "Bearer " + sys.argv[2]},
                  json={"model": sys.argv[3], "prompt": "in", "max_tokens": 4000,
                        "stream": True, "temperature": 0}) as response:
    print("streaming" if response.status_code == 200 else response.status_code, flush=True)
    sys.stdin.read()  # hold the connection open until killed
"""


@pytest.fixture(scope="module")
def busy_server(tiny_gguf_long, serve_cache):
    """One slot, one queue place, a model without EOS and a long context (a generation that
    lasts seconds), an API key."""
    running = start_server(tiny_gguf_long, serve_cache, "--slots", "1", "--max-queue", "1",
                           "--embedding-model", "none", "--api-key", "s3cret")
    yield running
    running.stop()


@pytest.fixture(scope="module")
def tiny_gguf_long(tmp_path_factory):
    from tests.models.tiny_gguf import CHATML_TEMPLATE, TinyLlama, write_tiny_llama

    folder = tmp_path_factory.mktemp("long-model")
    return write_tiny_llama(folder / "tiny-long.gguf",
                            TinyLlama(context=8192, chat_template=CHATML_TEMPLATE, eos=False))


def test_api_key_is_required_on_v1(busy_server, http):
    url = busy_server.url
    error = _check_error(http.get(url + "/v1/models"), 401, None)
    assert error["code"] == "invalid_api_key"
    _check_error(http.get(url + "/v1/models", headers={"authorization": "Bearer nope"}), 401,
                 None)
    assert http.get(url + "/v1/models",
                    headers={"authorization": "Bearer s3cret"}).status_code == 200
    assert http.get(url + "/health").status_code == 200


def test_queue_limit_and_a_killed_client(busy_server, http, serve_cache):
    from fuel.models.llama import load_gguf

    url, auth = busy_server.url, {"authorization": "Bearer s3cret"}
    killed = subprocess.Popen([sys.executable, "-c", KILLED_CLIENT, url, "s3cret",
                               busy_server.model], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert killed.stdout.readline().strip() == "streaming"
        for _ in range(POLL_LIMIT):  # its generation holds the only slot
            if http.get(url + "/health").json()["active"] == 1:
                break
            time.sleep(POLL_STEP_S)
        body = {"model": busy_server.model, "prompt": "the hat in", "max_tokens": 4000,
                "stream": True, "temperature": 0}
        with http.stream("POST", url + "/v1/completions", json=body, headers=auth) as queued:
            assert queued.status_code == 200  # accepted: waiting in the one queue place
            refused = http.post(url + "/v1/completions", json=body, headers=auth)
            error = _check_error(refused, 503, None)
            assert error["code"] == "server_overloaded"
            assert int(refused.headers["retry-after"]) >= 1
        # the queued stream was closed by leaving the block; now kill the streaming client
        killed.send_signal(signal.SIGKILL)
        killed.wait(timeout=30)
    finally:
        if killed.poll() is None:
            killed.kill()
            killed.wait(timeout=30)
        killed.stdout.close()
        killed.stdin.close()
    health = _wait_until_idle(http, url)
    assert health["active"] == 0
    assert _metric(http, url, "fuel_cancelled_requests_total") == 2
    # both slots' worth of work is gone long before 4000 tokens: the slot serves again at once
    answer = http.post(url + "/v1/chat/completions", headers=auth, json={
        "model": busy_server.model, "max_tokens": 6, "temperature": 0,
        "messages": [{"role": "user", "content": "the cat"}]})
    assert answer.status_code == 200
    local = load_gguf(tiny_gguf_path(busy_server))
    expected = "".join(local.chat([{"role": "user", "content": "the cat"}], 6))
    assert answer.json()["choices"][0]["message"]["content"] == expected


def tiny_gguf_path(server):
    return server.process.args[server.process.args.index("--model") + 1]
