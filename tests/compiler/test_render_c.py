"""Rendered C kernels against the NumPy CPU kernels: every elementwise op and dtype key the C
renderer claims, over permuted, broadcast and sliced (offset, stepped) inputs."""

import numpy as np
import pytest

from fuel.backends import get_backend
from fuel.backends.cpu.generated import generate_c_kernel
from fuel.compiler import toolchain
from fuel.compiler.kernel_ir import KernelBuilder, Load, Store, collapse
from fuel.compiler.render_c import C_DTYPES, renders
from fuel.dispatch.compiled import compile_node
from fuel.dispatch.kernel import global_table
from fuel.ir import dtype as dt
from fuel.ir.device import CPU, BackendId
from fuel.ir.layout import Layout
from fuel.ir.ops import ELEMENTWISE_OPS, OpKind, definition
from fuel.ir.params import NO_PARAMS, CastParams

pytestmark = pytest.mark.skipif(toolchain.unavailable_reason() is not None,
                                reason=str(toolchain.unavailable_reason()))

SHAPE = (5, 7)
# Three views of SHAPE: a transpose of a (7, 5) buffer, a row broadcast down the rows, and a
# stepped window starting at an offset.
LAYOUTS = (Layout((5, 7), (1, 5), 0), Layout((5, 7), (0, 1), 0), Layout((5, 7), (16, 2), 3))
BUFFER_SIZE = 96


def _values(dtype, seed: int) -> np.ndarray:
    random = np.random.default_rng(seed)
    if dtype.is_bool:
        return random.random(BUFFER_SIZE) < 0.5
    if dtype.is_floating:
        values = random.uniform(-3.0, 3.0, BUFFER_SIZE)
        values[:4] = (0.0, 1.0, -1.0, 0.5)
        return values.astype(dtype.numpy)
    if dtype.kind == "u":
        return random.integers(0, 40, BUFFER_SIZE).astype(dtype.numpy)
    return random.integers(-20, 20, BUFFER_SIZE).astype(dtype.numpy)


def _cases(dtype):
    """(op, operand positions, dtype key, params) for every rendered op over ``dtype``."""
    cases = []
    for op in sorted(ELEMENTWISE_OPS, key=lambda k: k.value):
        for key in definition(op).coverage:
            inputs = key[:-1]
            if op is OpKind.WHERE:
                if key[1] is dtype and renders("where", key):
                    cases += [(op, (3, 0, 1), key, NO_PARAMS), (op, (3, 2, 0), key, NO_PARAMS)]
                continue
            if inputs[0] is not dtype or not _renders_op(op, key):
                continue
            for rotation in range(3):
                positions = tuple((rotation + k) % 3 for k in range(len(inputs)))
                cases.append((op, positions, key, NO_PARAMS))
    for target in sorted(C_DTYPES, key=lambda d: d.name):
        for position in range(3):
            cases.append((OpKind.CAST, (position,), (dtype, target), CastParams(target)))
    return cases


def _renders_op(op, key) -> bool:
    expression = definition(op).expression
    if expression is None:
        return renders(op.value, key)
    return all(d in C_DTYPES for d in key) and all(
        renders(name, (key[-1], key[-1])) for name in expression.ops())


@pytest.mark.parametrize("dtype", sorted(C_DTYPES, key=lambda d: d.name), ids=lambda d: d.name)
def test_rendered_kernels_match_numpy(dtype):
    backend = get_backend(CPU)
    arrays = [_values(dtype, seed) for seed in range(3)] + [_values(dt.bool_, 3)]
    if dtype.is_floating:  # casts of negative floats to unsigned types are platform-defined
        arrays = [np.abs(a) if k == 0 else a for k, a in enumerate(arrays)]
    storages = [backend.upload(CPU, a) for a in arrays]
    layouts = list(LAYOUTS) + [LAYOUTS[0]]
    builder = KernelBuilder(SHAPE)
    loads = [builder.load(Load(s.dtype, layout.strides, layout.offset))
             for s, layout in zip(storages, layouts)]
    cases = _cases(dtype)
    stores = []
    for op, positions, key, _ in cases:
        output_dtype = key[-1]
        value = builder.apply(op, tuple(loads[p] for p in positions), output_dtype)
        stores.append(Store(value, output_dtype))
    kernel = builder.build(f"test_{dtype.name}", stores)
    entry = generate_c_kernel(kernel)
    outputs = [backend.allocate(CPU, store.dtype, 35) for store in stores]
    entry.kernel([*storages], outputs, [*layouts, *[Layout.contiguous(SHAPE)] * len(stores)],
                 kernel)
    table = global_table()
    checked = 0
    for (op, positions, key, params), output in zip(cases, outputs):
        reference = backend.allocate(CPU, key[-1], 35)
        compiled = compile_node(op, key, BackendId.CPU, params, table)
        inputs = [storages[p] for p in positions]
        with np.errstate(all="ignore"):
            compiled.kernel(inputs, [reference], [layouts[p] for p in positions]
                            + [Layout.contiguous(SHAPE)], params)
        expected, actual = reference.buffer, output.buffer
        message = f"{op.value} {[d.name for d in key]} operands {positions}"
        if key[-1].is_floating:
            tolerance = {dt.float32: 2e-6, dt.float16: 1e-3, dt.bfloat16: 8e-3}.get(key[-1], 1e-13)
            np.testing.assert_allclose(actual, expected, rtol=tolerance, atol=tolerance,
                                       equal_nan=True, err_msg=message)
        else:
            np.testing.assert_array_equal(actual, expected, err_msg=message)
        checked += 1
    assert checked == len(cases) > 3 * 10


def test_collapse_merges_dense_dims_and_keeps_broadcasts():
    shape = (2, 3, 4)
    dense = (12, 4, 1)
    assert collapse(shape, [dense, dense]) == ((24,), [(1,), (1,)])
    sizes, strides = collapse(shape, [dense, (0, 0, 1)])
    assert sizes == (6, 4) and strides == [(4, 1), (0, 1)]
    assert collapse((1, 1), [(0, 0)]) == ((1,), [(0,)])


@pytest.mark.parametrize("shape", [(3, 2, 5, 4, 16), (4, 3, 37, 29, 16), (2, 3, 5, 7, 17),
                                   (2, 9, 15)])
def test_outer_rows_walk_every_index(shape):
    """The outer dims walked as an odometer (carrying through several dims), rows of 16 (the
    loop compiled at that count: a blocked value's channel scale) and of other lengths,
    serial and split over threads (the large shape), against NumPy."""
    import fuel

    rng = np.random.default_rng(len(shape) + shape[-1])
    x = rng.standard_normal(shape).astype(np.float32)
    scale = rng.standard_normal(shape[:2] + (1,) * (len(shape) - 3) + shape[-1:]).astype(
        np.float32)
    other = rng.standard_normal(shape[::-1]).astype(np.float32)  # read transposed
    got = (fuel.from_numpy(x) * fuel.from_numpy(scale).expand(*shape)
           + fuel.from_numpy(other).permute(*reversed(range(len(shape))))).numpy()
    np.testing.assert_allclose(got, x * scale + other.transpose(), rtol=1e-6, atol=1e-6)
