"""The 9 ONNX light CNNs on a CUDA device (skipped, naming why, without one) match the
reference outputs at the suite's tolerance; convolution and pooling run through their
decompositions onto the CUDA kernels."""

from __future__ import annotations

import pytest

from tests.backends.cuda.renderings import cuda_device

onnx = pytest.importorskip("onnx")

LIGHT = ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50",
         "shufflenet", "squeezenet", "vgg19", "zfnet512"]


@pytest.mark.parametrize("name", LIGHT)
def test_light_cnn_runs_on_cuda(name):
    from fuel.conformance.cases import LIGHT_SUITE, load_cases
    from fuel.conformance.runner import PASS, run_case

    device = cuda_device()
    (case,) = load_cases((LIGHT_SUITE,), f"^light_{name}$")
    result = run_case(case, str(device), "fuel")
    assert result.status == PASS, f"{result.status}: {result.detail}"
