"""The reductions, scans and row ops of ``row_kernels`` (the IR the OpenCL backend renders for
reduce, cumsum, softmax and the norms) rendered in C, against NumPy: reductions over any set
of dims (several at once: a row of several strided dims), permuted and sliced inputs, keepdim
or not, every combine (argmax/argmin ties and NaN included), and strided outputs."""

import numpy as np
import pytest

from fuel.backends import get_backend
from fuel.backends.cpu.generated import generate_c_kernel
from fuel.compiler import toolchain
from fuel.compiler.row_kernels import (
    cumsum_loop,
    norm_loop,
    output_dtype,
    reduction_loop,
    softmax_loop,
)
from fuel.ir import dtype as dt
from fuel.ir.device import CPU
from fuel.ir.layout import Layout
from fuel.ir.ops import OpKind

pytestmark = pytest.mark.skipif(toolchain.unavailable_reason() is not None,
                                reason=str(toolchain.unavailable_reason()))

NUMPY_REDUCTIONS = {
    OpKind.SUM: np.sum, OpKind.PROD: np.prod, OpKind.MEAN: np.mean, OpKind.MAX: np.max,
    OpKind.MIN: np.min, OpKind.ALL: np.all, OpKind.ANY: np.any,
}
# A (3, 4, 5) view of a (5, 4, 3) buffer read transposed, and one of a (6, 8, 10) buffer
# read every other element from an offset.
VIEWS = {"permuted": (Layout((3, 4, 5), (1, 3, 12), 0), 60),
         "sliced": (Layout((3, 4, 5), (80, 20, 2), 1), 480)}


def _run(loop, arrays, layouts, out_dtype, out_layout, size):
    backend = get_backend(CPU)
    inputs = [backend.upload(CPU, a) for a in arrays]
    output = backend.allocate(CPU, out_dtype, size)
    generate_c_kernel(loop).kernel(inputs, [output], [*layouts, out_layout], None)
    return output.buffer


def _gather(array, layout):
    return np.lib.stride_tricks.as_strided(
        array[layout.offset:], layout.shape, [s * array.itemsize for s in layout.strides])


def _values(dtype, size, seed=0):
    random = np.random.default_rng(seed)
    if dtype.is_bool:
        return random.random(size) < 0.7
    if dtype.is_floating:
        return random.uniform(-2, 2, size).astype(dtype.numpy)
    return random.integers(-3, 4, size).astype(dtype.numpy)


DIMS = [(2,), (0,), (0, 2), (0, 1, 2), ()]
DTYPES = [dt.float32, dt.float64, dt.int32, dt.int8, dt.bool_]
# Each case compiles a few C kernels: the default run takes a spread, --runslow all of them.
SPREAD = [("permuted", dims, dt.float32) for dims in DIMS] + [
    ("sliced", (0, 2), dt.int8), ("sliced", (1,), dt.bool_), ("sliced", (2,), dt.float64)]
EVERY = [(view, dims, dtype) for view in sorted(VIEWS) for dims in DIMS for dtype in DTYPES
         if (view, dims, dtype) not in SPREAD]


@pytest.mark.parametrize("view, dims, dtype", SPREAD + [
    pytest.param(*case, marks=pytest.mark.slow) for case in EVERY])
