"""float32 matmul in C (``matmul.c``) for the shapes where it beats OpenBLAS: few rows per
launch (decode, short prompts, per-head attention), batched and broadcast operands walked
through their strides without copies. Built through the kernel compiler's toolchain and
cache on first use; registered with source tag ``c`` ahead of the NumPy kernel.

The selection rule (``plan_launch``, measured by ``bench/matmul.py``): after folding batch
dims into rows where the layout allows, a launch runs the C kernel when it has at most
``C_ROWS`` rows per batch entry (``DOT_ROWS_MOST`` in the dot form) and its strides fit one
of the kernel's forms (``dot``: both
operands unit-stride along k, Linear's ``x @ W.T``; ``rows``: ``b``'s rows unit-stride), else
it runs OpenBLAS: the kernel's ``blas`` form, single-threaded ``cblas_sgemm`` calls of NumPy's
OpenBLAS on fuel's OpenMP team (OpenBLAS's own pool never wakes), or ``np.matmul`` where NumPy's
BLAS offers no such entry or the strides are no cblas matrix. From ``matmul_gemm.GEMM_ROWS``
rows of a 2-D product the rule gives the launch to the *gemm* form (``matmul_gemm``: the
convolution's register-tiled GEMM on fuel's team); a constant ``b`` (a model's weights) goes to
it from ``PREPACKED_ROWS`` rows, its panels packed once (``matmul_gemm.prepacked``). Threads
follow ``quantized.py``'s rules: OpenMP over output tiles from ``PARALLEL_WORK`` multiply-adds,
``FUEL_THREADS`` threads.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from fuel.backends.cpu import matmul_gemm, structured
from fuel.backends.cpu.c_library import (
    POOL_SHARE,
    POOL_UNITS,
    address,
    aligned_filled,
    entry_point,
    kept,
    offered_pool,
)
from fuel.backends.cpu.quantized import thread_count
from fuel.compiler.foreign import ForeignCall
from fuel.dispatch.kernel import KernelCaps, KernelList, Launcher, Variant
from fuel.ir import dtype as dt
from fuel.ir.device import BackendId, Device
from fuel.ir.layout import Layout
from fuel.ir.ops import OpKind

KERNELS = KernelList(BackendId.CPU, "c")
SOURCE = Path(__file__).with_name("matmul.c")
DOT, ROWS, BLAS, PACKED = 0, 1, 2, 3
# The packed form (matmul.c, form 3): a constant b (``Storage.constant``: a model's weights)
# rearranged once into tiles of PACKED_WIDTH columns, each tile's k rows back to back
# (``packed_weights``, kept per storage), so each thread streams one sequential run of
# weights. It takes the launches the dot and rows forms take (at most DOT_ROWS_MOST rows, no
# batch dims, a's rows unit-stride) whenever b is constant: MiniLM's 12 x 384 -> 1536 with the
# weights in L3 ran 53-55 us against the dot form's 85-93 (2 threads, this Xeon, /tmp bench of
# both forms over 8 weight copies), 12 x 1536 -> 384 60 against 86.
PACKED_WIDTH = 16
BLAS_ALIGNMENT = 16  # column chunks of the blas form: whole AVX-512 vectors
DOT_ROWS, ROWS_ROWS = 3, 4  # matmul.c's tile heights (row chunks are multiples of them)
COLUMN_ALIGNMENT = 24  # a multiple of both forms' tile widths (4 weight rows, 24 columns)
# The rule's bounds (bench/matmul.py, threads=1 on this 2-core AMD EPYC, loaded machine): the
# C kernel beats OpenBLAS up to C_ROWS rows per batch entry (m = 12: 1.5x in the dot form;
# m = 48-64: 0.5-0.9x, OpenBLAS's packed kernels win). The rows form walks b in strips of 24
# columns, so a wide b (more than ROWS_COLUMNS) or a single row (a vector-matrix product, where
# OpenBLAS streams b's rows whole) stays with OpenBLAS.
C_ROWS = 32
# The dot form's own bound: with the AVX-512 tile (3 rows x 8 weight rows) it beat the gemm
# form and OpenBLAS up to 64-80 rows in judge timings here (48 x 384 -> 1536: 0.30 ms against
# 0.41 and 0.43 on 2 threads). With row chunks split evenly it also beats the gemm form at 96
# rows of MiniLM's K = 384 (0.64 against 0.68 ms), but the rule keeps 64: from there a batch
# job's single-process embeddings stopped matching its Ray workers' bit for bit
# (tests/distributed/test_ray.py); the judge may still pick it where it times faster.
DOT_ROWS_MOST = 64
# From this many rows a product with a constant b runs the gemm form on b's panels packed once.
# In MiniLM (weights read from L3, in-process A/B of two encoders, judge off, this 2-core
# Sapphire Rapids Xeon, /tmp/s8_inproc.py) whole forwards ran 0.85-0.96x the packed form's and
# the per-launch-packing gemm's time from 40 rows (1 x 40 to 8 x 107), 0.95-1.10x at 36, 1.06x
# at 32 and 1.21-1.26x at 12: below it the packed form's one stream of each weight row for all
# the rows wins.
PREPACKED_ROWS = 40
ROWS_COLUMNS = 256
# From this many multiply-adds a launch splits its tiles over threads (dot form, one row,
# weights in cache, 2 threads against 1: 512 x 512 10.4 us against 17.1, 1024 x 1000 38 against
# 70, 4 x 384 x 384 11.5 against 16.2).
PARALLEL_WORK = 1 << 18
CHUNK_BYTES = 1 << 17  # a row chunk of ``a`` kept in L2 while the columns stream past it
MAX_BATCH_DIMS = 8

_pool: list = []  # the convolutions' work pool once handed to the kernel (matmul.c)


def source() -> str:
    """matmul.c's library source: the work pool's receiving side (c_library.POOL_UNITS),
    then matmul.c."""
    return POOL_UNITS.read_text() + SOURCE.read_text()


def library():
    """The compiled kernel (built or fetched from the kernel cache once), or None when the
    machine has no working C compiler; where the process runs convolutions, handed their
    work pool (matmul.c's POOL_SHARE) at its first launch prepared after conv.c is loaded."""
    function = entry_point("matmul_float32", source, openmp=True)
    if function is not None and not _pool:
        data = offered_pool()
        if data is not None:
            function(data, (ctypes.c_int64 * 8)(POOL_SHARE), None)
            _pool.append(data)
    return function


@dataclass(frozen=True, slots=True)
class LaunchPlan:
    """One matmul launch in the kernel's terms: form (None: BLAS), sizes, strides in elements
    (a row, a inner, b inner, b column, out row) and batch dims (size, a, b, out strides)."""

    form: int | None
    m: int
    n: int
    k: int
    strides: tuple[int, int, int, int, int]
    batch: tuple[tuple[int, int, int, int], ...]


def _batch_dims(layouts: Sequence[Layout]) -> list[list[int]]:
    """[size, a stride, b stride, out stride] per output batch dim; broadcast dims stride 0,
    size-1 dims dropped, adjacent dims merged where every operand walks them as one."""
    a, b, out = layouts
    rank = len(out.shape) - 2
    dims = []
    for d in range(rank):
        size = out.shape[d]
        if size == 1:
            continue
        row = [size]
        for layout in (a, b, out):
            position = d - (rank - (len(layout.shape) - 2))
            own = layout.shape[position] if position >= 0 else 1
            row.append(layout.strides[position] if position >= 0 and own != 1 else 0)
        dims.append(row)
    merged: list[list[int]] = []
    for row in dims:
        if merged and all(merged[-1][i] == row[i] * row[0] for i in (1, 2, 3)):
            merged[-1] = [merged[-1][0] * row[0]] + row[1:]
        else:
            merged.append(row)
    return merged


def plan_launch(layouts: Sequence[Layout], forced: bool = False) -> LaunchPlan:
    """The selection rule: the C kernel's form for this launch, or BLAS (form None).
    ``forced`` drops the measured bounds (C_ROWS, ROWS_COLUMNS): every launch a form fits
    runs the C kernel (bench/matmul.py and the tests)."""
    a, b, out = layouts
    m, k = a.shape[-2:]
    n = b.shape[-1]
    a_row, a_inner = a.strides[-2:]
    b_inner, b_column = b.strides[-2:]
    out_row = out.strides[-2]
    if k == 1:
        a_inner = b_inner = 1
    if n == 1:
        b_column = 1
    if m == 1:
        a_row = out_row = 0
    batch = _batch_dims(layouts)
    # Rows of a batch dim that b broadcasts over are more rows of one matmul when a and out
    # step over them as over their rows.
    while batch and batch[-1][2] == 0 and (m == 1 or (batch[-1][1] == m * a_row
                                                      and batch[-1][3] == m * out_row)):
        size, a_step, _, out_step = batch.pop()
        if m == 1:
            a_row, out_row = a_step, out_step
        m *= size
    if m == 1:
        a_row, out_row = k * a_inner, n
    strides = (a_row, a_inner, b_inner, b_column, out_row)
    form = None
    if len(batch) <= MAX_BATCH_DIMS and (out.strides[-1] == 1 or n == 1):
        measured = forced or m <= C_ROWS
        if a_inner == 1 and b_inner == 1 and (measured or m <= DOT_ROWS_MOST):
            form = DOT
        elif b_column == 1 and measured and (forced or 1 < m and n <= ROWS_COLUMNS):
            form = ROWS
    return LaunchPlan(form, m, n, k, strides, tuple(tuple(row) for row in batch))


def _round_up(value: int, step: int) -> int:
    return -(-value // step) * step


def _chunks(plan: LaunchPlan, threads: int) -> tuple[int, int]:
    """(row_chunk, column_chunk): row chunks of a of at most about CHUNK_BYTES, as even as
    the tile height allows (the threads take whole units in order: 84 + 12 rows gave one
    thread seven times the other's work, and 96 x 384 -> 1536 twice 80's time); columns split
    evenly over the threads when the batch and row chunks alone do not give each thread
    work."""
    if plan.form == PACKED:  # every row in one unit, the columns' tiles split over threads
        column_chunk = max(plan.n, 1)
        if threads > 1:
            column_chunk = _round_up(-(-plan.n // threads), PACKED_WIDTH)
        return max(plan.m, 1), column_chunk
    height = DOT_ROWS if plan.form == DOT else ROWS_ROWS
    most = max(height, CHUNK_BYTES // (4 * max(plan.k, 1)) // height * height)
    rows = max(plan.m, 1)
    row_units = -(-rows // most)
    if threads > 1 and row_units > 1 and not plan.batch:  # the row chunks are the threads' work
        row_units = _round_up(row_units, threads)
    row_chunk = min(_round_up(-(-rows // row_units), height), _round_up(rows, height))
    units = -(-plan.m // row_chunk)
    for size, *_ in plan.batch:
        units *= size
    column_chunk = max(plan.n, 1)
    if threads > 1 and units < 2 * threads:
        column_chunk = _round_up(-(-plan.n // threads), COLUMN_ALIGNMENT)
    return row_chunk, column_chunk


@functools.lru_cache(maxsize=4096)
def launch_arguments(layouts: tuple[Layout, ...], forced: bool, threads: int):
    """(plan, (sizes, strides) as the C entry's int64 arrays, or None for an empty output),
    memoized per layouts: an eager launch (no replay) pays the planning once per shape."""
    plan = plan_launch(layouts, forced)
    if plan.form is None:
        plan = _blas_plan(plan)
        if plan.form is None:
            return plan, None
    return plan, _form_arguments(plan, threads if _work(plan) >= PARALLEL_WORK else 1)


@functools.lru_cache(maxsize=4096)
def gemm_arguments(layouts: tuple[Layout, ...], threads: int,
                   least: int = matmul_gemm.GEMM_ROWS):
    """The gemm form's (sizes, strides) where it takes the launch (at least ``least`` rows per
    product after folding batch dims, operands it reads), else None. The rule gives it the
    launches no C form takes from ``matmul_gemm.GEMM_ROWS`` rows: on this 2-core AMD EPYC
    (judge timings, 2 threads) it ran 4-26% faster than OpenBLAS on fuel's team at MiniLM's
    Linear shapes, 96 to 1024 rows; the judge also times it from
    ``matmul_gemm.GEMM_VARIANT_ROWS``."""
    plan = plan_launch(layouts, forced=True)
    if matmul_gemm.library() is None:
        return None
    return matmul_gemm.gemm_arguments(plan.m, plan.n, plan.k, plan.strides, plan.batch,
                                      threads if _work(plan) >= PARALLEL_WORK else 1, least)


@functools.lru_cache(maxsize=4096)
def packed_arguments(layouts: tuple[Layout, ...], threads: int):
    """(plan, (sizes, strides)) of the packed form where it can take the launch (at most
    DOT_ROWS_MOST rows, no batch dims, a's rows unit-stride, an output a C form writes), else
    None; its threads by the rule's work bound."""
    plan = plan_launch(layouts, forced=True)
    if plan.form is None or plan.batch or plan.strides[1] != 1 or \
            not 0 < plan.m <= DOT_ROWS_MOST or plan.n * plan.k == 0:
        return None
    plan = replace(plan, form=PACKED)
    return plan, _arguments(plan, threads if _work(plan) >= PARALLEL_WORK else 1)


@functools.lru_cache(maxsize=4096)
def prepacked_arguments(layouts: tuple[Layout, ...], threads: int):
    """The gemm form's arguments for a constant ``b`` read from panels packed once (at least
    PREPACKED_ROWS rows per product, a weight the form reads, one weight for the whole
    batch), else None."""
    sizes = gemm_arguments(layouts, threads, PREPACKED_ROWS)
    if sizes is None or matmul_gemm.prepacked(sizes) is None:
        return None
    return sizes


def packed_weights(storage, layout: Layout, plan: LaunchPlan) -> np.ndarray:
    """The packed form's copy of the constant ``b`` (``storage`` viewed by ``layout``):
    ``[tiles][k][PACKED_WIDTH]`` floats, 64-byte aligned, the last tile zero-padded; made once
    per storage and view (``kept``)."""
    k, n = plan.k, plan.n
    b_inner, b_column = plan.strides[2], plan.strides[3]

    def make() -> np.ndarray:
        itemsize = storage.buffer.itemsize
        b = np.ndarray((k, n), np.float32, buffer=storage.buffer,
                       offset=layout.offset * itemsize,
                       strides=(b_inner * itemsize, b_column * itemsize))
        tiles = -(-n // PACKED_WIDTH)
        packed = aligned_filled(tiles * k * PACKED_WIDTH, lambda at: None)
        view = packed.reshape(tiles, k, PACKED_WIDTH)
        full = n // PACKED_WIDTH
        view[:full] = b[:, :full * PACKED_WIDTH].reshape(k, full, PACKED_WIDTH).transpose(1, 0, 2)
        if full < tiles:
            view[full] = 0.0
            view[full, :, :n - full * PACKED_WIDTH] = b[:, full * PACKED_WIDTH:]
        return packed

    return kept(storage, ("matmul-packed", layout.offset, b_inner, b_column, k, n), make)


def _work(plan: LaunchPlan) -> int:
    """The launch's multiply-adds."""
    elements = plan.m * plan.n * plan.k
    for size, *_ in plan.batch:
        elements *= size
    return elements


def _arguments(plan: LaunchPlan, threads: int):
    """The C entry's (sizes, strides) int64 arrays for ``plan`` on ``threads`` threads, or None
    for an empty output."""
    elements = plan.m * plan.n
    for size, *_ in plan.batch:
        elements *= size
    if elements == 0:
        return None
    row_chunk, column_chunk = _chunks(plan, threads)
    sizes = [plan.form, threads, plan.m, plan.n, plan.k, row_chunk, column_chunk,
             len(plan.batch)] + [row[0] for row in plan.batch]
    strides = list(plan.strides) + [s for row in plan.batch for s in row[1:]]
    return ((ctypes.c_int64 * len(sizes))(*sizes),
            (ctypes.c_int64 * len(strides))(*strides))


FORM_NAMES = {DOT: "c-dot", ROWS: "c-rows", BLAS: "openblas", PACKED: "c-packed"}


@functools.lru_cache(maxsize=1)
def openblas_entries() -> tuple[int, int] | None:
    """The addresses of NumPy's OpenBLAS ``cblas_sgemm`` (64-bit sizes) and
    ``openblas_set_num_threads_local`` (it returns the count it replaces), or None when NumPy's
    BLAS is not an ILP64 OpenBLAS exporting both (then the blas form is never offered)."""
    import glob
    import os

    folder = os.path.join(os.path.dirname(np.__file__), os.pardir, "numpy.libs")
    for path in sorted(glob.glob(os.path.join(folder, "*openblas*"))):
        try:
            library = ctypes.CDLL(path)
        except OSError:
            continue
        for name in ("scipy_cblas_sgemm64_", "cblas_sgemm64_"):
            sgemm = getattr(library, name, None)
            threads = getattr(library, "openblas_set_num_threads_local", None)
            if sgemm is not None and threads is not None:
                return (ctypes.cast(sgemm, ctypes.c_void_p).value,
                        ctypes.cast(threads, ctypes.c_void_p).value)
    return None


def blas_operands(plan: LaunchPlan) -> tuple[int, int, int, int] | None:
    """(transposed bits, lda, ldb, ldc) reading ``plan``'s operands as row-major cblas
    matrices (bit 0: a as a transposed (k, m) matrix; bit 1: b as a transposed (n, k)), or None
    when a stride pattern is none of those (broadcast or overlapping rows)."""
    m, n, k = plan.m, plan.n, plan.k
    a_row, a_inner, b_inner, b_column, out_row = plan.strides
    transposed = 0
    if a_inner == 1 and (m == 1 or a_row >= k):
        lda = max(a_row if m > 1 else k, k, 1)
    elif a_row == 1 and a_inner >= m and m > 1:
        transposed, lda = 1, a_inner
    else:
        return None
    if k == 1:  # one column of a, one row of b: read b's row as stored
        ldb = max(n, 1)
        if b_column != 1:
            return None
    elif b_column == 1 and b_inner >= n:
        ldb = b_inner
    elif b_inner == 1 and b_column >= k:
        transposed, ldb = transposed | 2, b_column
    else:
        return None
    if out_row < n and m > 1:
        return None
    return transposed, lda, ldb, max(out_row, n, 1)


def _blas_plan(plan: LaunchPlan) -> LaunchPlan:
    """``plan`` in the blas form where NumPy's OpenBLAS offers its entries and the operands
    are cblas matrices, else ``plan`` with no form (``np.matmul``)."""
    blas = replace(plan, form=BLAS)
    if openblas_entries() is None or len(plan.batch) > MAX_BATCH_DIMS or \
            blas_operands(blas) is None:
        return replace(plan, form=None)
    return blas


def _form_arguments(plan: LaunchPlan, threads: int):
    """The C entry's (sizes, strides) arrays of ``plan``'s form on ``threads`` threads."""
    return _blas_arguments(plan, threads) if plan.form == BLAS else _arguments(plan, threads)


def _blas_arguments(plan: LaunchPlan, threads: int):
    """The blas form's (sizes, strides) arrays: whole rows per unit, columns split over the
    threads when the batch entries alone do not give each thread work; None for an empty
    output or when the operands are no cblas matrices."""
    operands = blas_operands(plan)
    entries = 1
    for size, *_ in plan.batch:
        entries *= size
    if operands is None or plan.m * plan.n * entries == 0:
        return None
    column_chunk = max(plan.n, 1)
    if threads > 1 and entries < threads:
        column_chunk = _round_up(-(-plan.n // threads), BLAS_ALIGNMENT)
    sizes = [BLAS, threads, plan.m, plan.n, plan.k, max(plan.m, 1), column_chunk,
             len(plan.batch)] + [row[0] for row in plan.batch]
    strides = (list(plan.strides) + [s for row in plan.batch for s in row[1:]]
               + list(operands))
    return ((ctypes.c_int64 * len(sizes))(*sizes),
            (ctypes.c_int64 * len(strides))(*strides))


@functools.lru_cache(maxsize=4096)
def variant_plans(layouts: tuple[Layout, ...], threads: int
                  ) -> tuple[tuple[str, LaunchPlan, int], ...]:
    """Every way this launch can run, as (name, plan, threads), the measured rule's choice
    first: OpenBLAS, and each C form the strides fit on ``threads`` threads and on one."""
    rule, _ = launch_arguments(layouts, False, threads)
    found = plan_launch(layouts, forced=True)
    forms = []
    if found.form is not None:
        forms.append(found.form)
        if found.form == DOT and found.strides[3] == 1:  # b's columns unit-stride too
            forms.append(ROWS)
    blas = _blas_plan(found)
    if blas.form is None:
        choices = [("openblas", blas, 0)]
    else:  # OpenBLAS called on fuel's OpenMP team (its own pool never wakes), N threads or one
        forms.insert(0, BLAS)
        choices = []
    for form in forms:
        for count in sorted({threads, 1}, reverse=True):
            choices.append((f"{FORM_NAMES[form]}/{count}t", replace(found, form=form), count))
    if rule.form is None:
        first = "openblas"
    else:
        first = f"{FORM_NAMES[rule.form]}/{threads if _work(rule) >= PARALLEL_WORK else 1}t"
    choices.sort(key=lambda choice: choice[0] != first)
    return tuple(choices)


class CMatmul:
    """float32 matmul: the C kernel for the shapes ``plan_launch`` gives it, OpenBLAS for the
    rest; ``prepare`` decides once per launch, so a replay is one foreign call."""

    __name__ = __qualname__ = "matmul_float32"
    # Its variants include OpenBLAS (on fuel's threads): the NumPy sibling (OpenBLAS on its
    # own pool, which then spins beside fuel's kernels) is not timed against them.
    covers_siblings = True
    # Its candidates depend on whether b is constant (a weight it may pack once).
    variants_by_constants = True

    def __init__(self, forced: bool = False) -> None:
        self.forced = forced

    @property
    def revision_source(self) -> str:
        """What the revision hash covers besides the Python code: the C sources (the gemm
        form's included)."""
        return source() + matmul_gemm.source()

    def prepare(self, inputs: Sequence, outputs: Sequence, layouts: Sequence[Layout],
                params: object) -> Launcher:
        if inputs[1].constant and not self.forced and library() is not None:
            panels = prepacked_arguments(tuple(layouts), thread_count())
            if panels is not None:  # a model's weights, enough rows: their panels, packed once
                return matmul_gemm.prepare_prepacked(panels, inputs, outputs, layouts, params)
            packed = packed_arguments(tuple(layouts), thread_count())
            if packed is not None:  # a model's weights, few rows: the packed form
                return self._launcher(*packed, inputs, outputs, layouts, params)
        plan, arguments = launch_arguments(tuple(layouts), self.forced, thread_count())
        sizes = None if self.forced or plan.form in (DOT, ROWS) else \
            gemm_arguments(tuple(layouts), thread_count())
        if sizes is not None:  # many rows: the register-tiled GEMM
            return matmul_gemm.prepare(sizes, inputs, outputs, layouts, params)
        return self._launcher(plan, arguments, inputs, outputs, layouts, params)

    def variants(self, layouts: Sequence[Layout], params: object, device: Device,
                 constants: Sequence[bool] = ()) -> tuple[Variant, ...]:
        """The judge's candidates for this launch (the rule's choice first): OpenBLAS (not
        for a constant b the packed form takes) and each C form the strides fit, on the
        default threads and on one; for a constant b (``constants``: per operand) from
        PREPACKED_ROWS rows the gemm form on its panels packed once, which the rule takes,
        in place of the gemm form that packs per launch."""
        if self.forced or library() is None:
            return ()
        threads = thread_count()
        # its launch arguments made when it is prepared: most candidates never are
        found = [Variant(name, functools.partial(self._form_launcher, plan, count))
                 for name, plan, count in variant_plans(tuple(layouts), threads)]
        constant = len(constants) > 1 and constants[1]
        if constant and packed_arguments(tuple(layouts), threads) is not None:
            # The C forms run the packed form on the weight packed once; OpenBLAS packs it
            # again at every call, on an OpenMP team beside the work pool: timed in a warm
            # loop it ranked first (512 -> 1000 at batch 1: 14.6 us against 19.6), inside a
            # model, its weight and team cold, it ran slower (resnet18's classifier 411 us
            # against 76, mobilenet_v3_small's two 108 against 73), so it is not offered.
            found = [variant for variant in found if not variant.name.startswith("openblas")]
        panels = prepacked_arguments(tuple(layouts), threads) if constant else None
        if panels is not None:
            return (Variant(f"gemm-panels/{panels[0][0]}t", functools.partial(
                matmul_gemm.prepare_prepacked, panels)), *found)
        sizes = gemm_arguments(tuple(layouts), threads, matmul_gemm.GEMM_VARIANT_ROWS)
        if sizes is not None:  # the register-tiled GEMM: the rule's choice where no C form is
            gemm = Variant(f"gemm/{sizes[0][0]}t", functools.partial(matmul_gemm.prepare,
                                                                     sizes))
            rule, _ = launch_arguments(tuple(layouts), False, threads)
            ruled = rule.form not in (DOT, ROWS) and \
                gemm_arguments(tuple(layouts), threads) is not None  # as prepare decides
            found.insert(0 if ruled else len(found), gemm)
        return tuple(found)

    def _form_launcher(self, plan: LaunchPlan, count: int, inputs: Sequence,
                       outputs: Sequence, layouts: Sequence[Layout], params: object
                       ) -> Launcher:
        """A variant's launcher: ``plan``'s form on ``count`` threads; the dot and rows forms
        run as the packed form where b is constant (its rearranged copy replaces their walk
        of the same weights)."""
        if plan.form in (DOT, ROWS) and inputs[1].constant:
            packed = packed_arguments(tuple(layouts), count)
            if packed is not None:
                return self._launcher(packed[0], _arguments(packed[0], count), inputs,
                                      outputs, layouts, params)
        arguments = _form_arguments(plan, count) if plan.form is not None else None
        return self._launcher(plan, arguments, inputs, outputs, layouts, params)

    def _launcher(self, plan: LaunchPlan, arguments, inputs: Sequence, outputs: Sequence,
                  layouts: Sequence[Layout], params: object) -> Launcher:
        function = library() if plan.form is not None else None
        if function is None:
            return self._blas(plan, inputs, outputs, layouts, params)
        if arguments is None:  # an empty output
            return lambda: None
        pointers = [address(storage, layout) for storage, layout in
                    zip((inputs[0], inputs[1], outputs[0]), layouts)]
        packed = None
        if plan.form == BLAS:
            pointers.extend(openblas_entries())
        elif plan.form == PACKED:
            packed = packed_weights(inputs[1], layouts[1], plan)
            pointers[1] = packed.ctypes.data
        data = (ctypes.c_void_p * len(pointers))(*pointers)
        if packed is not None:
            data.packed = packed  # held as long as the launcher
        size_array, stride_array = arguments
        # the blas form: OpenBLAS's code ran (on fuel's threads), as its profile rows say
        return ForeignCall(function, data, size_array, stride_array,
                           kernel_source="openblas" if plan.form == BLAS else "c")

    @staticmethod
    def _blas(plan: LaunchPlan, inputs, outputs, layouts, params) -> Launcher:
        """OpenBLAS through NumPy; one 2-D call when the batch dims folded into rows."""
        if plan.batch or plan.m * plan.n * plan.k == 0:
            launch = structured.matmul.prepare(inputs, outputs, layouts, params)
        else:
            a_row, a_inner, b_inner, b_column, out_row = plan.strides
            a = _strided(inputs[0], layouts[0], (plan.m, plan.k), (a_row, a_inner))
            b = _strided(inputs[1], layouts[1], (plan.k, plan.n), (b_inner, b_column))
            out = _strided(outputs[0], layouts[2], (plan.m, plan.n), (out_row, 1))

            def launch() -> None:
                np.matmul(a, b, out=out)

        launch.kernel_source = "numpy"  # profile rows: OpenBLAS through NumPy ran, not the C
        return launch

    def __call__(self, inputs: Sequence, outputs: Sequence, layouts: Sequence[Layout],
                 params: object) -> None:
        self.prepare(inputs, outputs, layouts, params)()


def _strided(storage, layout: Layout, shape: tuple[int, int], strides: tuple[int, int]):
    buffer = storage.buffer
    return np.ndarray(shape, buffer.dtype, buffer=buffer, offset=layout.offset * buffer.itemsize,
                      strides=tuple(s * buffer.itemsize for s in strides))


KERNELS.add(OpKind.MATMUL, [(dt.float32, dt.float32, dt.float32)], CMatmul(),
            KernelCaps(strided_input=True))
