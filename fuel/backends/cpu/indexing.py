"""NumPy kernels for indexing, concatenation, padding, triangles and generators."""

from __future__ import annotations

import ctypes
import functools
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np

from fuel.backends.cpu.arrays import STRIDED, array_kernel, kernel_list, output, view
from fuel.backends.cpu.c_library import address, entry_point
from fuel.compiler.foreign import ForeignCall
from fuel.ir import dtype as dt
from fuel.ir.errors import IndexOutOfRange
from fuel.ir.layout import Layout
from fuel.ir.ops import OpKind

KERNELS = kernel_list()
INDEX_DTYPES = (dt.int32, dt.int64)
SHORT_INDEX = 256  # positions checked as a Python list up to this many
INDEXING_SOURCE = Path(__file__).with_name("indexing.c")
MAX_COPY_DIMS = 16  # indexing.c's MAX_DIMS


def check_indices(index: np.ndarray, size: int, dim: int) -> np.ndarray:
    """Wrap negative indices; raise IndexOutOfRange naming the first bad one."""
    bad = (index < -size) | (index >= size)
    if bad.any():
        first = int(index[bad].reshape(-1)[0])
        raise IndexOutOfRange(f"index {first} is out of range for dim {dim} of size {size}")
    return np.where(index < 0, index + size, index)


@KERNELS.kernel(OpKind.GATHER, [(d, i, d) for d in dt.ALL_DTYPES for i in INDEX_DTYPES],
                STRIDED)
def gather(inputs, outputs, layouts, params):
    source = view(inputs[0], layouts[0])
    index = check_indices(view(inputs[1], layouts[1]), source.shape[params.dim], params.dim)
    region = tuple(
        slice(None) if axis == params.dim else slice(0, size)
        for axis, size in enumerate(index.shape)
    )
    output(outputs[0], layouts[-1])[...] = np.take_along_axis(source[region], index,
                                                              axis=params.dim)


GATHER_SOURCE = Path(__file__).with_name("gather_rows.c")
INDEX_ROWS = Path(__file__).with_name("index_rows.h")  # shared with scatter_rows.c


def rows_source(path: Path) -> str:
    """A last-dim gather or scatter kernel's source: index_rows.h, then ``path``."""
    return INDEX_ROWS.read_text() + path.read_text()


def rows_failure(positions, layout: Layout, width: int, dim: int
                 ) -> Callable[[int], IndexOutOfRange]:
    """The error of a rows kernel's status ``code`` (1 + the flat position of the first index
    out of range): names the index, the dim and its size."""
    def failure(code: int) -> IndexOutOfRange:
        bad = int(view(positions, layout).reshape(-1)[code - 1])
        return IndexOutOfRange(f"index {bad} is out of range for dim {dim} of size {width}")

    return failure


def _prepare_gather(inputs, outputs, layouts, params):
    """The bound launcher of gather: one ForeignCall of ``gather_rows.c`` (run in a replay's
    C launch sequence) along the last dim of dense operands whose rows match (a loss picking
    each row's target); else the NumPy kernel bound."""
    source, index, out = layouts
    shape = source.shape
    item = inputs[0].buffer.itemsize
    function = None
    if len(shape) >= 1 and params.dim in (-1, len(shape) - 1) and index.numel \
            and index.shape[:-1] == shape[:-1] and out.shape == index.shape \
            and all(layout.is_contiguous() for layout in layouts) \
            and item == inputs[0].dtype.itemsize and item in (1, 2, 4, 8) \
            and not inputs[0].buffer.dtype.hasobject:
        function = entry_point("gather_rows", lambda: rows_source(GATHER_SOURCE))
    if function is None:
        return functools.partial(gather, inputs, outputs, layouts, params)
    width = shape[-1]
    status = (ctypes.c_int64 * 1)()
    data = (ctypes.c_void_p * 4)(address(inputs[0], source), address(inputs[1], index),
                                 address(outputs[0], out), ctypes.addressof(status))
    sizes = (ctypes.c_int64 * 5)(math.prod(shape[:-1]), width, index.shape[-1],
                                 inputs[1].buffer.itemsize, item)
    return ForeignCall(function, data, sizes, None, status,
                       rows_failure(inputs[1], index, width, len(shape) - 1))


