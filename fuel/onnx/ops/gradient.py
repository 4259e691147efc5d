"""Gradient (ai.onnx.preview.training): reverse-mode differentiation of the fuel graph that
computes ``y`` from the ``xs``, one backward rule per op kind (a table below); the gradients
are lazy tensors like any other output. An op on the path without a rule is UnsupportedOp."""

from __future__ import annotations

from collections.abc import Callable

from fuel.frontend.structured import matmul
from fuel.graph.node import Node
from fuel.onnx.context import NodeContext, onnx_op
from fuel.onnx.errors import OnnxError, UnsupportedOp
from fuel.onnx.ops.common import OpKind, Tensor, cast, full

TRAINING = "ai.onnx.preview.training"
# op -> function(gradient of the output, node, input tensors, output tensor) -> input gradients
BackwardRule = Callable[[Tensor, Node, list[Tensor], Tensor], list[Tensor | None]]


def _reduced(gradient: Tensor, shape: tuple[int, ...]) -> Tensor:
    """``gradient`` summed over the dims broadcasting added to an operand of ``shape``."""
    if gradient.shape == shape:
        return gradient
    extra = gradient.ndim - len(shape)
    dims = tuple(range(extra)) + tuple(extra + i for i, size in enumerate(shape)
                                       if size == 1 and gradient.shape[extra + i] != 1)
    return gradient.sum(dims, keepdim=True).reshape(shape) if dims else gradient.reshape(shape)


def _binary(rule):
    def backward(gradient, node, inputs, output):
        a, b = inputs
        return [_reduced(g, x.shape) for g, x in zip(rule(gradient, a, b, output), (a, b))]

    return backward


BACKWARD: dict[OpKind, BackwardRule] = {
    OpKind.ADD: _binary(lambda g, a, b, out: (g, g)),
    OpKind.SUB: _binary(lambda g, a, b, out: (g, -g)),
    OpKind.MUL: _binary(lambda g, a, b, out: (g * b, g * a)),
    OpKind.DIV: _binary(lambda g, a, b, out: (g / b, -g * out / b)),
    OpKind.NEG: lambda g, node, inputs, out: [-g],
    OpKind.EXP: lambda g, node, inputs, out: [g * out],
    OpKind.LOG: lambda g, node, inputs, out: [g / inputs[0]],
    OpKind.SQRT: lambda g, node, inputs, out: [g * 0.5 / out],
    OpKind.TANH: lambda g, node, inputs, out: [g * (1.0 - out * out)],
    OpKind.SIGMOID: lambda g, node, inputs, out: [g * out * (1.0 - out)],
    OpKind.RELU: lambda g, node, inputs, out: [g * cast(inputs[0] > 0, g.dtype)],
    OpKind.CAST: lambda g, node, inputs, out: [cast(g, inputs[0].dtype)],
    OpKind.CONTIGUOUS: lambda g, node, inputs, out: [g],
    OpKind.RESHAPE: lambda g, node, inputs, out: [g.reshape(inputs[0].shape)],
    OpKind.EXPAND: lambda g, node, inputs, out: [_reduced(g, inputs[0].shape)],
    OpKind.MATMUL: lambda g, node, inputs, out: [
        _reduced(matmul(g, inputs[1].transpose(-1, -2)), inputs[0].shape),
        _reduced(matmul(inputs[0].transpose(-1, -2), g), inputs[1].shape)]
    if inputs[0].ndim >= 2 and inputs[1].ndim >= 2 else None,
}


def _path(y: Node, sources: set[int]) -> list[Node]:
    """The nodes between the sources and ``y`` that depend on a source, inputs first."""
    order: list[Node] = []
    depends: dict[int, bool] = {}

    def visit(node: Node) -> bool:
        key = id(node)
        if key in depends:
            return depends[key]
        depends[key] = False
        if key in sources:
            depends[key] = True
            return True
        found = False
        for source in node.inputs:
            found = visit(source) or found
        depends[key] = found
        if found:
            order.append(node)
        return found

    visit(y)
    return order


@onnx_op("Gradient", domain=TRAINING)
def gradient(ctx: NodeContext) -> list[Tensor]:
    xs, y_name = ctx.attr("xs") or [], ctx.attr("y")
    if y_name is None:
        raise OnnxError("Gradient needs a y attribute")
    y = ctx.scope.lookup(y_name)
    wrt = [ctx.scope.lookup(name) for name in xs]
    sources = {id(x._node) for x in wrt}
    gradients: dict[int, Tensor] = {id(y._node): full(y.shape, 1.0, y.dtype, y.device)}
    for node in reversed(_path(y._node, sources)):
        upstream = gradients.get(id(node))
        if upstream is None or id(node) in sources:
            continue
        rule = BACKWARD.get(node.op)
        inputs = [Tensor(source) for source in node.inputs]
        results = rule(upstream, node, inputs, Tensor(node)) if rule else None
        if results is None:
            raise UnsupportedOp(f"Gradient through {node.op.value} (shapes "
                                f"{[i.shape for i in inputs]}) is not supported")
        for source, result in zip(node.inputs, results):
            if result is None:
                continue
            previous = gradients.get(id(source))
            gradients[id(source)] = result if previous is None else previous + result
    return [gradients[id(x._node)] if id(x._node) in gradients
            else full(x.shape, 0.0, x.dtype, x.device) for x in wrt]
