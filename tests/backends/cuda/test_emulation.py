"""The kernel suite's cases through the CUDA kernels, emulated on the host
(``tests.backends.cuda.emulation``): a CUDA key's serial renderings (elementwise, a thread per
row, the index kernels) against the CPU's kernel of the same key, bit for bit where the
suite's exactness asks (casts, copies, selections, fills, half roundings). Every run checks
the half types' casts and a key of each op over them (``_everyday``); ``--runslow`` checks
every key."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from fuel.backends import find_backend
from fuel.backends.cuda.matmul import MatmulKernel
from fuel.dispatch.kernel import global_table
from fuel.ir import dtype as dt
from fuel.ir.device import BackendId
from fuel.ir.layout import Layout
from fuel.ir.ops import OpKind, infer
from tests.backends.cuda import emulation
from tests.backends.cuda.renderings import kernel_rows
from tests.backends.kernel_cases import CASES
from tests.backends.kernel_harness import assert_matches, exactness, key_id, run_case

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="no C++ compiler (g++)")
CPU = find_backend(BackendId.CPU)
HALVES = {dt.float16, dt.bfloat16}
# Launches the host functions give alone (the fake device runs the others, whose prepare
# copies or fills first: cuBLAS matmul, the quantized matmul of a strided x, the rounding of
# a strided x, which takes dense inputs).
ROWS = [row for row in kernel_rows() if not isinstance(row[2], MatmulKernel)
        and row[0] not in (OpKind.QUANTIZED_MATMUL, OpKind.ROUND_INT16_BLOCKS)]


def _everyday(rows):
    """The casts to and from the half types and one key of each other op over a half type:
    their roundings are the renderer's own (the fake device's tests run a key of every op)."""
    halves, chosen = set(), []
    for op, dtypes, kernel in rows:
        if HALVES & set(dtypes) and (op is OpKind.CAST or op not in halves):
            chosen.append((op, dtypes, kernel))
            halves.add(op)
    return chosen


def _prepared(op, dtypes, kernel, case):
    """(inputs, output, layouts, out shape) as host memories."""
    context = emulation.Context()
    in_dtypes = (dtypes[0],) * len(case.operands) if op is OpKind.CAT else tuple(dtypes[:-1])
    inputs = []
    for item, dtype in zip(case.operands, in_dtypes):
        memory = emulation.Memory(item.base.copy(), context)
        memory.dtype = dtype
        inputs.append(memory)
    out_shape, _ = infer(op, case.params, tuple(o.layout.shape for o in case.operands),
                         in_dtypes)
    layout = Layout.contiguous(out_shape)
    if case.inplace:
        output = inputs[0]
    else:
        output = emulation.Memory(np.zeros(max(layout.numel, 1), dtypes[-1].numpy), context)
        output.dtype = dtypes[-1]
    return inputs, output, [o.layout for o in case.operands] + [layout], out_shape


def _check(rows) -> None:
    runs = []
    for op, dtypes, kernel in rows:
        for case in CASES[op](dtypes):
            inputs, output, layouts, shape = _prepared(op, dtypes, kernel, case)
            steps = emulation.launches(kernel, inputs, [output], layouts, case.params)
            runs.append((op, dtypes, case, inputs, output, shape, steps))
    sources = {}
    for *_, steps in runs:
        for source, pointers, _, _ in steps:
            sources.setdefault(source, len(pointers))
    ordered = list(sources.items())
    index = {source: n for n, (source, _) in enumerate(ordered)}
    library = emulation.build(ordered)
    for op, dtypes, case, _inputs, output, shape, steps in runs:  # (inputs kept alive)
        for source, pointers, arguments, count in steps:
            emulation.run(library, index[source], pointers, arguments, count)
        numel = int(np.prod(shape, dtype=np.int64))
        actual = output.array[:numel].reshape(shape)
        cpu = global_table().lookup_alternatives(op, dtypes, BackendId.CPU)
        key = (op, dtypes, BackendId.CUDA)
        if cpu:
            expected = run_case(CPU, cpu[0], op, dtypes, case)
        else:
            expected = case.expected()
        assert_matches(actual, expected, dtypes[-1], case, f"{key_id(key)} (emulated) vs cpu",
                       exactness(op, case.params, BackendId.CUDA, dtypes[-1]))


def test_everyday_keys_match_the_cpu():
    _check(_everyday(ROWS))


@pytest.mark.slow
def test_every_key_matches_the_cpu():
    _check(ROWS)