gather.prepare = _prepare_gather
gather.revision_source = rows_source(GATHER_SOURCE)


@KERNELS.kernel(OpKind.INDEX_SELECT,
                [(d, i, d) for d in dt.ALL_DTYPES for i in INDEX_DTYPES], STRIDED)
@array_kernel
def index_select(source, index, out, params):
    index = check_indices(index, source.shape[params.dim], params.dim)
    np.take(source, index, axis=params.dim, out=out)


SELECT_SOURCE = Path(__file__).with_name("select_rows.c")
_numpy_select = index_select.prepare


def _prepare_index_select(inputs, outputs, layouts, params):
    """The bound launcher of index_select: one ForeignCall of ``select_rows.c`` (run in a
    replay's C launch sequence: a nearest Resize's rows and columns) for dense operands and a
    1-d index; else the NumPy kernel bound."""
    source, index, out = layouts
    rank = len(source.shape)
    dim = params.dim % rank if rank else 0
    item = inputs[0].buffer.itemsize
    function = None
    if (rank and len(index.shape) == 1 and index.numel and out.numel
            and all(layout.is_contiguous() for layout in layouts)
            and out.shape == source.shape[:dim] + index.shape + source.shape[dim + 1:]
            and not any(s.dtype.is_packed or s.dtype.is_quantized or s.buffer.dtype.hasobject
                        for s in (inputs[0], outputs[0]))
            and item == outputs[0].buffer.itemsize):
        function = entry_point("select_rows", lambda: rows_source(SELECT_SOURCE))
    if function is None:
        return _numpy_select(inputs, outputs, layouts, params)
    width = source.shape[dim]
    status = (ctypes.c_int64 * 1)()
    data = (ctypes.c_void_p * 4)(address(inputs[0], source), address(inputs[1], index),
                                 address(outputs[0], out), ctypes.addressof(status))
    sizes = (ctypes.c_int64 * 5)(math.prod(source.shape[:dim]), width, index.shape[0],
                                 math.prod(source.shape[dim + 1:]) * item,
                                 inputs[1].buffer.itemsize)
    return ForeignCall(function, data, sizes, None, status,
                       rows_failure(inputs[1], index, width, dim))


index_select.prepare = _prepare_index_select
index_select.revision_source = rows_source(SELECT_SOURCE)


@KERNELS.kernel(OpKind.CAT, [(d, d) for d in dt.ALL_DTYPES], STRIDED)
def cat(inputs, outputs, layouts, params):
    parts = [view(s, layout) for s, layout in zip(inputs, layouts)]
    np.concatenate(parts, axis=params.dim, out=output(outputs[0], layouts[-1]))


CONCAT_SOURCE = Path(__file__).with_name("concat.c")


def _prepare_cat(inputs, outputs, layouts, params):
    """The bound launcher of cat: one ForeignCall of ``concat.c`` (run in a replay's C launch
    sequence: squeezenet's channel concats, 71 -> 40 us at 128 x 55 x 55) for dense operands
    of one plain dtype; else the NumPy kernel bound."""
    out = layouts[-1]
    item = outputs[0].buffer.itemsize
    rank = len(out.shape)
    function = None
    if rank and all(layout.is_contiguous() or not layout.numel for layout in layouts) and not any(
            s.dtype.is_packed or s.dtype.is_quantized or s.buffer.dtype.hasobject
            or s.buffer.itemsize != item for s in (*inputs, outputs[0])):
        function = entry_point("concat", CONCAT_SOURCE.read_text)
    if function is None:
        return functools.partial(cat, inputs, outputs, layouts, params)
    dim = params.dim % rank
    outer = math.prod(out.shape[:dim])
    inner = math.prod(out.shape[dim + 1:]) * item
    data = (ctypes.c_void_p * (1 + len(inputs)))(
        address(outputs[0], out), *(address(s, layout) for s, layout in zip(inputs, layouts)))
    head = [len(inputs), outer, out.shape[dim] * inner]
    team = _copy_team(out.numel * item)
    if team is not None:  # pool.c's COPY_PARTS: on the convolutions' work pool
        function, head = team[0], [*team[1:], *head]
    sizes = (ctypes.c_int64 * (len(head) + len(inputs)))(
        *head, *(layout.shape[dim] * inner for layout in layouts[:-1]))
    return ForeignCall(function, data, sizes)


