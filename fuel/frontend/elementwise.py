"""Elementwise ops: unary, binary (with every Python operator), where, clamp."""

from __future__ import annotations

from fuel.frontend.build import cast, constant, expand, make, operand_nodes
from fuel.ir import dtype as dt
from fuel.ir.errors import DTypeError
from fuel.ir.ops import (
    COMPARE_OPS,
    LOGICAL_OPS,
    NO_PARAMS,
    UNARY_FLOAT_OPS,
    OpKind,
    broadcast_shapes,
)
from fuel.tensor import Tensor

# Unary ops that need a floating input: integers are promoted to the default float (torch).


def unary(op: OpKind, x: Tensor) -> Tensor:
    """Apply a unary elementwise op."""
    node = x._node
    if op in UNARY_FLOAT_OPS and not node.dtype.is_floating:
        node = cast(node, dt.DEFAULT_FLOAT)
    if op is OpKind.BITWISE_NOT and node.dtype.is_bool:
        op = OpKind.LOGICAL_NOT
    if op in (OpKind.NEG, OpKind.ABS, OpKind.SQUARE, OpKind.RELU, OpKind.SIGN) and \
            node.dtype.is_bool:
        raise DTypeError(f"{op.value} is not defined for bool tensors; cast first")
    return make(op, (node,), NO_PARAMS)


def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    """GELU with the exact erf form (``'none'``) or the tanh approximation (``'tanh'``)."""
    if approximate not in ("none", "tanh"):
        raise DTypeError(f"gelu approximate must be 'none' or 'tanh', got {approximate!r}")
    op = OpKind.GELU if approximate == "none" else OpKind.GELU_TANH
    node = x._node if x.dtype.is_floating else cast(x._node, dt.DEFAULT_FLOAT)
    return make(op, (node,), NO_PARAMS)


# torch turns arithmetic on two bool tensors into logic; the rest is undefined there too.
_BOOL_ARITHMETIC = {
    OpKind.ADD: OpKind.LOGICAL_OR,
    OpKind.MUL: OpKind.LOGICAL_AND,
    OpKind.MAXIMUM: OpKind.LOGICAL_OR,
    OpKind.MINIMUM: OpKind.LOGICAL_AND,
}
_BITWISE_ON_BOOL = {
    OpKind.BITWISE_AND: OpKind.LOGICAL_AND,
    OpKind.BITWISE_OR: OpKind.LOGICAL_OR,
    OpKind.BITWISE_XOR: OpKind.LOGICAL_XOR,
}


def binary(op: OpKind, a, b) -> Tensor:
    """Apply a binary op with promotion (scalars are weak) and NumPy broadcasting."""
    fast = _same_kind_operands(a, b)
    if fast is not None and not (op is OpKind.DIV and not fast[0].dtype.is_floating):
        return make(op, fast, NO_PARAMS)
    shape = _tensor_shape(a, b)
    (left, right), dtype = operand_nodes([a, b], shape=shape)
    if op is OpKind.DIV and not dtype.is_floating:
        dtype = dt.DEFAULT_FLOAT
        left, right = cast(left, dtype), cast(right, dtype)
    if dtype.is_bool:
        if op in _BOOL_ARITHMETIC:
            op = _BOOL_ARITHMETIC[op]
        elif op in _BITWISE_ON_BOOL:
            op = _BITWISE_ON_BOOL[op]
        elif op not in COMPARE_OPS and op not in LOGICAL_OPS:
            raise DTypeError(f"{op.value} is not defined for bool tensors; cast first")
    shape = broadcast_shapes(left.shape, right.shape) if left.shape != right.shape else left.shape
    return make(op, (expand(left, shape), expand(right, shape)), NO_PARAMS)


def _tensor_shape(*values) -> tuple[int, ...]:
    """The broadcast shape of the tensor operands (scalars take it on)."""
    shapes = [v._node.shape for v in values if isinstance(v, Tensor)]
    if len(shapes) == 1 or all(s == shapes[0] for s in shapes):
        return shapes[0]
    return broadcast_shapes(*shapes)


def _same_kind_operands(a, b):
    """The common case without promotion or broadcasting: a tensor with a tensor of the same
    dtype and shape, or a float tensor with a Python float (None otherwise)."""
    if a.__class__ is Tensor:
        left = a._node
        if b.__class__ is Tensor:
            right = b._node
            if left.dtype is right.dtype and left.shape == right.shape and \
                    not left.dtype.is_bool:
                return left, right
            return None
        if b.__class__ is float and left.dtype.is_floating:
            return left, constant(b, left.dtype, left.device, left.shape)
    elif b.__class__ is Tensor and a.__class__ is float and b._node.dtype.is_floating:
        right = b._node
        return constant(a, right.dtype, right.device, right.shape), right
    return None


def where(condition, a, b, dtype: dt.DType | None = None) -> Tensor:
    """``a`` where ``condition`` holds, else ``b`` (broadcast together); ``dtype`` forces the
    result type (masked_fill keeps the tensor's own)."""
    if not isinstance(condition, Tensor):
        raise DTypeError("where() needs a bool tensor condition")
    cond = condition._node if condition.dtype.is_bool else cast(condition._node, dt.bool_)
    if not isinstance(a, Tensor) and not isinstance(b, Tensor):
        dtype = dtype or dt.promote_with_scalar(dt.promote_with_scalar(dt.bool_, a), b)
        a = Tensor(constant(a, dtype, cond.device))
    shape = broadcast_shapes(cond.shape, _tensor_shape(a, b))
    (a_node, b_node), dtype = operand_nodes([a, b], dtype, shape)
    return make(OpKind.WHERE, (expand(cond, shape), expand(a_node, shape), expand(b_node, shape)),
                NO_PARAMS)


