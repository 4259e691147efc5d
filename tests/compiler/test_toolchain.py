"""The kernel cache: entries on disk, damaged entries detected and rebuilt, compile errors."""

import json
import warnings

import pytest

from fuel.compiler import toolchain
from fuel.ir.errors import KernelError

pytestmark = pytest.mark.skipif(toolchain.unavailable_reason() is not None,
                                reason=str(toolchain.unavailable_reason()))

SOURCE = """#include <stdint.h>
void fuel_kernel(char **data, const int64_t *sizes, const int64_t *strides) {
  ((int64_t *)data[0])[0] = %d;
}
"""


def _run(built) -> int:
    import ctypes

    value = ctypes.c_int64(0)
    data = (ctypes.c_void_p * 1)(ctypes.addressof(value))
    built.function(data, None, None)
    return value.value


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FUEL_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(toolchain, "_loaded", {})
    monkeypatch.setattr(toolchain, "_reported", set())
    return tmp_path / "kernels"


def test_a_built_kernel_is_cached_on_disk_and_in_memory(fresh_cache):
    built = toolchain.build(SOURCE % 41, "answer")
    assert _run(built) == 41
    assert built.source_path.read_text() == SOURCE % 41
    index = json.loads((fresh_cache / f"{built.key}.json").read_text())
    assert (fresh_cache / index["library"]) == built.library_path
    assert toolchain.build(SOURCE % 41, "answer") is built
    assert built in toolchain.built_kernels()


def test_a_corrupt_library_is_detected_reported_once_and_rebuilt(fresh_cache, monkeypatch):
    built = toolchain.build(SOURCE % 42, "answer")
    built.library_path.unlink()  # (the loaded library stays mapped; never write it in place)
    built.library_path.write_bytes(b"not a library")
    monkeypatch.setattr(toolchain, "_loaded", {})  # a new process: only the disk cache
    with pytest.warns(RuntimeWarning, match="damaged.*does not match"):
        rebuilt = toolchain.build(SOURCE % 42, "answer")
    assert _run(rebuilt) == 42
    monkeypatch.setattr(toolchain, "_loaded", {})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _run(toolchain.build(SOURCE % 42, "answer")) == 42


def test_an_unreadable_index_is_rebuilt(fresh_cache, monkeypatch):
    built = toolchain.build(SOURCE % 43, "answer")
    (fresh_cache / f"{built.key}.json").write_text("{truncated")
    monkeypatch.setattr(toolchain, "_loaded", {})
    with pytest.warns(RuntimeWarning, match="index is unreadable"):
        assert _run(toolchain.build(SOURCE % 43, "answer")) == 43


def test_a_compiler_error_names_the_kernel_the_source_and_the_message(fresh_cache):
    with pytest.raises(KernelError) as raised:
        toolchain.build("void fuel_kernel(void) { this is not C; }", "fused(broken)")
    message = str(raised.value)
    assert "fused(broken)" in message and str(fresh_cache) in message and "error" in message


def test_builds_run_on_compile_workers_and_are_shared(fresh_cache, monkeypatch):
    monkeypatch.setattr(toolchain, "_building", {})
    futures = [toolchain.start_build(SOURCE % n, "answer") for n in (50, 51, 52)]
    again = toolchain.start_build(SOURCE % 50, "answer")  # under way or done: the same build
    built = [future.result() for future in futures]
    assert [_run(b) for b in built] == [50, 51, 52]
    assert again.result() is built[0] and toolchain.build(SOURCE % 51, "answer") is built[1]
    assert not toolchain._building  # finished builds leave only the memory cache


def test_a_failed_build_is_forgotten_and_retried(fresh_cache, monkeypatch):
    monkeypatch.setattr(toolchain, "_building", {})
    broken = "void fuel_kernel(void) { this is not C; }"
    first = toolchain.start_build(broken, "fused(broken)")
    with pytest.raises(KernelError):
        first.result()
    second = toolchain.start_build(broken, "fused(broken)")
    assert second is not first
    with pytest.raises(KernelError, match="fused\\(broken\\)"):
        second.result()
