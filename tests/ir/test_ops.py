"""The op registry: every op declared once, sets read from the records, operand constraints,
and each composite op's scalar expression computing what the op's reference computes."""

import numpy as np
import pytest

import fuel
from fuel.ir import dtype as dt
from fuel.ir.errors import DTypeError
from fuel.ir.ops import (
    INPLACE_OPS,
    OPS,
    PRIMITIVE_OPS,
    VIEW_OPS,
    OpKind,
    definition,
    infer,
)
from fuel.ir.params import NO_PARAMS, AxisParams
from tests.backends.kernel_cases.elementwise import BINARY_REFERENCES, UNARY_REFERENCES


def test_every_op_has_one_record():
    assert set(OPS) == set(OpKind)
    for kind, record in OPS.items():
        assert record.kind is kind
        assert record.doc, f"{kind!r} has no doc"


def test_sets_come_from_the_flags():
    assert VIEW_OPS == {OpKind.RESHAPE, OpKind.PERMUTE, OpKind.EXPAND, OpKind.SLICE}
    assert INPLACE_OPS == {OpKind.SLICE_ASSIGN, OpKind.INDEX_COPY}
    assert not VIEW_OPS & PRIMITIVE_OPS


def test_elementwise_records_declare_coverage_and_names():
    for record in OPS.values():
        if record.family in ("unary", "binary"):
            assert record.coverage, record.kind
            arity = 1 if record.family == "unary" else 2
            assert all(len(key) == arity + 1 for key in record.coverage), record.kind
            if record.method:
                assert callable(getattr(fuel.Tensor, record.method))
            if record.function:
                assert callable(getattr(fuel, record.function))


def _evaluate(expression, operands, dtype):
    """A scalar expression evaluated with the kernel suite's NumPy references."""
    computed = {}
    for node in expression.walk():
        if node.operand is not None:
            value = operands[node.operand]
        elif node.constant is not None:
            value = np.asarray(node.constant, dtype)
        elif node.op == "where":
            value = np.where(*[computed[id(a)] for a in node.args])
        else:
            kind = OpKind(node.op)
            function = UNARY_REFERENCES.get(kind) or BINARY_REFERENCES[kind]
            value = function(*[computed[id(a)] for a in node.args])
        computed[id(node)] = value
    return computed[id(expression)]


@pytest.mark.parametrize("kind", sorted((k for k, r in OPS.items() if r.expression is not None),
                                        key=lambda k: k.value), ids=lambda k: k.value)
def test_expression_computes_the_op(kind):
    record = definition(kind)
    for name in record.expression.ops():
        assert name == "where" or OpKind(name) in OPS, name
    x = np.linspace(-30.0, 30.0, 241)
    with np.errstate(all="ignore"):
        expected = UNARY_REFERENCES[kind](x)
        got = _evaluate(record.expression, [x], np.float64)
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


def test_operand_constraints_are_checked_when_built():
    with pytest.raises(DTypeError, match=r"operand 1 \(index\) must be int32 or int64"):
        infer(OpKind.GATHER, AxisParams(0), ((3,), (3,)), (dt.float32, dt.float32))
    with pytest.raises(DTypeError, match=r"operand 0 \(mask\) must be bool"):
        infer(OpKind.WHERE, NO_PARAMS, ((3,),) * 3, (dt.float32,) * 3)
    x = fuel.ones(3)
    with pytest.raises(fuel.DTypeError, match="index_select: operand 1"):
        from fuel.frontend.build import make

        make(OpKind.INDEX_SELECT, (x._node, x._node), AxisParams(0))
