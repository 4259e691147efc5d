"""IR legalization (``fuel.compiler.legalize``) and the walks every renderer shares
(``kernel_ir.stride_pattern``, ``row_schedule``, the ``REDUCTIONS`` table): WGSL's int64 is
retyped to the i32 it is held in (identity casts dropped, loads kept in place), bool
arithmetic becomes the logical ops it equals, and what renders is the shared tables' over the
legalized dtypes."""

from __future__ import annotations

import pytest

from fuel.compiler.kernel_ir import (
    REDUCE_OPS,
    REDUCTIONS,
    KernelBuilder,
    Load,
    Store,
    Value,
    reduction,
    row_schedule,
    stride_pattern,
)
from fuel.compiler.render_c import C_DIALECT
from fuel.compiler.render_c import renders as c_renders
from fuel.compiler.render_expression import combine, identity
from fuel.compiler.render_wgsl import WGSL_LEGALIZATION, render_wgsl, renders
from fuel.ir import dtype as dt
from fuel.ir.ops import OpKind


def test_int64_is_retyped_and_identity_casts_drop():
    builder = KernelBuilder((8,))
    narrow = builder.load(Load(dt.int32, (1,)))
    wide = builder.load(Load(dt.int64, (0,), offset=3))
    total = builder.apply(OpKind.ADD, (builder.cast(narrow, dt.int64), wide), dt.int64)
    kernel = builder.build("k", [Store(total, dt.int64)])
    legal = WGSL_LEGALIZATION.apply(kernel)
    assert all(v.dtype is not dt.int64 for v in legal.values)
    assert [(load.dtype, load.strides, load.offset) for load in legal.loads] == [
        (dt.int32, (1,), 0), (dt.int32, (0,), 3)]
    assert [v.op for v in legal.values] == ["load", "load", "add"]  # the cast became nothing
    assert legal.stores[0].dtype is dt.int32 and legal.values[legal.stores[0].value].op == "add"
    assert "i32" in render_wgsl(kernel, 1)


@pytest.mark.parametrize("op, logical", [
    (OpKind.ADD, "logical_or"), (OpKind.MUL, "logical_and"), (OpKind.SUB, "logical_xor"),
    (OpKind.MAXIMUM, "logical_or"), (OpKind.MINIMUM, "logical_and"),
    (OpKind.BITWISE_XOR, "logical_xor")])
def test_bool_arithmetic_becomes_logic(op, logical):
    builder = KernelBuilder((4,))
    a, b = builder.load(Load(dt.bool_, (1,))), builder.load(Load(dt.bool_, (1,)))
    kernel = builder.build("k", [Store(builder.value(Value(op.value, dt.bool_, (a, b))),
                                       dt.bool_)])
    assert WGSL_LEGALIZATION.apply(kernel).values[-1].op == logical


def test_ordered_bool_comparisons_compare_integers():
    builder = KernelBuilder((4,))
    a, b = builder.load(Load(dt.bool_, (1,))), builder.load(Load(dt.bool_, (1,)))
    kernel = builder.build("k", [Store(builder.apply(OpKind.LT, (a, b), dt.bool_), dt.bool_)])
    legal = WGSL_LEGALIZATION.apply(kernel)
    compared = legal.values[-1]
    assert compared.op == "lt"
    assert [legal.values[x].dtype for x in compared.args] == [dt.uint32, dt.uint32]


def test_what_renders_is_the_shared_tables_over_legal_dtypes():
    i64, i32 = (dt.int64,) * 3, (dt.int32,) * 3
    assert renders("add", i64) and renders("int_div", i64)
    assert not renders("bitshift_left", i64)  # its result depends on the lost bits
    assert renders("bitshift_left", i32)
    assert renders("pow", i32) and not c_renders("pow", i32)  # WGSL has integer helpers
    assert not renders("exp", (dt.int32, dt.int32))  # float-only, as everywhere
    assert not renders("add", (dt.float64,) * 3)  # no 64-bit float in WGSL


def test_stride_patterns_and_the_row_schedule():
    assert [stride_pattern(s) for s in [(1,), (0,), (3,), (0, 0), (5, 1)]] == [
        "dense", "broadcast", "strided", "broadcast", "decoded"]
    # (2, 3) rows of a (4, 5) row: a dense operand, a transposed one and a per-row store
    dense = (60, 20, 5, 1)
    transposed = (1, 2, 6, 24)
    per_row = (3, 1, 0, 0)
    schedule = row_schedule((2, 3, 4, 5), 2, [dense, transposed, per_row])
    assert schedule.rows == 6 and schedule.length == 20
    assert schedule.patterns == ["decoded", "decoded", "broadcast"]  # dims walked apart
    assert schedule.outer_sizes == (2, 3) and schedule.row_sizes == (4, 5)
    assert schedule.row_strides[0] == (5, 1) and schedule.outer_strides[2] == (3, 1)
    merged = row_schedule((2, 3, 4, 5), 2, [dense, per_row])  # both walk each part as one
    assert merged.outer_sizes == (6,) and merged.row_sizes == (20,)
    assert merged.patterns == ["dense", "broadcast"] and merged.outer_strides == [(20,), (1,)]
    single = row_schedule((2, 1), 1, [(1, 7)])  # a single row dim is kept as it is
    assert single.row_sizes == (1,) and single.patterns == ["strided"]


def test_every_reduction_spells_from_the_one_table():
    assert REDUCE_OPS == frozenset(REDUCTIONS)
    assert reduction("mean").divides and not reduction("sum").divides
    assert identity("prod", dt.int32, C_DIALECT) == "1"
    assert identity("max", dt.int32, C_DIALECT) == "(-2147483648LL)"
    assert combine("max", "a", "x") == "((x > a || x != x) ? x : a)"
    assert combine("any", "a", "x") == "(a || x)"
    with pytest.raises(ValueError, match="not a reduction"):
        reduction("median")


def test_float16_is_computed_in_float32_and_cast_back_where_computed():
    builder = KernelBuilder((4,))
    a, b = builder.load(Load(dt.float16, (1,))), builder.load(Load(dt.float16, (1,)))
    total = builder.apply(OpKind.ADD, (a, b), dt.float16)
    chosen = builder.value(Value("where", dt.float16, (builder.apply(
        OpKind.GT, (a, b), dt.bool_), total, a)))
    kernel = builder.build("k", [Store(chosen, dt.float16)])
    legal = WGSL_LEGALIZATION.apply(kernel)
    ops = [(v.op, v.dtype) for v in legal.values]
    assert ("add", dt.float32) in ops and ("add", dt.float16) not in ops
    added = next(i for i, v in enumerate(legal.values) if v.op == "add")
    rounded = next(v for v in legal.values if v.op == "cast" and v.args == (added,))
    assert rounded.dtype is dt.float16  # the one rounding, where the sum is computed
    assert ("where", dt.float16) in ops  # a selection computes nothing
    assert legal.stores[0].dtype is dt.float16
