"""The float32 matmul's forms for a constant b, against a float64 NumPy reference: the packed
form (b rearranged once into 16-column tiles; fewer than PREPACKED_ROWS rows) and the gemm form
on b's panels packed once (from PREPACKED_ROWS rows), and the constant storages they rely on:
never written in place."""

import numpy as np
import pytest

import fuel
from fuel.backends.cpu import BACKEND, matmul, matmul_gemm
from fuel.backends.cpu.c_library import _kept
from fuel.compiler import toolchain
from fuel.ir import dtype as dt
from fuel.ir.device import CPU
from fuel.ir.errors import InvalidArgument
from fuel.ir.layout import Layout

pytestmark = pytest.mark.skipif(toolchain.unavailable_reason() is not None,
                                reason="no C compiler")
RULE = matmul.CMatmul()


def random(*shape, seed=0):
    return np.random.default_rng(seed + sum(shape)).standard_normal(shape).astype(np.float32)


def constant_view(array: np.ndarray, view) -> tuple:
    """A constant storage over ``array`` (flat) and ``view``'s layout of it (``view`` is
    ``array`` indexed, transposed or sliced)."""
    storage = BACKEND.upload(CPU, array.reshape(-1).copy())
    storage.constant = True
    start = (view.__array_interface__["data"][0] - array.__array_interface__["data"][0])
    strides = tuple(s // 4 for s in view.strides)
    return storage, Layout(view.shape, strides, start // 4)


def launch(a: np.ndarray, storage, layout: Layout, n: int):
    out = BACKEND.allocate(CPU, dt.float32, a.shape[0] * n)
    out.buffer[...] = np.nan  # every output element must be written
    rows = BACKEND.upload(CPU, a.copy())  # held while the launcher reads it
    launcher = RULE.prepare([rows, storage], [out], [Layout.contiguous(a.shape), layout,
                                                     Layout.contiguous((a.shape[0], n))], None)
    launcher()
    return launcher, out.buffer.reshape(a.shape[0], n)


def check(got: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    """Within the float32 summation bound, which grows with k."""
    reference = a.astype(np.float64) @ b.astype(np.float64)
    bound = np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)
    assert np.all(np.abs(got - reference) <= (a.shape[1] + 2) * 2.0 ** -24 * bound + 1e-30)


def form_of(launcher) -> str:
    """Which form a launcher runs: "packed", "panels" or another."""
    data = getattr(launcher, "data", None)
    return "packed" if hasattr(data, "packed") else "panels" if hasattr(data, "panels") \
        else "other"


@pytest.mark.parametrize("m", [1, 2, 5, 8, 13, 39, 40, 41, 47, 64, 65, 130])
@pytest.mark.parametrize("n", [1, 5, 16, 17, 40, 47, 80])
@pytest.mark.parametrize("k", [1, 7, 33, 384, 600])
def test_constant_weight_forms_on_odd_sizes_of_both_weight_layouts(m, n, k):
    """Fewer than PREPACKED_ROWS rows: the packed form; from there the panels (K blocks of
    256 and panels of 32 columns with AVX-512, a half-width last panel, rows past a sliver)."""
    a = random(m, k)
    weight = random(n, k, seed=1)  # Linear's (out, in) rows, read transposed
    storage, layout = constant_view(weight, weight.T)
    launcher, got = launch(a, storage, layout, n)
    assert form_of(launcher) == ("packed" if m < matmul.PREPACKED_ROWS else "panels")
    check(got, a, weight.T)
    b = random(k + 3, n + 2, seed=2)  # a (k, n) view inside a larger row-major constant
    storage, layout = constant_view(b, b[2:2 + k, 1:1 + n])
    launcher, got = launch(a, storage, layout, n)
    assert form_of(launcher) == ("packed" if m < matmul.PREPACKED_ROWS else "panels")
    check(got, a, b[2:2 + k, 1:1 + n])


def test_writable_weights_keep_their_forms():
    """A b that may change is packed by no launch ahead of it (neither copy is kept)."""
    weight = random(40, 24, seed=1)
    storage, layout = constant_view(weight, weight.T)
    storage.constant = False
    for rows in (3, 12, 65):
        launcher, got = launch(random(rows, 24), storage, layout, 40)
        assert form_of(launcher) == "other"
        check(got, random(rows, 24), weight.T)
    assert storage not in _kept


def test_the_packed_copies_are_made_once_per_weight():
    weight = random(48, 32, seed=1)
    storage, layout = constant_view(weight, weight.T)
    for rows in (1, 3, 5, 12, 39):
        launch(random(rows, 32), storage, layout, 48)
    assert len(_kept[storage]) == 1  # the packed form's copy
    for rows in (40, 41, 200):
        launch(random(rows, 32), storage, layout, 48)
    assert len(_kept[storage]) == 2  # and the panels


def test_the_judge_offers_the_panels_first_for_a_constant_weight_only():
    """The candidates of a launch depend on whether b is constant: the panels (the rule's
    choice) for a weight, the gemm form that packs per launch for a b that may change."""
    layouts = [Layout.contiguous((48, 384)), Layout((384, 1536), (1, 384), 0),
               Layout.contiguous((48, 1536))]
    names = [v.name for v in RULE.variants(layouts, None, CPU, (False, True))]
    assert names[0].startswith("gemm-panels/") and not any(
        n.startswith("gemm/") for n in names)
    names = [v.name for v in RULE.variants(layouts, None, CPU, (False, False))]
    assert not any(n.startswith("gemm-panels/") for n in names)
    assert names == [v.name for v in RULE.variants(layouts, None, CPU)]


def test_the_judge_offers_no_openblas_for_a_weight_the_packed_form_reads():
    """A constant weight of a few-row product: the packed form's candidates (the rule's
    first), not OpenBLAS, which packs the weight again per call; a b that may change keeps
    OpenBLAS among its candidates."""
    for rows in (1, 8):
        layouts = [Layout.contiguous((rows, 512)), Layout((512, 1000), (1, 512), 0),
                   Layout.contiguous((rows, 1000))]
        constant = [v.name for v in RULE.variants(layouts, None, CPU, (False, True))]
        writable = [v.name for v in RULE.variants(layouts, None, CPU, (False, False))]
        assert constant
        assert not any(n.startswith("openblas") for n in constant)
        if matmul.openblas_entries() is not None:
            assert any(n.startswith("openblas") for n in writable)
        assert [n for n in writable if not n.startswith("openblas")] == constant


def test_avx2_packed_tile_without_avx512(monkeypatch):
    """The AVX2 tile (6 rows, two 8-wide halves; a machine without AVX-512) on odd sizes."""
    built = toolchain.build("#define NO_AVX512 1\n" + matmul.source(),
                            "matmul_float32_avx2_packed_test", toolchain.openmp_flags())
    monkeypatch.setattr(matmul, "library", lambda: built.function)
    for m, n, k in ((1, 5, 7), (7, 9, 17), (5, 33, 100), (4, 1536, 384)):
        a, weight = random(m, k), random(n, k, seed=1)
        storage, layout = constant_view(weight, weight.T)
        launcher, got = launch(a, storage, layout, n)
        assert hasattr(launcher.data, "packed")
        check(got, a, weight.T)


def test_panels_without_avx512(monkeypatch):
    """The panels as the AVX2 build lays them out (16-column panels, no half width: the
    library says its geometry) on odd sizes."""
    built = toolchain.build(matmul_gemm.source(), "matmul_gemm_float32_avx2_test",
                            toolchain.openmp_flags() + ("-mno-avx512f",))
    monkeypatch.setattr(matmul_gemm, "library", lambda: built.function)
    matmul_gemm.geometry.cache_clear()
    try:
        assert matmul_gemm.geometry()[0] == 16
        for m, n, k in ((40, 5, 7), (45, 33, 300), (64, 47, 600)):
            a, weight = random(m, k), random(n, k, seed=1)
            storage, layout = constant_view(weight, weight.T)
            launcher, got = launch(a, storage, layout, n)
            assert form_of(launcher) == "panels"
            check(got, a, weight.T)
    finally:
        matmul_gemm.geometry.cache_clear()


@pytest.mark.parametrize("rows", [5, 12, 50, 100])
def test_threads_split_the_tiles_with_the_same_result(monkeypatch, rows):
    a, weight = random(rows, 384), random(1000, 384, seed=1)
    storage, layout = constant_view(weight, weight.T)
    cached = (matmul.packed_arguments, matmul.prepacked_arguments, matmul.gemm_arguments)
    results = []
    for threads in ("1", "2"):
        monkeypatch.setenv("FUEL_THREADS", threads)
        for function in cached:
            function.cache_clear()
        results.append(launch(a, storage, layout, 1000)[1].copy())
    for function in cached:
        function.cache_clear()
    check(results[1], a, weight.T)
    assert np.array_equal(results[0], results[1])  # each output sums k in the same order


def test_front_end_constant_weights_run_packed_and_match_numpy():
    x, w = random(12, 384), random(1536, 384, seed=1)
    weight = fuel.from_numpy(w, constant=True)
    with fuel.profile() as profile:
        got = (fuel.from_numpy(x) @ weight.transpose(0, 1)).numpy()
    check(got, x, w.T)
    assert [r.kernel_source for r in profile.launches if r.op == "matmul"] == ["c"]
    assert len(_kept[weight.realize()._node.buffer]) == 1  # its packed copy, made once


def test_constant_tensors_are_copies_and_refuse_writes():
    source = np.ones((4, 4), np.float32)
    weight = fuel.from_numpy(source, constant=True)
    source[...] = 7.0  # the caller's array is not the tensor's
    assert np.array_equal(weight.numpy(), np.ones((4, 4), np.float32))
    weight[0] = 3.0
    with pytest.raises(InvalidArgument, match="constant tensor"):
        weight.realize()
    with pytest.raises(InvalidArgument, match="constant tensor"):
        BACKEND.write_from_host(fuel.from_numpy(source, constant=True)._node.buffer,
                                np.zeros(16, np.float32))


def test_jit_state_update_of_a_constant_gets_a_new_storage():
    """A captured state update (``assign``) of a constant tensor is not written into its
    storage: the tensor moves to a new one, the constant's values stay."""
    from fuel.frontend.backward import assign

    start = np.arange(4, dtype=np.float32)
    state = fuel.from_numpy(start, constant=True)
    constant = state.realize()._node.buffer

    def step(x):
        assign([(state, state + x)])
        return state.sum()

    jitted = fuel.jit(step)
    for _ in range(3):
        jitted(fuel.from_numpy(np.ones(4, np.float32)))
    assert np.array_equal(state.numpy(), start + 3.0)
    assert state.realize()._node.buffer is not constant
    assert np.array_equal(constant.buffer, start)
