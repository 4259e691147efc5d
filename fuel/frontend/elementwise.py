"""Elementwise ops: unary, binary (with every Python operator), where, clamp."""

from __future__ import annotations

from sys import _getframe
from typing import TYPE_CHECKING, TypeVar

from fuel.frontend import tape
from fuel.frontend.base import TensorBase, wrap
from fuel.frontend.build import (
    at_user_line,
    cast,
    code_sites,
    constant,
    expand,
    frame_site,
    make,
    operand_nodes,
    pair_rule,
)
from fuel.graph.node import Node, sites_in_progress
from fuel.graph.node import user_site_holder as site_holder
from fuel.ir import dtype as dt
from fuel.ir.errors import DTypeError, InvalidArgument
from fuel.ir.ops import (
    COMPARE_OPS,
    LOGICAL_OPS,
    NO_PARAMS,
    UNARY_FLOAT_OPS,
    OpKind,
    broadcast_shapes,
    check_operand,
)

if TYPE_CHECKING:
    from typing_extensions import Self  # typing.Self from Python 3.11

# Unary ops that need a floating input: integers are promoted to the default float (torch).


_T = TypeVar("_T")


def tensor_operand(x: _T, function: str) -> _T:
    """``x`` when it is a Tensor; InvalidArgument naming ``fuel.<function>`` otherwise (typed
    as given, so a caller that took a ``fuel.Tensor`` keeps its methods)."""
    if not isinstance(x, TensorBase):
        raise InvalidArgument(f"fuel.{function}() takes a Tensor first, got {type(x).__name__}")
    return x


def unary(op: OpKind, x: TensorBase) -> TensorBase:
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


def gelu(x: TensorBase, approximate: str = "none") -> TensorBase:
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


def binary(op: OpKind, a, b) -> TensorBase:
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
    shapes = [v._node.shape for v in values if isinstance(v, TensorBase)]
    if len(shapes) == 1 or all(s == shapes[0] for s in shapes):
        return shapes[0]
    return broadcast_shapes(*shapes)


def _same_kind_operands(a, b):
    """The common case without promotion or broadcasting: a tensor with a tensor of the same
    dtype and shape, or a float tensor with a Python float (None otherwise)."""
    tensor = TensorBase.concrete
    if a.__class__ is tensor:
        left = a._node
        if b.__class__ is tensor:
            right = b._node
            if left.dtype is right.dtype and left.shape == right.shape and \
                    not left.dtype.is_bool:
                return left, right
            return None
        if b.__class__ is float and left.dtype.is_floating:
            return left, constant(b, left.dtype, left.device, left.shape)
    elif b.__class__ is tensor and a.__class__ is float and b._node.dtype.is_floating:
        right = b._node
        return constant(a, right.dtype, right.device, right.shape), right
    return None


new_object = object.__new__