def test_reductions_over_any_dims_match_numpy(view, dims, dtype):
    layout, size = VIEWS[view]
    buffer = _values(dtype, size)
    source = _gather(buffer, layout)
    kept = tuple(s for a, s in enumerate(layout.shape) if a not in dims)
    for op, function in NUMPY_REDUCTIONS.items():
        if op is OpKind.MEAN and not dtype.is_floating:
            continue
        target = output_dtype(op, dtype)
        for keepdim in (False, True):
            shape = tuple(1 if a in dims else s for a, s in enumerate(layout.shape)) \
                if keepdim else kept
            out_layout = Layout.contiguous(shape)
            loop = reduction_loop(op, dtype, layout, out_layout, dims)
            actual = _run(loop, [buffer], [layout], target, out_layout, out_layout.numel)
            expected = function(source, axis=dims, keepdims=keepdim)
            if op in (OpKind.SUM, OpKind.PROD) and not dtype.is_floating:
                expected = function(source.astype(np.int64), axis=dims, keepdims=keepdim)
            np.testing.assert_allclose(actual.reshape(shape).astype(np.float64),
                                       np.asarray(expected, np.float64), rtol=1e-5,
                                       err_msg=f"{op.value} {dtype.name} {dims} {view}")


@pytest.mark.parametrize("op", [OpKind.ARGMAX, OpKind.ARGMIN])
def test_argmax_and_argmin_keep_the_first_index_and_let_nan_win(op):
    rows = np.array([[1, 3, 3, 0], [2, np.nan, 5, np.nan], [-1, -1, -1, -1], [4, 2, 9, 9]],
                    np.float32)
    layout = Layout.contiguous(rows.shape)
    for dim in (0, 1):
        out_layout = Layout.contiguous((4,))
        loop = reduction_loop(op, dt.float32, layout, out_layout, (dim,))
        actual = _run(loop, [rows.reshape(-1)], [layout], dt.int64, out_layout, 4)
        function = np.argmax if op is OpKind.ARGMAX else np.argmin
        np.testing.assert_array_equal(actual, function(rows, axis=dim))
    integers = np.array([5, 1, 5, 7, 7, 0], np.int32)
    loop = reduction_loop(op, dt.int32, Layout.contiguous((6,)), Layout.contiguous(()), (0,))
    actual = _run(loop, [integers], [Layout.contiguous((6,))], dt.int64, Layout.contiguous(()),
                  1)
    assert actual[0] == (np.argmax if op is OpKind.ARGMAX else np.argmin)(integers)


@pytest.mark.parametrize("dim", [0, 1, 2])
def test_row_ops_along_any_dim_into_strided_outputs(dim):
    layout, size = VIEWS["permuted"]
    buffer = _values(dt.float32, size)
    source = _gather(buffer, layout).astype(np.float64)
    out_layout = Layout.contiguous((5, 4, 3)).permute((2, 1, 0))  # a transposed output
    shifted = source - source.max(axis=dim, keepdims=True)
    exponential = np.exp(shifted)
    expected = {OpKind.SOFTMAX: exponential / exponential.sum(axis=dim, keepdims=True),
                OpKind.LOG_SOFTMAX: shifted - np.log(exponential.sum(axis=dim, keepdims=True))}
    for op, reference in expected.items():
        loop = softmax_loop(op, dt.float32, layout, out_layout, dim)
        actual = _run(loop, [buffer], [layout], dt.float32, out_layout, 60)
        np.testing.assert_allclose(_gather(actual, out_layout), reference, rtol=1e-5, atol=1e-6)
    running = _run(cumsum_loop(dt.float32, layout, out_layout, dim), [buffer], [layout],
                   dt.float32, out_layout, 60)
    np.testing.assert_allclose(_gather(running, out_layout), np.cumsum(source, axis=dim),
                               rtol=1e-5, atol=1e-5)
    integers = _values(dt.int8, size)
    running = _run(cumsum_loop(dt.int8, layout, out_layout, dim), [integers], [layout],
                   dt.int64, out_layout, 60)
    np.testing.assert_array_equal(_gather(running, out_layout),
                                  np.cumsum(_gather(integers, layout).astype(np.int64), axis=dim))


