"""The 9 ONNX light CNNs on the wgpu backend (no conv or pooling kernels: they run through
the decompositions onto the primitive WGSL kernels) match the reference outputs at the
suite's tolerance. Lavapipe runs them slowly, so all are --runslow.

alexnet, vgg19 and zfnet512 decompose their convolutions (im2col) into intermediates of
150-410 MB, above lavapipe's 128 MiB max-storage-buffer-binding-size: the backend refuses
them naming the limit (buffers are not split yet), which these cases check."""

from __future__ import annotations

import pytest

from tests.backends.wgpu.support import wgpu_device

onnx = pytest.importorskip("onnx")

LIGHT = ["densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet",
         "squeezenet"]
ABOVE_BINDING_LIMIT = ["bvlc_alexnet", "vgg19", "zfnet512"]


@pytest.mark.slow
@pytest.mark.parametrize("name", LIGHT)
def test_light_cnn_runs_on_wgpu(name):
    from fuel.conformance.cases import LIGHT_SUITE, load_cases
    from fuel.conformance.runner import PASS, run_case

    device = wgpu_device()
    (case,) = load_cases((LIGHT_SUITE,), f"^light_{name}$")
    result = run_case(case, str(device), "fuel")
    assert result.status == PASS, f"{result.status}: {result.detail}"


@pytest.mark.slow
@pytest.mark.parametrize("name", ABOVE_BINDING_LIMIT)
def test_light_cnn_above_the_binding_limit_is_refused_by_name(name):
    from fuel.conformance.cases import LIGHT_SUITE, load_cases
    from fuel.conformance.runner import run_case

    device = wgpu_device()
    from fuel.backends import get_backend

    limit = get_backend(device).context(device).max_binding
    (case,) = load_cases((LIGHT_SUITE,), f"^light_{name}$")
    result = run_case(case, str(device), "fuel")
    if limit >= 1 << 29:  # an adapter with room for them: they must pass
        assert result.status == "pass", f"{result.status}: {result.detail}"
    else:
        assert "max-storage-buffer-binding-size" in result.detail, result.detail
