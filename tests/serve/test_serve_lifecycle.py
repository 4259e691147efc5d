"""``fuel serve``'s launcher: uvicorn's access log (on by default, ``--quiet`` silences it)
and a graceful SIGTERM (no new connections, the in-flight stream ends, exit status 0)."""

import logging
import signal
import time

import pytest

from tests.serve.conftest import require_serving, start_server


def _wait_for(predicate, seconds: float = 15.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def test_access_log_and_graceful_sigterm(chat_gguf, serve_cache):
    require_serving()
    import httpx

    server = start_server(chat_gguf, serve_cache, "--slots", "1", "--embedding-model", "none")
    try:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            assert client.get("/health").status_code == 200
            assert _wait_for(lambda: any('"GET /health HTTP/1.1" 200' in line
                                         for line in server.output))
            request = {"model": server.model, "prompt": "Once", "max_tokens": 200,
                       "temperature": 0, "stream": True}
            events = []
            with client.stream("POST", "/v1/completions", json=request) as response:
                assert response.status_code == 200
                lines = response.iter_lines()
                events.append(next(line for line in lines if line.startswith("data:")))
                server.process.send_signal(signal.SIGTERM)
                try:
                    events.extend(line for line in lines if line.startswith("data:"))
                except httpx.HTTPError:  # cancelled at the end of the grace period
                    pass
        assert server.process.wait(timeout=30) == 0
        assert len(events) >= 1
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"{server.url}/health", timeout=5)
        assert _wait_for(lambda: any("fuel serve: stopped (SIGTERM)" in line
                                     for line in server.output))
        assert any("SIGTERM: stopping" in line for line in server.output)
    finally:
        server.stop()


def test_quiet_turns_the_access_log_off():
    require_serving()
    import uvicorn

    from fuel.cli import build_parser
    from fuel.cli.serve import uvicorn_config

    for options, logged in (([], True), (["--quiet"], False)):
        args = build_parser().parse_args(["serve", *options])
        config = uvicorn_config(uvicorn, object(), args)
        config.configure_logging()
        assert config.access_log is logged
        access = logging.getLogger("uvicorn.access")
        assert access.isEnabledFor(logging.INFO)  # uvicorn's switch is access_log
        assert not logging.getLogger("uvicorn.error").isEnabledFor(logging.INFO)
