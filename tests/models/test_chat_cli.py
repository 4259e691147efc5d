"""``fuel chat`` through a pseudo-terminal, as a person uses it: two turns, the second served
from the KV cache of the first (it processes only the new tokens), answers equal to an
in-process ChatSession's; and Ctrl-C during ``fuel generate`` still prints the statistics."""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
READ_TIMEOUT_S = 60
STATS = re.compile(r"(\d+) prompt tokens?(?: \((\d+) from the cache\))?, (\d+) new tokens?")


@pytest.fixture
def chat_gguf(tiny_gguf):
    from tests.models.tiny_gguf import CHATML_TEMPLATE

    return tiny_gguf(context=256, chat_template=CHATML_TEMPLATE)


def _environment(tmp_path) -> dict:
    return dict(os.environ, FUEL_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=str(ROOT))


def _read_until(fd: int, pattern: re.Pattern, seen: bytearray) -> re.Match:
    """Read the terminal until ``pattern`` matches what came since ``seen`` was last cut."""
    deadline = time.monotonic() + READ_TIMEOUT_S
    while time.monotonic() < deadline:
        match = pattern.search(seen.decode("utf-8", "replace"))
        if match:
            return match
        ready, _, _ = select.select([fd], [], [], 1.0)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                break
            if not chunk:
                break
            seen.extend(chunk)
    pytest.fail(f"no {pattern.pattern!r} in the terminal: {seen.decode('utf-8', 'replace')!r}")


def test_chat_in_a_terminal_reuses_the_cache(chat_gguf, tmp_path):
    from fuel.models.chat import ChatSession
    from fuel.models.llama import load_gguf

    leader, follower = os.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "fuel", "chat", "--model", str(chat_gguf), "--max-new-tokens",
         "8", "--system", "be brief"], stdin=follower, stdout=follower, stderr=follower,
        cwd=ROOT, env=_environment(tmp_path), close_fds=True)
    os.close(follower)
    try:
        seen = bytearray()
        _read_until(leader, re.compile(r"> $"), seen)
        turns = []
        for line in ("the cat", "in the hat"):
            del seen[:]
            os.write(leader, line.encode() + b"\n")
            stats = _read_until(leader, STATS, seen)
            _read_until(leader, re.compile(r"> $"), seen)
            turns.append([int(value or 0) for value in stats.groups()])
        os.write(leader, b"/exit\n")
        assert process.wait(timeout=READ_TIMEOUT_S) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=READ_TIMEOUT_S)
        os.close(leader)
    (prompt, cached, new), (prompt2, cached2, new2) = turns
    assert cached == 0 and new == 8
    assert cached2 == prompt + new - 1  # the whole first turn came from the cache
    session = ChatSession(load_gguf(chat_gguf), system="be brief")
    "".join(session.send("the cat", 8))
    assert len(session.model.encode_chat(session.messages[:2])) == prompt
    "".join(session.send("in the hat", 8))
    stats = session.model.last_stats
    assert (stats.prompt_tokens, stats.cached_tokens) == (prompt2, cached2)


def test_ctrl_c_during_generate_prints_the_statistics(tiny_gguf, tmp_path):
    path = tiny_gguf(context=8192)
    process = subprocess.Popen(
        [sys.executable, "-m", "fuel", "generate", "the cat", "--model", str(path),
         "--max-new-tokens", "8000", "--temperature", "1", "--seed", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT, env=_environment(tmp_path))
    try:
        assert process.stdout.read(len("the cat") + 1)  # the prompt, then generated text
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=READ_TIMEOUT_S)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=READ_TIMEOUT_S)
    assert process.returncode == 130
    assert "Traceback" not in err.decode()
    match = STATS.search(err.decode())
    assert match and 1 <= int(match.group(3)) < 8000
    assert "(interrupted)" in err.decode()
    assert ("tokens/s" in err.decode()) == (int(match.group(3)) >= 2)  # a rate needs two


def test_prompt_from_standard_input_or_a_file_and_chat_mode(chat_gguf, tmp_path, monkeypatch,
                                                            capsys):
    import io

    from fuel.cli import main
    from fuel.models.llama import load_gguf

    monkeypatch.setenv("FUEL_CACHE_DIR", str(tmp_path / "cache"))
    options = ["--model", str(chat_gguf), "--max-new-tokens", "6"]
    assert main(["generate", "the cat", *options]) == 0
    expected = capsys.readouterr().out
    monkeypatch.setattr("sys.stdin", io.StringIO("the cat\n"))
    assert main(["generate", "-", *options]) == 0
    assert capsys.readouterr().out == expected
    prompt_file = tmp_path / "prompt.txt"
    prompt_file.write_text("the cat\n", encoding="utf-8")
    assert main(["generate", "--file", str(prompt_file), *options]) == 0
    assert capsys.readouterr().out == expected
    assert main(["generate", "--chat", "--system", "be brief", "the cat", *options]) == 0
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "the cat"}]
    answer = "".join(load_gguf(chat_gguf).chat(messages, 6))
    assert capsys.readouterr().out == answer + "\n"
    assert main(["generate", "--file", str(tmp_path / "missing.txt"), *options]) == 2
    assert "cannot read the prompt file" in capsys.readouterr().err
