"""The CPU copies bound as C calls (indexing.py): cat (concat.c) against NumPy's concatenate,
dense parts of several dtypes along the first, a middle and the last dim, an empty part, and
a strided part (the NumPy kernel bound instead); index_select (select_rows.c) against
NumPy's take, along every dim, negative and repeated positions, int32 and int64 indices, and
an out-of-range position (the error names it, nothing written)."""

from __future__ import annotations

import numpy as np
import pytest

from fuel.backends import find_backend
from fuel.backends.cpu import indexing
from fuel.compiler import toolchain
from fuel.compiler.foreign import ForeignCall
from fuel.ir import dtype as dt
from fuel.ir.device import BackendId
from fuel.ir.errors import IndexOutOfRange
from fuel.ir.layout import Layout
from fuel.ir.params import AxisParams

CPU = find_backend(BackendId.CPU)


def _concat(parts, dim, layouts=None):
    device = CPU.devices()[0]
    storages = [CPU.upload(device, np.ascontiguousarray(p)) for p in parts]
    layouts = layouts or [Layout.contiguous(p.shape) for p in parts]
    shape = list(layouts[0].shape)
    shape[dim] = sum(layout.shape[dim] for layout in layouts)
    out_layout = Layout.contiguous(tuple(shape))
    output = CPU.allocate(device, dt.from_numpy(parts[0].dtype), out_layout.numel)
    launch = indexing.cat.prepare(storages, [output], layouts + [out_layout], AxisParams(dim))
    launch()
    return launch, np.asarray(CPU.download(output, out_layout))


@pytest.mark.parametrize("dtype", [np.float32, np.int8, np.float64, np.bool_])
@pytest.mark.parametrize("dim", [0, 1, 3])
def test_dense_parts_match_numpy(dtype, dim):
    rng = np.random.default_rng(dim)
    shapes = [[2, 3, 4, 5], [2, 3, 4, 5], [2, 3, 4, 5]]
    for shape, extent in zip(shapes, (3, 0, 2)):
        shape[dim] = extent
    parts = [(rng.standard_normal(s) * 50).astype(dtype) for s in shapes]
    launch, actual = _concat(parts, dim)
    np.testing.assert_array_equal(actual, np.concatenate(parts, axis=dim))
    if toolchain.unavailable_reason() is None:
        assert isinstance(launch, ForeignCall)


@pytest.mark.parametrize("threads", ["1", "2", "3"])
@pytest.mark.parametrize("dim", [0, 1, 3])
def test_large_concats_copy_on_the_team(monkeypatch, threads, dim):
    """From COPY_PARALLEL bytes a concat runs as pool.c's COPY_PARTS in 32 KiB pieces over
    the team (pieces cut inside a part's row, a part of a few bytes, an empty one, several
    outer rows); one thread keeps concat.c."""
    monkeypatch.setenv("FUEL_THREADS", threads)
    rng = np.random.default_rng(dim + 10 * int(threads))
    shapes = [[3, 21, 40, 50], [3, 21, 40, 50], [3, 21, 40, 50], [3, 21, 40, 50]]
    for shape, extent in zip(shapes, (17, 1, 0, 30)):
        shape[dim] = extent
    parts = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    total = sum(p.nbytes for p in parts)
    assert total >= indexing.COPY_PARALLEL
    launch, actual = _concat(parts, dim)
    np.testing.assert_array_equal(actual, np.concatenate(parts, axis=dim))
    if toolchain.unavailable_reason() is None:
        team = indexing._copy_team(total)
        assert (team is None) == (threads == "1")
        assert launch.sizes[0] == (indexing.COPY_PARTS if team else len(parts))


def test_a_strided_part_runs_the_numpy_kernel():
    rng = np.random.default_rng(1)
    base = rng.standard_normal((4, 3)).astype(np.float32)
    transposed = Layout.contiguous((4, 3)).permute((1, 0))
    other = rng.standard_normal((2, 4)).astype(np.float32)
    launch, actual = _concat([base, other], 0, [transposed, Layout.contiguous((2, 4))])
    assert not isinstance(launch, ForeignCall)
    np.testing.assert_array_equal(actual, np.concatenate([base.T, other], axis=0))


def _select(source, index, dim):
    device = CPU.devices()[0]
    storages = [CPU.upload(device, source), CPU.upload(device, index)]
    layouts = [Layout.contiguous(source.shape), Layout.contiguous(index.shape)]
    shape = source.shape[:dim] + index.shape + source.shape[dim + 1:]
    out_layout = Layout.contiguous(shape)
    output = CPU.allocate(device, dt.from_numpy(source.dtype), out_layout.numel)
    launch = indexing.index_select.prepare(storages, [output], layouts + [out_layout],
                                           AxisParams(dim))
    launch()
    return launch, np.asarray(CPU.download(output, out_layout))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int8])
@pytest.mark.parametrize("dim", [0, 1, 2])
def test_index_select_matches_numpy(dtype, dim):
    rng = np.random.default_rng(dim)
    source = (rng.standard_normal((3, 5, 7)) * 50).astype(dtype)
    width = source.shape[dim]
    for index_dtype in (np.int32, np.int64):
        index = np.array([0, width - 1, -1, 1, 1, -width], index_dtype)
        launch, actual = _select(source, index, dim)
        np.testing.assert_array_equal(actual, np.take(source, index, axis=dim))
        if toolchain.unavailable_reason() is None:
            assert isinstance(launch, ForeignCall)


def test_index_select_names_an_index_out_of_range():
    source = np.arange(12, dtype=np.float32).reshape(3, 4)
    with pytest.raises(IndexOutOfRange, match="index 4 is out of range for dim 1 of size 4"):
        _select(source, np.array([0, 4], np.int64), 1)
