"""The measured rule: with fusion on (and vector math), float32/float64 softmax, log_softmax,
layer_norm, rms_norm and the composite activations over the last dim run as the fused
rendering of their decomposition, not their hand-written kernel; the values stay the same."""

import numpy as np
import pytest
import torch

import fuel
import fuel.nn.functional as F
from fuel.backends.opencl.backend import PREFERS_DECOMPOSED as OPENCL_PREFERS_DECOMPOSED
from fuel.compiler import toolchain
from fuel.ir.device import BackendId
from fuel.ir.ops import OpKind
from fuel.runtime.resolve import fuses_math
from tests.backends.opencl.support import opencl_backend

pytestmark = pytest.mark.skipif(not fuses_math(BackendId.CPU),
                                reason=str(toolchain.unavailable_reason() or "no vector math"))

ROWS = np.random.default_rng(3).standard_normal((5, 33))
CASES = {
    "softmax": (lambda x: x.softmax(-1), lambda t: t.softmax(-1)),
    "log_softmax": (lambda x: x.log_softmax(-1), lambda t: t.log_softmax(-1)),
    "layer_norm": (lambda x: F.layer_norm(x, (33,)),
                   lambda t: torch.nn.functional.layer_norm(t, (33,))),
    "rms_norm": (lambda x: F.rms_norm(x, (33,), eps=1e-6),
                 lambda t: torch.nn.functional.rms_norm(t, (33,), eps=1e-6)),
    "gelu": (lambda x: x.gelu(), lambda t: torch.nn.functional.gelu(t)),
    "silu": (lambda x: x.silu(), lambda t: torch.nn.functional.silu(t)),
}


@pytest.fixture(autouse=True)
def fusion_on():
    fuel.set_fusion(True)
    yield
    fuel.set_fusion(True)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_composites_run_fused_and_match_torch(name, dtype):
    build, reference = CASES[name]
    data = ROWS.astype(dtype)
    with fuel.profile() as profile:
        values = build(fuel.tensor(data)).numpy()
    launches = [row.op for row in profile.launches]
    assert launches and all(op.startswith("fused(") or op == "full" for op in launches), launches
    expected = reference(torch.tensor(data)).numpy()
    tolerance = dict(rtol=2e-6, atol=2e-6) if dtype == "float32" else dict(rtol=1e-12,
                                                                            atol=1e-12)
    np.testing.assert_allclose(values, expected, **tolerance)
    fuel.set_fusion(False)
    with fuel.profile() as profile:
        unfused = build(fuel.tensor(data)).numpy()
    assert name in [row.op for row in profile.launches]
    np.testing.assert_allclose(values, unfused, **tolerance)


def test_other_dims_and_half_types_keep_the_hand_written_kernel():
    x = fuel.tensor(ROWS.astype(np.float32))
    with fuel.profile() as profile:
        x.softmax(0).realize()
        x.half().softmax(-1).realize()
    assert [row.op for row in profile.launches].count("softmax") == 2


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_opencl_rule_decides_per_op(name):
    """On OpenCL the ops its backend prefers decomposed run fused, the others their own
    kernel; both match torch."""
    device = str(opencl_backend().devices()[0])
    build, reference = CASES[name]
    data = ROWS.astype(np.float32)
    with fuel.profile() as profile:
        values = build(fuel.tensor(data, device=device)).numpy()
    launches = [row.op for row in profile.launches if row.op not in ("copy", "full")]
    if OpKind(name) in OPENCL_PREFERS_DECOMPOSED:
        assert launches and all(op.startswith("fused(") for op in launches), launches
    else:
        assert launches == [name]
    np.testing.assert_allclose(values, reference(torch.tensor(data)).numpy(), rtol=1e-5,
                               atol=1e-6)
