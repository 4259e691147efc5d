"""The ``row_kernels`` IR rendered in WGSL (``render_wgsl_rows``) on a wgpu device, against
NumPy: every reduction of ``kernel_ir.REDUCTIONS`` over any dims (a row of several strided
dims is decoded), permuted and sliced inputs, keepdim or not, argmax/argmin ties and NaN,
cumsum into strided outputs, softmax and the norms. The backend registers only sum, max,
argmax and cumsum; the renderer takes them all, as OpenCL's does."""

from __future__ import annotations

import numpy as np
import pytest

from fuel.backends.wgpu.loops import RowKernel
from fuel.compiler.row_kernels import (
    cumsum_loop,
    norm_loop,
    output_dtype,
    reduction_loop,
    softmax_loop,
)
from fuel.ir import dtype as dt
from fuel.ir.layout import Layout
from fuel.ir.ops import OpKind
from tests.compiler.test_row_kernels import _gather, _values

NUMPY_REDUCTIONS = {
    OpKind.SUM: np.sum, OpKind.PROD: np.prod, OpKind.MEAN: np.mean, OpKind.MAX: np.max,
    OpKind.MIN: np.min, OpKind.ALL: np.all, OpKind.ANY: np.any, OpKind.ARGMAX: np.argmax,
    OpKind.ARGMIN: np.argmin,
}
# A (3, 4, 5) view of a (5, 4, 3) buffer read transposed, and one of a (6, 8, 10) buffer
# read every other element from an offset.
VIEWS = {"permuted": (Layout((3, 4, 5), (1, 3, 12), 0), 60),
         "sliced": (Layout((3, 4, 5), (80, 20, 2), 1), 480)}


def _launch(device, loop, arrays, layouts, out_dtype, out_layout, size):
    """Run ``loop`` as the wgpu backend runs a registered row kernel; the output's buffer."""
    backend, device, _ = device
    inputs = [backend.upload(device, a) for a in arrays]
    output = backend.allocate(device, out_dtype, size)
    RowKernel("test", lambda *_: loop, loop)(inputs, [output], [*layouts, out_layout], None)
    return backend.download(output, Layout.contiguous((size,)))


@pytest.mark.parametrize("view", sorted(VIEWS))
@pytest.mark.parametrize("dtype", [dt.float32, dt.int32, dt.bool_])
@pytest.mark.parametrize("dims", [(2,), (0,), (0, 2), (0, 1, 2)])
def test_every_reduction_over_any_dims_matches_numpy(wgpu_device, view, dtype, dims):
    layout, size = VIEWS[view]
    buffer = _values(dtype, size)
    source = _gather(buffer, layout)
    for op, function in NUMPY_REDUCTIONS.items():
        indexed = op in (OpKind.ARGMAX, OpKind.ARGMIN)
        if (op is OpKind.MEAN and not dtype.is_floating) or (indexed and len(dims) != 1):
            continue
        target = output_dtype(op, dtype)
        for keepdim in (False, True):
            shape = tuple(1 if a in dims else s for a, s in enumerate(layout.shape)) \
                if keepdim else tuple(s for a, s in enumerate(layout.shape) if a not in dims)
            out_layout = Layout.contiguous(shape)
            loop = reduction_loop(op, dtype, layout, out_layout, dims)
            actual = _launch(wgpu_device, loop, [buffer], [layout], target, out_layout,
                             out_layout.numel)
            axis = dims[0] if indexed else dims
            expected = function(source, axis=axis, keepdims=keepdim)
            if op in (OpKind.SUM, OpKind.PROD) and not dtype.is_floating:
                expected = function(source.astype(np.int64), axis=dims, keepdims=keepdim)
            np.testing.assert_allclose(actual.reshape(shape).astype(np.float64),
                                       np.asarray(expected, np.float64), rtol=1e-5,
                                       err_msg=f"{op.value} {dtype.name} {dims} {view}")


@pytest.mark.parametrize("op", [OpKind.ARGMAX, OpKind.ARGMIN, OpKind.MAX, OpKind.MIN])
def test_ties_keep_the_first_index_and_nan_wins(wgpu_device, op):
    rows = np.array([[1, 3, 3, 0], [2, np.nan, 5, np.nan], [-1, -1, -1, -1], [4, 2, 9, 9]],
                    np.float32)
    layout = Layout.contiguous(rows.shape)
    function = {OpKind.ARGMAX: np.argmax, OpKind.ARGMIN: np.argmin, OpKind.MAX: np.max,
                OpKind.MIN: np.min}[op]
    for dim in (0, 1):
        out_layout = Layout.contiguous((4,))
        loop = reduction_loop(op, dt.float32, layout, out_layout, (dim,))
        actual = _launch(wgpu_device, loop, [rows.reshape(-1)], [layout],
                         output_dtype(op, dt.float32), out_layout, 4)
        np.testing.assert_array_equal(actual, function(rows, axis=dim))


