"""The float32 matmul's packed form (a constant b rearranged once into 16-column tiles) against
a float64 NumPy reference, and the constant storages it relies on: never written in place."""

import numpy as np
import pytest

import fuel
from fuel.backends.cpu import BACKEND, matmul
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


@pytest.mark.parametrize("m", [1, 2, 5, 11, 12, 13, 25, 64])
@pytest.mark.parametrize("n", [1, 5, 16, 17, 40])
@pytest.mark.parametrize("k", [1, 7, 33, 384])
def test_packed_form_on_odd_sizes_of_both_weight_layouts(m, n, k):
    a = random(m, k)
    weight = random(n, k, seed=1)  # Linear's (out, in) rows, read transposed
    storage, layout = constant_view(weight, weight.T)
    launcher, got = launch(a, storage, layout, n)
    assert hasattr(launcher.data, "packed")  # the packed form ran
    check(got, a, weight.T)
    b = random(k + 3, n + 2, seed=2)  # a (k, n) view inside a larger row-major constant
    storage, layout = constant_view(b, b[2:2 + k, 1:1 + n])
    _, got = launch(a, storage, layout, n)
    check(got, a, b[2:2 + k, 1:1 + n])


def test_more_rows_and_writable_weights_keep_their_forms():
    """From 65 rows, or with a b that may change, the packed form does not take the launch."""
    weight = random(40, 24, seed=1)
    storage, layout = constant_view(weight, weight.T)
    launcher, got = launch(random(65, 24), storage, layout, 40)
    assert not hasattr(getattr(launcher, "data", None), "packed")
    check(got, random(65, 24), weight.T)
    storage.constant = False
    launcher, got = launch(random(12, 24), storage, layout, 40)
    assert not hasattr(getattr(launcher, "data", None), "packed")
    check(got, random(12, 24), weight.T)


def test_the_packed_copy_is_made_once_per_weight():
    weight = random(48, 32, seed=1)
    storage, layout = constant_view(weight, weight.T)
    for rows in (1, 3, 12):
        launch(random(rows, 32), storage, layout, 48)
    assert len(_kept[storage]) == 1


def test_avx2_packed_tile_without_avx512(monkeypatch):
    """The AVX2 tile (6 rows, two 8-wide halves; a machine without AVX-512) on odd sizes."""
    built = toolchain.build("#define NO_AVX512 1\n" + matmul.SOURCE.read_text(),
                            "matmul_float32_avx2_packed_test", toolchain.openmp_flags())
    monkeypatch.setattr(matmul, "library", lambda: built.function)
    for m, n, k in ((1, 5, 7), (7, 9, 17), (13, 33, 100), (12, 1536, 384)):
        a, weight = random(m, k), random(n, k, seed=1)
        storage, layout = constant_view(weight, weight.T)
        launcher, got = launch(a, storage, layout, n)
        assert hasattr(launcher.data, "packed")
        check(got, a, weight.T)


def test_threads_split_the_tiles_with_the_same_result(monkeypatch):
    a, weight = random(12, 384), random(1000, 384, seed=1)
    storage, layout = constant_view(weight, weight.T)
    results = []
    for threads in ("1", "2"):
        monkeypatch.setenv("FUEL_THREADS", threads)
        matmul.packed_arguments.cache_clear()
        results.append(launch(a, storage, layout, 1000)[1].copy())
    matmul.packed_arguments.cache_clear()
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
