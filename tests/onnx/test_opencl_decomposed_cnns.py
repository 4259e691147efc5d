"""ONNX light CNNs on OpenCL, whose backend has no conv or pooling kernels: they run through
the decompositions (im2col gathers plus matmul, window reductions) and match the reference
outputs at the suite's tolerance. PoCL is slow: one CNN by default, all 9 with --runslow."""

from __future__ import annotations

import pytest

from tests.backends.opencl.support import opencl_device

onnx = pytest.importorskip("onnx")

LIGHT = ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50",
         "shufflenet", "squeezenet", "vgg19", "zfnet512"]


def _run(name: str) -> None:
    from fuel.conformance.cases import LIGHT_SUITE, load_cases
    from fuel.conformance.runner import PASS, run_case

    device = opencl_device()
    (case,) = load_cases((LIGHT_SUITE,), f"^light_{name}$")
    result = run_case(case, device, "fuel")
    assert result.status == PASS, f"{result.status}: {result.detail}"


def test_squeezenet_runs_on_opencl_through_decompositions():
    _run("squeezenet")


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in LIGHT if n != "squeezenet"])
def test_light_cnn_runs_on_opencl_through_decompositions(name):
    _run(name)