def test_an_empty_row_folds_to_the_identity(wgpu_device):
    layout = Layout.contiguous((3, 0))
    out_layout = Layout.contiguous((3,))
    for op, expected in ((OpKind.SUM, 0.0), (OpKind.PROD, 1.0)):
        loop = reduction_loop(op, dt.float32, layout, out_layout, (1,))
        actual = _launch(wgpu_device, loop, [np.zeros(1, np.float32)], [layout], dt.float32,
                         out_layout, 3)
        np.testing.assert_array_equal(actual, np.full(3, expected, np.float32))


@pytest.mark.parametrize("dim", [0, 1, 2])
def test_cumsum_and_softmax_along_any_dim_into_strided_outputs(wgpu_device, dim):
    layout, size = VIEWS["permuted"]
    buffer = _values(dt.float32, size)
    source = _gather(buffer, layout)
    out_layout = Layout((3, 4, 5), (1, 3, 12), 0)  # written transposed
    running = _launch(wgpu_device, cumsum_loop(dt.float32, layout, out_layout, dim), [buffer],
                      [layout], dt.float32, out_layout, 60)
    np.testing.assert_allclose(_gather(running, out_layout), np.cumsum(source, axis=dim),
                               rtol=1e-5, atol=1e-6)
    integers = _values(dt.int32, size)
    running = _launch(wgpu_device, cumsum_loop(dt.int32, layout, out_layout, dim), [integers],
                      [layout], dt.int64, out_layout, 60)
    np.testing.assert_array_equal(_gather(running, out_layout),
                                  np.cumsum(_gather(integers, layout), axis=dim))
    shifted = source - source.max(axis=dim, keepdims=True)
    exponential = np.exp(shifted)
    for op, expected in ((OpKind.SOFTMAX, exponential / exponential.sum(axis=dim,
                                                                        keepdims=True)),
                         (OpKind.LOG_SOFTMAX, shifted - np.log(exponential.sum(
                             axis=dim, keepdims=True)))):
        actual = _launch(wgpu_device, softmax_loop(op, dt.float32, layout, out_layout, dim),
                         [buffer], [layout], dt.float32, out_layout, 60)
        np.testing.assert_allclose(_gather(actual, out_layout), expected, rtol=1e-5,
                                   atol=1e-6)


@pytest.mark.parametrize("axes", [1, 2])
def test_norms_over_the_trailing_dims(wgpu_device, axes):
    layout = Layout.contiguous((3, 4, 5))
    x = _values(dt.float32, 60)
    trailing = layout.shape[3 - axes:]
    weight = _values(dt.float32, int(np.prod(trailing)), seed=1)
    bias = _values(dt.float32, int(np.prod(trailing)), seed=2)
    small = Layout.contiguous(trailing)
    data = x.reshape(3, 4, 5)
    axis = tuple(range(3 - axes, 3))
    mean = data.mean(axis=axis, keepdims=True)
    variance = ((data - mean) ** 2).mean(axis=axis, keepdims=True)
    layer = (data - mean) / np.sqrt(variance + 1e-5) * weight.reshape(trailing) + \
        bias.reshape(trailing)
    actual = _launch(wgpu_device, norm_loop(OpKind.LAYER_NORM, dt.float32,
                                            [layout, small, small, layout], axes, 1e-5),
                     [x, weight, bias], [layout, small, small], dt.float32, layout, 60)
    np.testing.assert_allclose(actual.reshape(3, 4, 5), layer, rtol=1e-4, atol=1e-5)
    rms = data / np.sqrt((data * data).mean(axis=axis, keepdims=True) + 1e-5) * \
        weight.reshape(trailing)
    actual = _launch(wgpu_device, norm_loop(OpKind.RMS_NORM, dt.float32,
                                            [layout, small, layout], axes, 1e-5),
                     [x, weight], [layout, small], dt.float32, layout, 60)
    np.testing.assert_allclose(actual.reshape(3, 4, 5), rms, rtol=1e-4, atol=1e-5)
