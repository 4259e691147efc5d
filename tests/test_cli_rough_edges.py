"""The rough edges a new user hit: --stop escapes, the timings line's words, the sampling
default stated on both sides, --model paths, empty input, one install-hint form, the note
while kernels compile the first time."""

import ast
import ctypes
import logging
import pathlib
import subprocess
import sys

import pytest

from fuel.cli import build_parser, main
from fuel.cli.models import decode_escapes, sampling_config, stats_line
from fuel.models.generation import GenerationStats

ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("typed,meant", [
    ("\\n\\n", "\n\n"), ("a\\tb", "a\tb"), ("\\r\\n", "\r\n"), ("\\\\n", "\\n"),
    ("\\x41 \\u00e9 C:\\path", "\\x41 \\u00e9 C:\\path"), ("plain", "plain"), ("é\\n", "é\n"),
])
def test_stop_escapes_are_decoded(typed, meant):
    assert decode_escapes(typed) == meant
    args = build_parser().parse_args(["generate", "x", "--stop", typed, "--stop", "END"])
    sampling_config(args)
    assert args.stop == [meant, "END"]


@pytest.mark.parametrize("prompt,new,rate,expected", [
    (8, 1, 0.0, "8 prompt tokens, 1 new token on cpu: time to first token 12.5 ms"),
    (1, 0, 0.0, "1 prompt token, 0 new tokens on cpu"),
    (5, 3, 0.5, "5 prompt tokens, 3 new tokens on cpu: time to first token 12.5 ms, "
                "4.0 tokens/s"),
])
def test_timings_line_counts_in_words_and_rates_only_what_was_measured(prompt, new, rate,
                                                                        expected):
    stats = GenerationStats(prompt_tokens=prompt, new_tokens=new, time_to_first_token_s=0.0125,
                            decode_seconds=rate)
    assert stats_line(stats, "cpu") == expected
    assert "tokens/s" not in stats_line(GenerationStats(3, 1, 0.01, 0.0), "cpu")


def _help(command: str) -> str:
    done = subprocess.run([sys.executable, "-m", "fuel", command, "--help"], capture_output=True,
                          text=True, check=True, env={"COLUMNS": "400", "PATH": ""},
                          cwd=ROOT)
    return " ".join(done.stdout.split())


def test_sampling_default_is_stated_on_both_sides():
    generate, serve = _help("generate"), _help("serve")
    assert "0 is greedy (the default here; fuel serve follows OpenAI and samples at " \
           "temperature 1" in generate
    assert "Requests sample by default, as OpenAI's API does (temperature 1" in serve
    assert "fuel generate and fuel chat are greedy" in serve
    assert "--quiet" in serve and "SIGTERM" in serve


@pytest.mark.parametrize("arguments,message", [
    (["generate", "hi", "--model", "/no/such/model.gguf"],
     "--model /no/such/model.gguf: no such file"),
    (["chat", "--model", "/no/such/model.gguf"], "--model /no/such/model.gguf: no such file"),
    (["serve", "--model", "/no/such/model.gguf"], "--model /no/such/model.gguf: no such file"),
    (["embed", "a", "--model", "/no/such/folder"], "--model /no/such/folder: no such folder"),
    (["generate", "hi", "--model", str(ROOT)], f"--model {ROOT}: no such file (it is a folder)"),
])
def test_a_missing_model_path_is_named_by_its_option(arguments, message, capsys):
    assert main(arguments) == 2
    error = capsys.readouterr().err
    assert f"fuel: error: {message}" in error
    assert "pip install" not in error and "SmolLM2" not in error


@pytest.mark.parametrize("arguments,message", [
    (["generate", ""], "the prompt is empty"),
    (["generate", "   "], "the prompt is empty"),
    (["embed", "fine", " "], "text 2 is empty"),
    (["embed", ""], "text 1 is empty"),
])
def test_empty_input_is_an_error_in_every_command(arguments, message, capsys):
    assert main(arguments) == 2
    assert f"fuel: error: {message}: give some text" in capsys.readouterr().err


def test_the_batch_job_calls_an_empty_line_a_bad_row():
    from fuel.distributed.tasks import RowError

    source = (ROOT / "fuel/distributed/tasks.py").read_text()
    assert 'raise RowError("empty line")' in source and issubclass(RowError, Exception)


def _string_constants(path: pathlib.Path):
    """The string literals of a module that are not docstrings."""
    tree = ast.parse(path.read_text())
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                docstrings.add(id(body[0].value))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and id(node) not in docstrings:
            yield node.value


def test_every_install_hint_comes_from_the_one_helper():
    """fuel.extras.install_command is the one place that spells an extra's install command
    (the checkout's form or the installed package's); no message writes its own."""
    offenders = []
    for path in sorted((ROOT / "fuel").rglob("*.py")):
        if path.name == "extras.py":
            continue
        for text in _string_constants(path):
            if "pyfuel[" in text or ("pip install" in text and "--no-deps" not in text):
                offenders.append(f"{path.relative_to(ROOT)}: {text!r}")
    assert not offenders, offenders


def test_first_compile_says_so_once(tmp_path, monkeypatch, caplog):
    from fuel.compiler import toolchain

    if toolchain.unavailable_reason():
        pytest.skip(toolchain.unavailable_reason())
    monkeypatch.setenv("FUEL_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(toolchain, "_announced", type(toolchain._announced)())
    source = ("/* {folder} */\nvoid fuel_kernel(void *out, void *b, void *c) "
              "{{ *(int *)out = {n}; }}\n")
    with caplog.at_level(logging.INFO, logger="fuel.compiler"):
        for n in (41, 42):
            built = toolchain.build(source.format(folder=tmp_path, n=n), f"probe_{n}")
            value = ctypes.c_int(0)
            built.function(ctypes.byref(value), None, None)
            assert value.value == n
    notes = [r.getMessage() for r in caplog.records if r.name == "fuel.compiler"]
    assert notes == [f"fuel: compiling kernels for this machine (once: they are cached in "
                     f"{tmp_path / 'kernels'})"]