# From this many bytes a concat copies on every thread, in 32 KiB pieces on the
# convolutions' work pool (pool.c's COPY_PARTS), not on the calling thread alone (two
# threads, in-process A/B, median: squeezenet's 2 x 64 x 55 x 55 101 -> 50 us, 2 x 128 x 27
# x 27 26 -> 16, 2 x 256 x 13 x 13 10.4 -> 7.4; in the model, its eight concats 481-583 ->
# 337-358 us a call).
COPY_PARALLEL = 1 << 18
COPY_PARTS = 9


def _copy_team(total: int) -> tuple | None:
    """(pool.c's entry point, COPY_PARTS, the team) for a concat of ``total`` bytes, or None
    (one thread copies it with concat.c)."""
    from fuel.backends.cpu.convolution_c import MAX_POOL, library
    from fuel.backends.cpu.quantized import thread_count

    threads = thread_count()
    if total < COPY_PARALLEL or threads < 2:
        return None
    function = library(MAX_POOL)
    return None if function is None else (function, COPY_PARTS, threads)


cat.prepare = _prepare_cat
cat.revision_source = CONCAT_SOURCE.read_text()


def _triangle(lower: bool):
    def triangle(inputs, outputs, layouts, params):
        source = view(inputs[0], layouts[0])
        rows, columns = source.shape[-2:]
        keep = (np.tri(rows, columns, params.diagonal, dtype=bool) if lower
                else ~np.tri(rows, columns, params.diagonal - 1, dtype=bool))
        output(outputs[0], layouts[-1])[...] = np.where(keep, source, np.zeros((), source.dtype))

    triangle.__qualname__ = "tril" if lower else "triu"
    return triangle


KERNELS.add(OpKind.TRIL, [(d, d) for d in dt.ALL_DTYPES], _triangle(True), STRIDED)
KERNELS.add(OpKind.TRIU, [(d, d) for d in dt.ALL_DTYPES], _triangle(False), STRIDED)


@KERNELS.kernel(OpKind.PAD, [(d, d) for d in dt.ALL_DTYPES], STRIDED)
def pad(inputs, outputs, layouts, params):
    source = view(inputs[0], layouts[0])
    out = output(outputs[0], layouts[-1])
    out[...] = np.asarray(params.value).astype(out.dtype)
    region = tuple(slice(before, before + size)
                   for (before, _), size in zip(params.widths, source.shape))
    out[region] = source


@KERNELS.kernel(OpKind.SLICE_ASSIGN, [(d, d, d) for d in dt.ALL_DTYPES], STRIDED)
def slice_assign(inputs, outputs, layouts, params):
    target = view(inputs[0], layouts[0])
    value = view(inputs[1], layouts[1])
    out = output(outputs[0], layouts[-1])
    if not np.shares_memory(out, target):
        out[...] = target
    region = Layout.contiguous(out.shape).slice(params.starts, params.stops, params.steps)
    view(outputs[0], region)[...] = value


def contiguous_run(index: np.ndarray, size: int) -> slice | None:
    """The slice a 1-D ``index`` selects when it is a run of consecutive in-range positions
    (one position may be negative: it wraps), else None (the general path checks it)."""
    count = index.shape[0]
    if count == 0:
        return None
    first = int(index[0])
    if count == 1:
        if -size <= first < 0:
            first += size
        return slice(first, first + 1) if 0 <= first < size else None
    if first < 0 or first + count > size or int(index[-1]) != first + count - 1:
        return None
    if count <= SHORT_INDEX:  # a list compare costs less than NumPy's temporaries here
        consecutive = index.tolist() == list(range(first, first + count))
    else:
        consecutive = bool((index[1:] - index[:-1] == 1).all())
    return slice(first, first + count) if consecutive else None