def clamp(x: Tensor, low=None, high=None) -> Tensor:
    """Limit values to ``[low, high]`` (either may be None); NaN passes through."""
    if low is None and high is None:
        raise DTypeError("clamp() needs at least one of min or max")
    result = x
    if low is not None:
        result = binary(OpKind.MAXIMUM, result, low)
    if high is not None:
        result = binary(OpKind.MINIMUM, result, high)
    return result


UNARY_METHODS = {
    "neg": OpKind.NEG, "abs": OpKind.ABS, "exp": OpKind.EXP, "log": OpKind.LOG,
    "sqrt": OpKind.SQRT, "rsqrt": OpKind.RSQRT, "reciprocal": OpKind.RECIPROCAL,
    "square": OpKind.SQUARE, "sin": OpKind.SIN, "cos": OpKind.COS, "tanh": OpKind.TANH,
    "sigmoid": OpKind.SIGMOID, "relu": OpKind.RELU, "silu": OpKind.SILU, "erf": OpKind.ERF,
    "floor": OpKind.FLOOR, "ceil": OpKind.CEIL, "round": OpKind.ROUND, "sign": OpKind.SIGN,
    "logical_not": OpKind.LOGICAL_NOT, "isnan": OpKind.ISNAN, "bitwise_not": OpKind.BITWISE_NOT,
    "__neg__": OpKind.NEG, "__abs__": OpKind.ABS, "__invert__": OpKind.BITWISE_NOT,
}

BINARY_METHODS = {
    "add": OpKind.ADD, "sub": OpKind.SUB, "mul": OpKind.MUL, "div": OpKind.DIV,
    "remainder": OpKind.REMAINDER, "pow": OpKind.POW, "maximum": OpKind.MAXIMUM,
    "minimum": OpKind.MINIMUM, "eq": OpKind.EQ, "ne": OpKind.NE, "lt": OpKind.LT,
    "le": OpKind.LE, "gt": OpKind.GT, "ge": OpKind.GE, "logical_and": OpKind.LOGICAL_AND,
    "logical_or": OpKind.LOGICAL_OR, "logical_xor": OpKind.LOGICAL_XOR,
    "bitwise_and": OpKind.BITWISE_AND, "bitwise_or": OpKind.BITWISE_OR,
    "bitwise_xor": OpKind.BITWISE_XOR, "subtract": OpKind.SUB, "multiply": OpKind.MUL,
    "divide": OpKind.DIV, "true_divide": OpKind.DIV, "fmod_python": OpKind.REMAINDER,
    "__add__": OpKind.ADD, "__sub__": OpKind.SUB, "__mul__": OpKind.MUL,
    "__truediv__": OpKind.DIV, "__mod__": OpKind.REMAINDER, "__pow__": OpKind.POW,
    "__eq__": OpKind.EQ, "__ne__": OpKind.NE, "__lt__": OpKind.LT, "__le__": OpKind.LE,
    "__gt__": OpKind.GT, "__ge__": OpKind.GE, "__and__": OpKind.BITWISE_AND,
    "__or__": OpKind.BITWISE_OR, "__xor__": OpKind.BITWISE_XOR,
}

REFLECTED_METHODS = {
    "__radd__": OpKind.ADD, "__rsub__": OpKind.SUB, "__rmul__": OpKind.MUL,
    "__rtruediv__": OpKind.DIV, "__rmod__": OpKind.REMAINDER, "__rpow__": OpKind.POW,
    "__rand__": OpKind.BITWISE_AND, "__ror__": OpKind.BITWISE_OR, "__rxor__": OpKind.BITWISE_XOR,
}


def _unary_method(op: OpKind):
    def method(self: Tensor) -> Tensor:
        return unary(op, self)

    method.__doc__ = f"Elementwise {op.value}."
    return method


def _binary_method(op: OpKind):
    def method(self: Tensor, other) -> Tensor:
        return binary(op, self, other)

    method.__doc__ = f"Elementwise {op.value} with broadcasting."
    return method


def _reflected_method(op: OpKind):
    def method(self: Tensor, other) -> Tensor:
        return binary(op, other, self)

    method.__doc__ = f"Elementwise {op.value} with the scalar on the left."
    return method


def _pos(self: Tensor) -> Tensor:
    return self


def _gelu_method(self: Tensor, approximate: str = "none") -> Tensor:
    return gelu(self, approximate)


def install(cls) -> None:
    """Attach the elementwise methods and operators to Tensor."""
    for name, op in UNARY_METHODS.items():
        setattr(cls, name, _unary_method(op))
    for name, op in BINARY_METHODS.items():
        setattr(cls, name, _binary_method(op))
    for name, op in REFLECTED_METHODS.items():
        setattr(cls, name, _reflected_method(op))
    cls.__pos__ = _pos
    cls.gelu = _gelu_method
    cls.__hash__ = lambda self: id(self)
