"""The 9 ONNX light CNNs on the wgpu backend (no conv or pooling kernels: they run through
the decompositions onto the primitive WGSL kernels) match the reference outputs at the
suite's tolerance. Lavapipe runs them slowly, so all are --runslow.

alexnet, vgg19 and zfnet512 hold weights (e.g. vgg19's 25088x4096 float32 FC weight, 411 MB)
above lavapipe's 128 MiB max-storage-buffer-binding-size: their launches are split over binding
windows (``fuel/backends/wgpu/windows.py``)."""

from __future__ import annotations

import pytest

from tests.backends.wgpu.support import wgpu_device

onnx = pytest.importorskip("onnx")

LIGHT = ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50",
         "shufflenet", "squeezenet", "vgg19", "zfnet512"]


@pytest.mark.slow
@pytest.mark.parametrize("name", LIGHT)
def test_light_cnn_runs_on_wgpu(name):
    from fuel.conformance.cases import LIGHT_SUITE, load_cases
    from fuel.conformance.runner import PASS, run_case

    device = wgpu_device()
    (case,) = load_cases((LIGHT_SUITE,), f"^light_{name}$")
    result = run_case(case, str(device), "fuel")
    assert result.status == PASS, f"{result.status}: {result.detail}"
