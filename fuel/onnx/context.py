"""The op registry and the per-node context every ONNX op converter receives.

A converter maps one ONNX node onto fuel's lazy front end: ``@onnx_op("Relu")`` registers a
function ``(ctx: NodeContext) -> Tensor | list``. Inputs that decide shapes (a Reshape's shape,
a Slice's starts) are read on the host with ``ctx.static(i)``, which realizes the small graph
behind them, so the rest of the model stays a static graph.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from fuel.ir.dtype import DType
from fuel.onnx.errors import OnnxError, UnsupportedOp
from fuel.onnx.proto import attribute_value, fuel_dtype
from fuel.tensor import Tensor

Converter = Callable[["NodeContext"], object]
DEFAULT_DOMAINS = ("", "ai.onnx")
# (domain, op_type) -> converter; the default domain is stored as "".
OPS: dict[tuple[str, str], Converter] = {}


def onnx_op(*op_types: str, domain: str = "") -> Callable[[Converter], Converter]:
    """Register a converter for one or more op types of ``domain`` (default: ai.onnx)."""

    def register(function: Converter) -> Converter:
        for op_type in op_types:
            OPS[(_domain_key(domain), op_type)] = function
        return function

    return register


def _domain_key(domain: str) -> str:
    return "" if domain in DEFAULT_DOMAINS else domain


def find_converter(domain: str, op_type: str) -> Converter | None:
    """The converter registered for (domain, op_type), or None."""
    return OPS.get((_domain_key(domain), op_type))


@dataclass
class SequenceValue:
    """An ONNX sequence: a list of tensors of one element type."""

    items: list
    dtype: DType | None = None


@dataclass
class OptionalValue:
    """An ONNX optional: a tensor, a sequence, or nothing (``value is None``)."""

    value: object = None
    type_proto: object = field(default=None, repr=False)


class Scope:
    """Names -> values (Tensor, SequenceValue, OptionalValue); subgraphs see their parents."""

    __slots__ = ("values", "parent")

    def __init__(self, parent: Scope | None = None) -> None:
        self.values: dict[str, object] = {}
        self.parent = parent

    def lookup(self, name: str):
        scope = self
        while scope is not None:
            if name in scope.values:
                return scope.values[name]
            scope = scope.parent
        raise KeyError(name)

    def __contains__(self, name: str) -> bool:
        try:
            self.lookup(name)
        except KeyError:
            return False
        return True


class NodeContext:
    """One ONNX node being converted: its inputs, attributes, opset and the builder."""

    __slots__ = ("proto", "builder", "inputs", "attributes", "opset", "label", "scope")

    def __init__(self, proto, builder, inputs: list, opset: int, label: str, scope: Scope):
        self.proto = proto
        self.builder = builder
        self.inputs = inputs
        self.opset = opset
        self.label = label
        self.scope = scope
        self.attributes = {a.name: a for a in proto.attribute}

    # ------------------------------------------------------------------ attributes
    def attr(self, name: str, default=None):
        """The attribute's Python value, or ``default`` when the node does not set it."""
        attribute = self.attributes.get(name)
        if attribute is None:
            return default
        if attribute.ref_attr_name:
            raise UnsupportedOp(f"attribute {name!r} refers to a function attribute")
        return attribute_value(attribute, self.label)

    def has_attr(self, name: str) -> bool:
        return name in self.attributes

    # ------------------------------------------------------------------ inputs
    @property
    def device(self):
        return self.builder.device

    @property
    def num_inputs(self) -> int:
        return len(self.inputs)

    @property
    def num_outputs(self) -> int:
        return len(self.proto.output)

    def wants_output(self, index: int) -> bool:
        """Whether output ``index`` is named (an empty name means the output is unused)."""
        return index < len(self.proto.output) and bool(self.proto.output[index])

    def has(self, index: int) -> bool:
        return index < len(self.inputs) and self.inputs[index] is not None

    def input(self, index: int) -> Tensor:
        """Input ``index`` as a Tensor; a missing required input is an error."""
        if not self.has(index):
            raise OnnxError(f"input {index} is required")
        value = self.inputs[index]
        if not isinstance(value, Tensor):
            raise OnnxError(f"input {index} must be a tensor, got {type(value).__name__}")
        return value

    def optional(self, index: int) -> Tensor | None:
        return self.input(index) if self.has(index) else None

    def value(self, index: int):
        """Input ``index`` as whatever it is (tensor, sequence, optional) or None."""
        return self.inputs[index] if index < len(self.inputs) else None

    def static(self, index: int, default=None) -> np.ndarray | None:
        """Input ``index`` evaluated on the host (``default`` when the input is absent)."""
        if not self.has(index):
            return default
        return self.builder.host_value(self.input(index))

    def static_scalar(self, index: int, default=None):
        """A one-element input as a Python number (``default`` when absent)."""
        values = self.static(index)
        if values is None:
            return default
        values = np.asarray(values).reshape(-1)
        if values.size != 1:
            raise OnnxError(f"input {index} must hold one value, got {values.size}")
        return values[0].item()

    def static_ints(self, index: int, default=None) -> list[int] | None:
        values = self.static(index)
        if values is None:
            return default
        return [int(v) for v in np.asarray(values).reshape(-1)]

    def ints_from(self, index: int, attr_name: str, default=None) -> list[int] | None:
        """A list of ints given as input ``index`` (newer opsets) or as an attribute."""
        if self.has(index):
            return self.static_ints(index)
        value = self.attr(attr_name)
        return list(value) if value is not None else default

    def constant(self, array, dtype: DType | str | None = None) -> Tensor:
        """A realized leaf holding ``array`` on the model's device."""
        return self.builder.constant(array, dtype)

    def elem_dtype(self, attr_name: str, default=None) -> DType | None:
        """An attribute naming an ONNX element type, as a fuel dtype."""
        value = self.attr(attr_name)
        if value is None:
            return default
        return fuel_dtype(value, self.label)

    def run_subgraph(self, graph, inputs: list, outer: Scope | None = None) -> list:
        """Run a graph attribute with ``inputs`` bound to its formal inputs; its outputs."""
        return self.builder.run_subgraph(graph, inputs, outer or self.scope)