def binary_operator(op: OpKind, reflected: bool = False):
    """Tensor's operator method for ``op`` (``__add__``; ``__radd__`` when ``reflected``): the
    common case of ``_same_kind_operands`` built inline, the rest through ``binary``; either
    way the node carries the user's line and errors name it.

    The inline path is a node's whole construction in one frame: the scalar's constant and
    the rule's result come from one-entry memos (a loop applies an operator to one literal at
    one dtype and shape), the site from the caller's code object and instruction offset
    (``user_site``), and the Node and Tensor are filled without a Python ``__init__``. It
    builds exactly the Node that ``make(op, (left, right), NO_PARAMS)`` builds (the test
    tests/frontend/test_operator_fast_path.py compares every slot)."""
    if reflected:
        def general(self, other) -> TensorBase:
            return binary(op, other, self)
    else:
        def general(self, other) -> TensorBase:
            return binary(op, self, other)
    general = at_user_line(general)
    needs_float = op is OpKind.DIV  # integer division promotes: the general path
    # (value, dtype, device, shape, constant node, rule result) of the last Python float;
    # (dtype, shape, rule result) of the last two tensors: each one tuple, read and replaced
    # whole (threads).
    last_scalar: tuple = (None, None, None, None, None, None)
    last_rule: tuple = (None, None, None)
    tensor_class = None  # fuel.Tensor (TensorBase.concrete), once it is defined

    def operator(self, other) -> TensorBase:
        nonlocal last_scalar, last_rule, tensor_class
        left = self._node
        dtype = left.dtype
        kind = type(other)  # (not __class__: a specialized call, not an attribute lookup)
        device = left.device
        shape = left.shape
        if kind is float:
            if dtype.kind != "f":
                return general(self, other)
            value, seen_dtype, seen_device, seen_shape, right, found = last_scalar
            if value is not other or seen_dtype is not dtype or seen_device is not device or \
                    seen_shape is not shape and seen_shape != shape:
                found = pair_rule(op, dtype, shape)
                if found is None:
                    return general(self, other)
                right = constant(other, dtype, device, shape)
                last_scalar = (other, dtype, device, shape, right, found)
        else:
            if tensor_class is None:
                tensor_class = TensorBase.concrete
            if kind is not tensor_class:
                return general(self, other)
            right = other._node
            if right.dtype is not dtype or right.shape is not shape and right.shape != shape or \
                    dtype.kind == "b" or right.device is not device or \
                    needs_float and dtype.kind != "f":
                return general(self, other)
            seen_dtype, seen_shape, found = last_rule
            if seen_dtype is not dtype or seen_shape is not shape and seen_shape != shape:
                found = pair_rule(op, dtype, shape)
                if found is None:
                    return general(self, other)
                last_rule = (dtype, shape, found)
        if reflected:
            left, right = right, left
        site = site_holder.site if sites_in_progress else None
        if site is None:  # no API entry in progress: the caller's line (user_site's hit inline)
            caller = _getframe(1)
            code = caller.f_code
            entry = code_sites.get(id(code))
            if entry is None or entry[0] is not code or entry[1] is None or \
                    (site := entry[1].get(caller.f_lasti)) is None:
                site = frame_site(caller)
        node = new_object(Node)  # Node(op, (left, right), NO_PARAMS, ...) without __init__
        node.op = op
        node.inputs = (left, right)
        node.params = NO_PARAMS
        node.dtype = found[1]
        node.shape = found[0]
        node.device = device
        node.site = site
        node.buffer = None
        node.layout = None
        node.key = hash((found[2], device.key, left.key, right.key))
        if tape.ACTIVE:
            tape.record(node)
        if tensor_class is None:
            tensor_class = TensorBase.concrete
        result = new_object(tensor_class)  # wrap(node) without a Python __init__
        result._node = node
        return result

    operator.__name__ = operator.__qualname__ = general.__name__
    operator.__doc__ = f"``{op.value}`` as a Python operator (torch's promotion and broadcasting)."
    return operator


def where(condition, a, b, dtype: dt.DType | None = None, function: str = "where",
          role: str = "condition") -> TensorBase:
    """``a`` where the bool ``condition`` holds, else ``b`` (broadcast together); ``dtype``
    forces the result type (masked_fill keeps the tensor's own). ``function`` and ``role``
    name the user's call in a refusal (``masked_fill: the mask must be bool``)."""
    if not isinstance(condition, TensorBase):
        raise DTypeError(f"{function}: the {role} must be a bool Tensor, got "
                         f"{type(condition).__name__}")
    check_operand(f"{function}: the {role}", "mask", condition.dtype)  # as torch: no casting
    cond = condition._node
    if not isinstance(a, TensorBase) and not isinstance(b, TensorBase):
        dtype = dtype or dt.promote_with_scalar(dt.promote_with_scalar(dt.bool_, a), b)
        a = wrap(constant(a, dtype, cond.device))
    shape = broadcast_shapes(cond.shape, _tensor_shape(a, b))
    (a_node, b_node), dtype = operand_nodes([a, b], dtype, shape)
    return make(OpKind.WHERE, (expand(cond, shape), expand(a_node, shape), expand(b_node, shape)),
                NO_PARAMS)