@pytest.mark.parametrize("axes", [1, 2])
def test_norms_over_the_trailing_dims(axes):
    shape = (3, 4, 6)
    x = _values(dt.float32, 72, seed=1)
    weight_shape = shape[3 - axes:]
    count = int(np.prod(weight_shape))
    weight, bias = _values(dt.float32, count, seed=2), _values(dt.float32, count, seed=3)
    layout, weights = Layout.contiguous(shape), Layout.contiguous(weight_shape)
    source = x.reshape(shape).astype(np.float64)
    trailing = tuple(range(3 - axes, 3))
    centered = source - source.mean(axis=trailing, keepdims=True)
    variance = (centered ** 2).mean(axis=trailing, keepdims=True)
    w, b = weight.reshape(weight_shape), bias.reshape(weight_shape)
    layer = centered / np.sqrt(variance + 1e-5) * w + b
    rms = source / np.sqrt((source ** 2).mean(axis=trailing, keepdims=True) + 1e-6) * w
    loop = norm_loop(OpKind.LAYER_NORM, dt.float32, [layout, weights, weights, layout], axes,
                     1e-5)
    actual = _run(loop, [x, weight, bias], [layout, weights, weights], dt.float32, layout, 72)
    np.testing.assert_allclose(actual.reshape(shape), layer, rtol=1e-4, atol=1e-5)
    loop = norm_loop(OpKind.RMS_NORM, dt.float32, [layout, weights, layout], axes, 1e-6)
    actual = _run(loop, [x, weight], [layout, weights], dt.float32, layout, 72)
    np.testing.assert_allclose(actual.reshape(shape), rms, rtol=1e-4, atol=1e-5)


@pytest.mark.skipif(toolchain.unavailable_reason() is not None, reason="no C compiler")
@pytest.mark.parametrize("expression", ["softmax", "log_softmax", "layer_norm", "rms_norm"])
def test_a_value_kept_in_the_output_row_gives_the_same_values(expression, monkeypatch):
    """The last reduction's loop may keep the value the element loop needs (softmax's exp,
    layer norm's centred input) in the output row instead of the element loop computing it
    again: the same operations on the same operands, within four units in the last place."""
    import fuel
    from fuel.compiler import render_c_reduce
    from fuel.nn import functional
    from fuel.runtime import plan as compiled

    rng = np.random.default_rng(len(expression))
    x = rng.standard_normal((6, 5, 77)).astype(np.float32) * 4
    bias = rng.standard_normal(77).astype(np.float32)
    weight = rng.standard_normal(77).astype(np.float32)

    def run():
        fuel.set_plan_cache_capacity(0)
        compiled._compiled_cache.clear()  # render and build the rows anew
        try:
            t = fuel.from_numpy(x) + fuel.from_numpy(bias)
            if expression == "softmax":
                return functional.softmax(t, -1).numpy()
            if expression == "log_softmax":
                return t.log_softmax(-1).numpy()
            if expression == "layer_norm":
                return functional.layer_norm(t, (77,), fuel.from_numpy(weight),
                                             fuel.from_numpy(bias), 1e-5).numpy()
            return (t * (t * t).mean(-1, keepdim=True).add(1e-6).rsqrt()).numpy()
        finally:
            fuel.set_plan_cache_capacity(128)

    def sources():
        kernels = [c.kernel for c in compiled._compiled_cache.values() if hasattr(c, "kernel")]
        kernels += [e.kernel for k in kernels for e in getattr(k, "entries", ())]  # judged
        return [getattr(k, "program", None) for k in kernels]

    kept = run()
    assert any(p is not None and "= out0[i];\n" in p.source.split("for (int64_t i")[-1]
               for p in sources()), "no row kept its value in the output"
    monkeypatch.setattr(render_c_reduce, "KEEP_IN_OUTPUT", False)
    recomputed = run()
    assert not any(p is not None and "] = out0[i]" in p.source for p in sources())
    # The same operations on the same operands; an exp may come from libmvec's vector form in
    # one loop and its scalar form in the other loop's remainder, a last-bit apart.
    np.testing.assert_array_max_ulp(kept, recomputed, maxulp=4)
    assert np.isfinite(kept).all()
