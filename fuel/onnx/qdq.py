"""QDQ folding at load: a Conv between DequantizeLinear inputs and one QuantizeLinear becomes
the QLinearConv it stands for, as onnxruntime's QDQ transformer does:

    DequantizeLinear(x_q) --\\
    DequantizeLinear(w_q) ---> Conv -> QuantizeLinear -> y_q   ==>   QLinearConv(...) -> y_q
    DequantizeLinear(b_q) --/

so the convolution sums integers (``fuel.onnx.ops.quantize.integer_conv``) and re-quantizes
the sum once, like onnxruntime, instead of multiplying de-quantized floats and rounding a
value that differs from onnxruntime's in its last bits. The fold holds when the weights and
bias are initializers, the scales and zero points are initializers of one value (the weights'
may be one per output channel, ``axis`` 0), every zero point is 8-bit, the bias is int32 with
zero point 0 and scale x_scale * w_scale, the Conv's output feeds the QuantizeLinear alone,
no ``block_size`` or ``output_dtype`` is set, and (onnxruntime's rule, so both systems
round the same values) the input's DequantizeLinear feeds this Conv alone. Anything else
runs as written.
"""

from __future__ import annotations

import numpy as np

from fuel.onnx.proto import tensor_to_array

EIGHT_BIT = (2, 3)  # TensorProto.UINT8, INT8
INT32 = 6


def _attr(node, name: str, default=None):
    for attribute in node.attribute:
        if attribute.name == name:
            import onnx

            return onnx.helper.get_attribute_value(attribute)
    return default


def fold_qdq(graph, base_dir: str = ""):
    """``graph`` with each foldable DQ -> Conv -> Q chain as one QLinearConv (a copy; the
    same graph when nothing folds)."""
    if not any(n.op_type == "QuantizeLinear" for n in graph.node):
        return graph
    from fuel.onnx.builder import count_consumers

    initializers = {t.name: t for t in graph.initializer}
    producers = {out: node for node in graph.node for out in node.output if out}
    uses: dict[str, int] = {}
    count_consumers(graph, uses)
    users: dict[str, list] = {}
    for node in graph.node:
        for name in node.input:
            users.setdefault(name, []).append(node)
    values: dict[str, np.ndarray | None] = {}

    def value(name: str) -> np.ndarray | None:
        if name not in values:
            proto = initializers.get(name)
            values[name] = None if proto is None else tensor_to_array(proto, name, base_dir)
        return values[name]

    def dequantize(name: str, weights: bool):
        node = producers.get(name)
        if node is None or node.op_type != "DequantizeLinear" or node.domain not in ("",
                                                                                     "ai.onnx"):
            return None
        if _attr(node, "block_size", 0) or (weights and node.input[0] not in initializers):
            return None
        return node

    def scalar(name: str) -> bool:
        array = value(name) if name else None
        return array is not None and array.size == 1

    folded: dict[int, object] = {}
    dropped: set[int] = set()
    for conv in graph.node:
        if conv.op_type != "Conv" or conv.domain not in ("", "ai.onnx") or \
                uses.get(conv.output[0], 0) != 1:
            continue
        quantizer = users.get(conv.output[0], [None])[0]
        if quantizer is None or quantizer.op_type != "QuantizeLinear" or \
                quantizer.domain not in ("", "ai.onnx") or len(quantizer.input) < 3 or \
                _attr(quantizer, "block_size", 0) or _attr(quantizer, "output_dtype", 0) or \
                not _attr(quantizer, "saturate", 1) or \
                not (scalar(quantizer.input[1]) and scalar(quantizer.input[2])):
            continue
        dq_x, dq_w = dequantize(conv.input[0], False), dequantize(conv.input[1], True)
        if dq_x is None or dq_w is None or len(dq_x.input) < 3 or len(dq_w.input) < 2 or \
                uses.get(conv.input[0], 0) != 1:  # onnxruntime's rule: no shared input DQ
            continue
        x_scale, w_scale = value(dq_x.input[1]), value(dq_w.input[1])
        if not (scalar(dq_x.input[1]) and scalar(dq_x.input[2])) or w_scale is None:
            continue
        zeros = [value(dq_x.input[2]), value(quantizer.input[2])]
        if any(z.dtype not in (np.uint8, np.int8) for z in zeros):
            continue
        weights = value(dq_w.input[0])
        if weights.dtype not in (np.uint8, np.int8) or (
                w_scale.size > 1 and (w_scale.size != weights.shape[0] or
                                      _attr(dq_w, "axis", 1) % weights.ndim != 0)):
            continue
        bias = ""
        if len(conv.input) > 2 and conv.input[2]:
            dq_b = dequantize(conv.input[2], True)
            if dq_b is None or value(dq_b.input[0]).dtype != np.int32:
                continue
            if len(dq_b.input) > 2 and dq_b.input[2] and np.any(value(dq_b.input[2])):
                continue
            expected = np.float32(x_scale.reshape(-1)[0]) * w_scale.astype(np.float32).reshape(-1)
            b_scale = value(dq_b.input[1])
            if b_scale is None or not np.array_equal(
                    np.broadcast_to(b_scale.astype(np.float32).reshape(-1), expected.shape),
                    expected):
                continue
            bias = dq_b.input[0]
        import onnx

        inputs = [dq_x.input[0], dq_x.input[1], dq_x.input[2], dq_w.input[0], dq_w.input[1],
                  dq_w.input[2] if len(dq_w.input) > 2 else "", quantizer.input[1],
                  quantizer.input[2]] + ([bias] if bias else [])
        node = onnx.helper.make_node("QLinearConv", inputs, [quantizer.output[0]],
                                     name=conv.name or quantizer.name)
        node.attribute.extend(conv.attribute)
        folded[id(conv)] = node
        dropped.add(id(quantizer))
    if not folded:
        return graph
    result = type(graph)()
    result.CopyFrom(graph)
    del result.node[:]
    result.node.extend(folded.get(id(n), n) for n in graph.node if id(n) not in dropped)
    return result