def clamp(x: TensorBase, low=None, high=None) -> TensorBase:
    """Limit values to ``[low, high]`` (either may be None); NaN passes through."""
    if low is None and high is None:
        raise DTypeError("clamp() needs at least one of min or max")
    result = x
    if low is not None:
        result = binary(OpKind.MAXIMUM, result, low)
    if high is not None:
        result = binary(OpKind.MINIMUM, result, high)
    return result


class ElementwiseMethods:
    """Tensor's Python operators and the elementwise methods with options of their own; the
    plain ones (``exp``, ``add``, ...) are generated from the op registry."""

    __slots__ = ()

    @at_user_line
    def __neg__(self) -> Self:
        return unary(OpKind.NEG, self)

    @at_user_line
    def __abs__(self) -> Self:
        return unary(OpKind.ABS, self)

    @at_user_line
    def __invert__(self) -> Self:
        return unary(OpKind.BITWISE_NOT, self)

    def __pos__(self) -> Self:
        return self

    __add__ = binary_operator(OpKind.ADD)
    __radd__ = binary_operator(OpKind.ADD, reflected=True)
    __sub__ = binary_operator(OpKind.SUB)
    __rsub__ = binary_operator(OpKind.SUB, reflected=True)
    __mul__ = binary_operator(OpKind.MUL)
    __rmul__ = binary_operator(OpKind.MUL, reflected=True)
    __truediv__ = binary_operator(OpKind.DIV)
    __rtruediv__ = binary_operator(OpKind.DIV, reflected=True)
    __mod__ = binary_operator(OpKind.REMAINDER)
    __rmod__ = binary_operator(OpKind.REMAINDER, reflected=True)
    __pow__ = binary_operator(OpKind.POW)
    __rpow__ = binary_operator(OpKind.POW, reflected=True)
    __and__ = binary_operator(OpKind.BITWISE_AND)
    __rand__ = binary_operator(OpKind.BITWISE_AND, reflected=True)
    __or__ = binary_operator(OpKind.BITWISE_OR)
    __ror__ = binary_operator(OpKind.BITWISE_OR, reflected=True)
    __xor__ = binary_operator(OpKind.BITWISE_XOR)
    __rxor__ = binary_operator(OpKind.BITWISE_XOR, reflected=True)
    __eq__ = binary_operator(OpKind.EQ)  # type: ignore[assignment]
    __ne__ = binary_operator(OpKind.NE)  # type: ignore[assignment]
    __lt__ = binary_operator(OpKind.LT)
    __le__ = binary_operator(OpKind.LE)
    __gt__ = binary_operator(OpKind.GT)
    __ge__ = binary_operator(OpKind.GE)

    def __hash__(self) -> int:
        return id(self)

    @at_user_line
    def subtract(self, other) -> Self:
        """Alias of ``sub``."""
        return binary(OpKind.SUB, self, other)

    @at_user_line
    def multiply(self, other) -> Self:
        """Alias of ``mul``."""
        return binary(OpKind.MUL, self, other)

    @at_user_line
    def divide(self, other) -> Self:
        """Alias of ``div``."""
        return binary(OpKind.DIV, self, other)

    true_divide = divide

    @at_user_line
    def gelu(self, approximate: str = "none") -> Self:
        """GELU, exact (``'none'``) or with the tanh approximation (``'tanh'``)."""
        return gelu(self, approximate)

    @at_user_line
    def clamp(self, min=None, max=None) -> Self:  # noqa: A002 - torch's names
        """Limit values to ``[min, max]`` (either may be None); NaN passes through."""
        return clamp(self, min, max)

    clip = clamp

    @at_user_line
    def where(self, condition, other) -> Self:
        """self where ``condition`` holds, else ``other``."""
        return where(condition, self, other)

    @at_user_line
    def masked_fill(self, mask, value) -> Self:
        """``value`` where ``mask`` holds, keeping this tensor's dtype."""
        return where(mask, value, self, dtype=self.dtype, function="masked_fill", role="mask")
