"""The C float32 matmul (fuel/backends/cpu/matmul.c) against a float64 NumPy reference, forced
on every shape (whatever the selection rule says) and through the front end."""

import numpy as np
import pytest

import fuel
from fuel.backends.cpu import BACKEND, matmul
from fuel.compiler import toolchain
from fuel.dispatch.kernel import global_table
from fuel.ir import dtype as dt
from fuel.ir.device import CPU, BackendId
from fuel.ir.layout import Layout
from fuel.ir.ops import OpKind

pytestmark = pytest.mark.skipif(toolchain.unavailable_reason() is not None,
                                reason="no C compiler")
FORCED = matmul.CMatmul(forced=True)


def storage_and_layout(array: np.ndarray):
    """A storage over ``array``'s base buffer and the layout of ``array`` within it."""
    base = array
    while base.base is not None and isinstance(base.base, np.ndarray):
        base = base.base
    flat = base.reshape(-1)
    start = (array.__array_interface__["data"][0] - flat.__array_interface__["data"][0])
    strides = tuple(s // array.itemsize for s in array.strides)
    return BACKEND.upload(CPU, flat), Layout(array.shape, strides, start // array.itemsize)


def run(kernel, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    shape = np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1])
    (sa, la), (sb, lb) = storage_and_layout(a), storage_and_layout(b)
    out = BACKEND.allocate(CPU, dt.float32, int(np.prod(shape)))
    out.buffer[...] = np.nan  # every output element must be written
    kernel([sa, sb], [out], [la, lb, Layout.contiguous(shape)], None)
    return out.buffer.reshape(shape)


def check(got: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    """Within the float32 summation bound, which grows with k."""
    reference = np.matmul(a.astype(np.float64), b.astype(np.float64))
    bound = np.matmul(np.abs(a).astype(np.float64), np.abs(b).astype(np.float64))
    k = a.shape[-1]
    assert got.shape == reference.shape
    assert np.all(np.abs(got - reference) <= (k + 2) * 2.0 ** -24 * bound + 1e-30)


def random(*shape, seed=0):
    return np.random.default_rng(seed + sum(shape)).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("m", [1, 2, 3, 4, 5, 7, 13])
@pytest.mark.parametrize("n", [1, 3, 5, 9, 25, 33])
@pytest.mark.parametrize("k", [1, 7, 9, 17, 100])
def test_odd_sizes_both_forms(m, n, k):
    a = random(m, k)
    weight = random(n, k, seed=1)
    assert matmul.plan_launch(storage_and_layout(a)[1:] + storage_and_layout(weight.T)[1:]
                              + (Layout.contiguous((m, n)),)).form == matmul.DOT
    check(run(FORCED, a, weight.T), a, weight.T)
    b = random(k, n, seed=2)
    check(run(FORCED, a, b), a, b)


def test_avx2_dot_tile_without_avx512(monkeypatch):
    """The AVX2 dot tile (a machine without AVX-512; this one runs the wide tile) on odd
    sizes, tails of k and of the weight rows included."""
    from fuel.compiler import toolchain

    if toolchain.unavailable_reason() is not None:
        pytest.skip("no C compiler")
    built = toolchain.build("#define NO_AVX512 1\n" + matmul.source(),
                            "matmul_float32_avx2_test", toolchain.openmp_flags())
    monkeypatch.setattr(matmul, "library", lambda: built.function)
    for m, n, k in ((1, 5, 7), (4, 9, 17), (13, 33, 100), (12, 384, 1536)):
        a, weight = random(m, k), random(n, k, seed=1)
        check(run(FORCED, a, weight.T), a, weight.T)


@pytest.mark.parametrize("m, n, k", [(12, 1536, 384), (12, 384, 1536), (64, 100, 384),
                                     (130, 70, 33), (29, 19, 1100), (13, 9, 2049)])
def test_model_sizes_and_large_rows(m, n, k):
    a, weight, b = random(m, k), random(n, k, seed=1), random(k, n, seed=2)
    check(run(FORCED, a, weight.T), a, weight.T)
    check(run(FORCED, a, b), a, b)


def test_strided_flipped_and_transposed_operands():
    a = random(9, 40)[::2, ::3]  # rows and k strided: the rows form broadcasts a[i, l]
    b = random(14, 21, seed=1)[::-1]  # flipped rows, unit column stride
    check(run(FORCED, a, b), a, b)
    a_t = random(11, 6).T  # k along a's rows
    check(run(FORCED, a_t, b[:11]), a_t, b[:11])
    # neither form fits (b strided along both dims): the kernel runs OpenBLAS
    c = random(14, 42, seed=3)[:, ::2]
    layouts = (storage_and_layout(a)[1], storage_and_layout(c)[1], Layout.contiguous((5, 21)))
    assert matmul.plan_launch(layouts, forced=True).form is None
    check(run(FORCED, a, c), a, c)


def test_batched_broadcast_operands():
    a = random(3, 1, 5, 7)
    b = random(4, 7, 6, seed=1)
    check(run(FORCED, a, b), a, b)
    weight = random(4, 6, 7, seed=2)  # batched transposed views
    check(run(FORCED, a, np.swapaxes(weight, -1, -2)), a, np.swapaxes(weight, -1, -2))
    x = random(8, 12, 384)  # a shared weight: the batch folds into rows
    w = random(96, 384, seed=3)
    layouts = (storage_and_layout(x)[1], storage_and_layout(w.T)[1],
               Layout.contiguous((8, 12, 96)))
    plan = matmul.plan_launch(layouts, forced=True)
    assert (plan.m, plan.batch) == (96, ())
    check(run(FORCED, x, w.T), x, w.T)
    expanded = np.broadcast_to(random(2, 1, 9, 16, seed=4), (2, 3, 9, 16))  # stride 0
    right = np.broadcast_to(random(1, 16, 5, seed=5), (3, 16, 5))
    check(run(FORCED, expanded, right), expanded, right)


@pytest.mark.parametrize("capacity", [7, 64, 200])
def test_decode_attention_shapes(capacity):
    """SmolLM2's grouped-query decode: (kv heads, group, d) @ keys^T, then probs @ values."""
    q = random(3, 3, 64)
    keys = random(3, capacity, 64, seed=1)
    values = random(3, capacity, 64, seed=2)
    scores = run(FORCED, q, np.swapaxes(keys, 1, 2))
    check(scores, q, np.swapaxes(keys, 1, 2))
    probs = np.exp(scores - scores.max(-1, keepdims=True)).astype(np.float32)
    check(run(FORCED, probs, values), probs, values)


def test_empty_dims():
    for a_shape, b_shape in [((0, 5), (5, 3)), ((4, 0), (0, 3)), ((4, 5), (5, 0)),
                             ((0, 2, 3), (3, 4)), ((2, 3, 0), (2, 0, 5))]:
        a, b = random(*a_shape), random(*b_shape, seed=1)
        got = run(FORCED, a, b)
        np.testing.assert_array_equal(got, np.matmul(a, b))


def test_nan_and_inf_propagate_like_numpy():
    a = random(5, 19)
    b = random(19, 11, seed=1)
    a[1, 3] = np.nan
    a[2, 18] = np.inf
    b[4, 7] = -np.inf
    b[0, 2] = np.nan
    with np.errstate(all="ignore"):
        reference = np.matmul(a.astype(np.float64), b.astype(np.float64))
    for b_operand in (b, np.ascontiguousarray(b.T).T):
        got = run(FORCED, a, b_operand)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(reference))
        np.testing.assert_array_equal(np.isposinf(got), np.isposinf(reference))
        np.testing.assert_array_equal(np.isneginf(got), np.isneginf(reference))


def test_threads_split_the_same_result(monkeypatch):
    monkeypatch.setenv("FUEL_THREADS", "2")
    monkeypatch.setattr(matmul, "PARALLEL_WORK", 0)
    matmul.launch_arguments.cache_clear()  # plans memoized under the real threshold
    assert matmul.launch_arguments((Layout.contiguous((12, 384)), Layout((384, 1536), (1, 384)),
                                    Layout.contiguous((12, 1536))), True, 2)[1][0][1] == 2
    for a, b in [(random(12, 384), random(1536, 384, seed=1).T),
                 (random(3, 3, 50), random(3, 50, 64, seed=2)),
                 (random(7, 33), random(33, 45, seed=3))]:
        check(run(FORCED, a, b), a, b)
    matmul.launch_arguments.cache_clear()


def test_threads_split_the_same_result_on_the_convolutions_pool(monkeypatch):
    """Where conv.c is loaded, the matmul's C forms run their units on its work pool (handed
    over once): the same results as one thread, every form, batch dims included."""
    from fuel.backends.cpu import convolution_c

    if convolution_c.library() is None:
        pytest.skip("no convolution library")
    assert matmul.library() is not None and matmul._pool  # handed over at this call
    monkeypatch.setenv("FUEL_THREADS", "2")
    monkeypatch.setattr(matmul, "PARALLEL_WORK", 0)
    matmul.launch_arguments.cache_clear()
    for a, b in [(random(1, 384), random(1000, 384, seed=1).T),
                 (random(12, 384), random(1536, 384, seed=1).T),
                 (random(3, 3, 50), random(3, 50, 64, seed=2)),
                 (random(7, 33), random(33, 45, seed=3)),
                 (random(5, 64), random(64, 300, seed=4))]:
        check(run(FORCED, a, b), a, b)
    matmul.launch_arguments.cache_clear()


def test_front_end_runs_the_c_kernel_and_attributes_it():
    entry = global_table().lookup_entry(OpKind.MATMUL, (dt.float32,) * 3, BackendId.CPU)
    assert entry.kernel_source == "c"
    x = random(2, 12, 384)
    w = random(1536, 384, seed=1)
    got = (fuel.from_numpy(x) @ fuel.from_numpy(w).transpose(0, 1)).numpy()
    check(got, x, w.T)
    q, keys = random(9, 1, 64), random(3, 20, 64, seed=2)
    expanded = fuel.from_numpy(keys).reshape(3, 1, 20, 64).expand(3, 3, 20, 64)
    scores = fuel.from_numpy(q).reshape(3, 3, 1, 64) @ expanded.transpose(2, 3)
    reference_keys = np.broadcast_to(keys[:, None], (3, 3, 20, 64))
    check(scores.numpy(), q.reshape(3, 3, 1, 64), np.swapaxes(reference_keys, 2, 3))


def test_selection_rule():
    """Small row counts in a form the kernel fits run C; large ones and ill-fitting strides
    run OpenBLAS (the rule is stated in matmul.py and docs/ARCHITECTURE.md)."""
    def form(a_shape, b_shape, transposed, out_shape):
        b = np.zeros(b_shape, np.float32)
        b = np.swapaxes(b, -1, -2) if transposed else b
        layouts = (Layout.contiguous(a_shape), storage_and_layout(b)[1],
                   Layout.contiguous(out_shape))
        return matmul.plan_launch(layouts)

    assert form((12, 384), (1536, 384), True, (12, 1536)).form == matmul.DOT
    assert form((matmul.C_ROWS + 1, 384), (1536, 384), True, (33, 1536)).form == matmul.DOT
    most = matmul.DOT_ROWS_MOST
    assert form((most + 1, 384), (1536, 384), True, (most + 1, 1536)).form is None
    assert form((matmul.C_ROWS + 1, 384), (384, 200), False, (33, 200)).form is None
    assert form((8, 128, 384), (1536, 384), True, (8, 128, 1536)).form is None  # m = 1024
    assert form((3, 3, 512), (3, 512, 64), False, (3, 3, 64)).form == matmul.ROWS
    assert form((1, 512), (512, 64), False, (1, 64)).form is None  # one row: OpenBLAS
    assert form((12, 384), (384, 1536), False, (12, 1536)).form is None  # wide b


@pytest.mark.parametrize("m", [64, 65, 130])
@pytest.mark.parametrize("n", [1, 5, 33, 100])
@pytest.mark.parametrize("k", [1, 7, 300])
def test_gemm_form_odd_sizes(m, n, k):
    """The gemm form (the convolution's register-tiled GEMM) on a transposed weight and on
    (k, n) rows: edge slivers and panels, K blocks past KC, every output element written."""
    from fuel.backends.cpu import matmul_gemm

    if matmul_gemm.library() is None:
        pytest.skip("no C compiler")
    a, weight, b = random(m, k), random(n, k, seed=1), random(k, n, seed=2)
    for operand in (weight.T, b):
        check(run(GEMM, a, operand), a, operand)


def test_gemm_form_strided_rows():
    """Rows of a and of the weight further apart than k (slices of wider matrices)."""
    a = random(100, 50)[:, :40]
    weight = random(70, 48, seed=1)[:, :40]
    check(run(GEMM, a, weight.T), a, weight.T)


def test_gemm_form_batched_broadcast_and_attention_strides():
    """Batch dims walked through their strides: a batch of products, a weight shared by the
    batch (stride 0, folded where it can be), and attention's q @ k.T over heads read from one
    fused projection (rows 3 heads apart, k transposed)."""
    a, b = random(3, 70, 20), random(3, 20, 9, seed=1)
    check(run(GEMM, a, b), a, b)
    shared = random(20, 9, seed=2)
    check(run(GEMM, random(2, 3, 65, 20), shared), random(2, 3, 65, 20), shared)
    qkv = random(2, 80, 3 * 4 * 8, seed=3).reshape(2, 80, 3, 4, 8)
    q = qkv[:, :, 0].transpose(0, 2, 1, 3)  # (batch, heads, rows, 8), rows 96 apart
    k = qkv[:, :, 1].transpose(0, 2, 3, 1)  # (batch, heads, 8, rows): k transposed
    check(run(GEMM, q, k), q, k)


def test_the_rule_gives_many_rows_to_the_gemm_form():
    """Past the C forms' bounds the rule's launcher is the gemm form's (one foreign call of
    its library), and its result is the product."""
    from fuel.backends.cpu import matmul_gemm

    if matmul_gemm.library() is None:
        pytest.skip("no C compiler")
    m = matmul.DOT_ROWS_MOST + 1
    a, weight = random(m, 50), random(40, 50, seed=1)
    (sa, la), (sb, lb) = storage_and_layout(a), storage_and_layout(weight.T)
    out = BACKEND.allocate(CPU, dt.float32, m * 40)
    launcher = matmul.CMatmul().prepare([sa, sb], [out], [la, lb, Layout.contiguous((m, 40))],
                                        None)
    assert launcher.function is matmul_gemm.library()
    launcher()
    check(out.buffer.reshape(m, 40), a, weight.T)


def GEMM(inputs, outputs, layouts, params):
    """The gemm form's launch, whatever the rule would pick."""
    from fuel.backends.cpu import matmul_gemm

    if matmul_gemm.library() is None:
        pytest.skip("no C compiler")
    sizes = matmul.gemm_arguments(tuple(layouts), 2)
    assert sizes is not None
    matmul_gemm.prepare(sizes, inputs, outputs, layouts, params)()