def _prepare_index_copy(inputs, outputs, layouts, params):
    """The bound launcher of index_copy: views and the aliasing test made once; the C copy
    (``indexing.c``, a ForeignCall a replay runs in sequence with its neighbours) where the
    operands are plain memory, else NumPy, where a run of consecutive positions (a KV cache
    write) is one slice assignment."""
    target, index, source = (view(s, layout) for s, layout in zip(inputs, layouts))
    out = output(outputs[0], layouts[-1])
    aliased = np.shares_memory(out, target)
    dim = params.dim
    size = target.shape[dim]
    foreign = _foreign_index_copy(inputs, outputs, layouts, index, aliased, dim)
    if foreign is not None:
        return foreign
    leading = (slice(None),) * dim

    def launch() -> None:
        if not aliased:
            out[...] = target
        run = contiguous_run(index, size)
        if run is None:  # duplicates (the last wins), any order, negatives, bad positions
            run = check_indices(index, size, dim)
        out[leading + (run,)] = source

    return launch


def _foreign_index_copy(inputs, outputs, layouts, index: np.ndarray, aliased: bool,
                       dim: int) -> ForeignCall | None:
    """index_copy as one call of ``indexing.c``, or None where it does not apply (no C
    compiler, object or sub-byte elements, a strided index, more dims than the C walks)."""
    storages = (inputs[0], inputs[2], outputs[0])
    item = storages[0].buffer.itemsize
    target_layout, index_layout, source_layout, out_layout = layouts
    if (len(target_layout.shape) > MAX_COPY_DIMS or index_layout.strides[:1] not in ((), (1,))
            or any(s.buffer.dtype.hasobject or s.buffer.itemsize != item or
                   s.dtype.itemsize != item for s in storages)):
        return None
    function = entry_point("indexing", INDEXING_SOURCE.read_text)
    if function is None:
        return None
    pointers = [address(storage, layout) for storage, layout in
                zip((inputs[0], inputs[1], inputs[2], outputs[0]), layouts)]
    status = (ctypes.c_int64 * 1)()
    data = (ctypes.c_void_p * 5)(*pointers, ctypes.addressof(status))
    shape = target_layout.shape
    sizes = [item, len(shape), dim, index_layout.numel, inputs[1].buffer.itemsize,
             0 if aliased else 1, *shape]
    strides = [*target_layout.strides, *source_layout.strides, *out_layout.strides]
    size = shape[dim]

    def failure(code: int) -> IndexOutOfRange:
        bad = int(index.reshape(-1)[code - 1])
        return IndexOutOfRange(f"index {bad} is out of range for dim {dim} of size {size}")

    return ForeignCall(function, data, (ctypes.c_int64 * len(sizes))(*sizes),
                       (ctypes.c_int64 * max(1, len(strides)))(*strides), status, failure)


def index_copy(inputs, outputs, layouts, params):
    _prepare_index_copy(inputs, outputs, layouts, params)()


index_copy.prepare = _prepare_index_copy
index_copy.revision_source = INDEXING_SOURCE.read_text()
KERNELS.add(OpKind.INDEX_COPY, [(d, i, d, d) for d in dt.ALL_DTYPES for i in INDEX_DTYPES],
            index_copy, STRIDED)


@KERNELS.kernel(OpKind.FULL, [(d,) for d in dt.ALL_DTYPES])
def full(inputs, outputs, layouts, params):
    out = output(outputs[0], layouts[-1])
    out[...] = np.asarray(params.value).astype(out.dtype)


@KERNELS.kernel(OpKind.ARANGE, [(d,) for d in dt.NUMERIC_DTYPES])
def arange(inputs, outputs, layouts, params):
    out = output(outputs[0], layouts[-1])
    values = params.start + np.arange(params.count, dtype=np.float64) * params.step
    if out.dtype.kind in "iu":
        values = np.arange(params.count, dtype=np.int64) * int(params.step) + int(params.start)
    out[...] = values
