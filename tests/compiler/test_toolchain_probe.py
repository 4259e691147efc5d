"""The toolchain probe runs the compiler once per machine: a later process reads the verdict
from the cache folder (the first realize of a new process runs no compiler)."""

import subprocess

import pytest

from fuel.compiler import toolchain


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FUEL_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(toolchain, "_detected", [])
    monkeypatch.setattr(toolchain, "_openmp_probe", [])
    return tmp_path


def test_a_second_process_reads_the_probe_without_running_the_compiler(fresh_cache,
                                                                        monkeypatch):
    first = toolchain.detect()
    if isinstance(first, str):
        pytest.skip(first)
    flags = toolchain.openmp_flags()
    assert (fresh_cache / toolchain.PROBE_FILE).exists()

    def no_compiler(*args, **kwargs):
        raise AssertionError(f"the compiler ran: {args[0]}")

    monkeypatch.setattr(subprocess, "run", no_compiler)
    monkeypatch.setattr(toolchain, "_detected", [])  # a new process
    monkeypatch.setattr(toolchain, "_openmp_probe", [])
    assert toolchain.detect() == first
    assert toolchain.openmp_flags() == flags


def test_the_probe_is_keyed_by_what_steers_it(fresh_cache, monkeypatch):
    first = toolchain.detect()
    if isinstance(first, str):
        pytest.skip(first)
    key = toolchain._probe_key(first.compiler)
    monkeypatch.setenv("FUEL_VECTOR_MATH", "0")
    assert toolchain._probe_key(first.compiler) != key
    assert toolchain._remembered_probe(toolchain._probe_key(first.compiler)) is None
    monkeypatch.delenv("FUEL_VECTOR_MATH")
    assert toolchain._remembered_probe(key) == first


def test_a_damaged_probe_file_is_probed_again(fresh_cache, monkeypatch):
    (fresh_cache / toolchain.PROBE_FILE).write_text("{not json")
    found = toolchain.detect()
    if isinstance(found, str):
        pytest.skip(found)
    assert toolchain._remembered_probe(toolchain._probe_key(found.compiler)) == found
