"""NVRTC without a GPU: every CUDA C source the CUDA backend would launch on the kernel suite's
cases compiles, for the H200's architecture (compute_90, PTX) in every default run and, marked
slow, for sm_90 and sm_80 cubins (NVRTC's assembler checks the inline PTX too). Plus the
kernels that use each inline-PTX helper as cubins for both, in every run."""

from __future__ import annotations

import os

import pytest

from fuel.compiler import nvrtc
from fuel.compiler.render_cuda import CUDA_OPTIONS, render_cuda
from fuel.compiler.row_kernels import softmax_loop
from fuel.ir import dtype as dt
from fuel.ir.errors import KernelError
from fuel.ir.layout import Layout
from fuel.ir.ops import OpKind
from tests.backends.cuda import renderings as suite

pytestmark = pytest.mark.skipif(nvrtc.unavailable_reason() is not None,
                                reason=str(nvrtc.unavailable_reason()))
WORKERS = max(1, min(2, os.cpu_count() or 1))


@pytest.fixture(scope="module")
def rendered():
    items, missing = suite.renderings()
    assert not missing, f"CUDA kernels without kernel-suite cases: {missing}"
    return items


def _report(failures) -> str:
    lines = [f"{len(failures)} CUDA kernels fail to compile:"]
    for rendering, message in failures[:3]:
        lines += [f"--- {rendering.what}", message]
    return "\n".join(lines)


def test_every_suite_kernel_compiles_for_compute_90(rendered):
    assert len(rendered) > 1000  # every family: elementwise, casts, rows, indexing, ...
    failures = suite.compile_all(rendered, "compute_90", workers=WORKERS)
    assert not failures, _report(failures)


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["sm_90", "sm_80", "compute_80"])
def test_every_suite_kernel_compiles_for(arch, rendered):
    failures = suite.compile_all(rendered, arch, workers=WORKERS)
    assert not failures, _report(failures)


# Kernels whose helpers are inline PTX or device intrinsics (half loads, stores, roundings
# from float and from double) and integer powers: their cubins, assembled by NVRTC.
def _helper_users(rendered):
    needles = ("fuel_f16_from_double", "fuel_bf16_from_double", "fuel_f16_round(",
               "fuel_bf16_round(", "fuel_power_integer(", "fuel_remainder_float(",
               "fuel_remainder_double(", "fuel_f16_bits_from_double(value)", "atomicCAS")
    chosen = []
    for needle in needles:
        for item in rendered:
            body = item.source.split("fuel_arguments_t;", 1)[-1]
            if needle in body:
                chosen.append(item)
                break
        else:
            raise AssertionError(f"no suite kernel uses {needle}")
    return chosen


@pytest.mark.parametrize("arch", ["sm_90", "sm_80"])
def test_kernels_using_each_helper_assemble(arch, rendered):
    failures = suite.compile_all(_helper_users(rendered), arch)
    assert not failures, _report(failures)


def test_a_compile_error_names_the_source_and_nvrtc_log():
    source = render_cuda(softmax_loop(OpKind.SOFTMAX, dt.float32, Layout.contiguous((4, 8)),
                                      Layout.contiguous((4, 8)), 1)).source
    broken = source.replace("const long long row", "const long long row = ;", 1)
    with pytest.raises(KernelError, match=r"(?s)NVRTC failed.*sm_90.*error.*source:.*row = ;"):
        nvrtc.compile_cuda(broken, "sm_90", CUDA_OPTIONS, disk=False)


def test_batches_find_the_failing_kernel(rendered):
    """The batched compile reports exactly the broken source of a batch, with its name."""
    items = list(rendered[:5])
    broken = suite.Rendering(items[2].source.replace("{", "{ undefined_name;", 2), "broken")
    items[2] = broken
    failures = suite.compile_all(items, "compute_90")
    assert [f[0].what for f in failures] == ["broken"]
    assert "undefined_name" in failures[0][1]


def test_compiled_images_are_cached_by_source(tmp_path, monkeypatch):
    monkeypatch.setenv("FUEL_CACHE_DIR", str(tmp_path))
    source = render_cuda(softmax_loop(OpKind.SOFTMAX, dt.float16, Layout.contiguous((4, 8)),
                                      Layout.contiguous((4, 8)), 1), True).source
    first = nvrtc.compile_cuda(source, "compute_90", CUDA_OPTIONS)
    files = list((tmp_path / "cuda").iterdir())
    assert len(files) == 1 and files[0].read_bytes() == first
    assert b".entry fuel_kernel" in first and b".target sm_90" in first
    nvrtc._memory.clear()
    assert nvrtc.compile_cuda(source, "compute_90", CUDA_OPTIONS) == first
