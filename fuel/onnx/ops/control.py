"""Control flow: If, Loop and Scan. Conditions and trip counts are read on the host and the
bodies unrolled into the lazy graph, so the model stays one static graph."""

from __future__ import annotations

import numpy as np

import fuel
from fuel.onnx.context import NodeContext, SequenceValue, onnx_op
from fuel.onnx.errors import OnnxError
from fuel.onnx.ops.common import Tensor, axis_of, narrow

MAX_ITERATIONS = 1_000_000


@onnx_op("If")
def if_(ctx: NodeContext) -> list:
    condition = ctx.static(0)
    if condition is None or np.asarray(condition).size != 1:
        raise OnnxError("If needs a one-element condition")
    branch = ctx.attr("then_branch") if bool(np.asarray(condition).reshape(-1)[0]) else \
        ctx.attr("else_branch")
    return ctx.run_subgraph(branch, [])


def _truth(ctx: NodeContext, value) -> bool:
    if not isinstance(value, Tensor):
        raise OnnxError("a loop condition must be a tensor")
    return bool(np.asarray(ctx.builder.host_value(value)).reshape(-1)[0])


def stack_values(values: list, axis: int = 0):
    """Per-iteration scan outputs stacked along ``axis`` (sequences stay sequences)."""
    if values and isinstance(values[0], SequenceValue):
        return values[-1]
    return fuel.stack(values, axis)


@onnx_op("Loop")
def loop(ctx: NodeContext) -> list:
    body = ctx.attr("body")
    limit = ctx.static_scalar(0)
    condition = bool(ctx.static_scalar(1, True)) if ctx.has(1) else True
    carried = [ctx.value(i) for i in range(2, ctx.num_inputs)]
    scans: list[list] = []
    iteration = 0
    while (limit is None or iteration < limit) and condition:
        if iteration >= MAX_ITERATIONS:
            raise OnnxError(f"Loop ran {MAX_ITERATIONS} iterations without stopping")
        counter = ctx.constant(np.array(iteration, dtype=np.int64))
        flag = ctx.constant(np.array(condition))
        outputs = ctx.run_subgraph(body, [counter, flag] + carried)
        condition = _truth(ctx, outputs[0])
        carried = outputs[1:1 + len(carried)]
        step = outputs[1 + len(carried):]
        if not scans:
            scans = [[] for _ in step]
        for collected, value in zip(scans, step):
            collected.append(value)
        iteration += 1
    scan_count = len(body.output) - 1 - len(carried)
    if iteration == 0 and scan_count:
        raise OnnxError("Loop ran no iteration, so its scan outputs have no known shape")
    return carried + [stack_values(values) for values in scans]


def _scan_body(ctx: NodeContext, body, states: list, scans: list, axes, directions) -> tuple:
    """Run ``body`` over the scan axis; (final states, per-step outputs lists)."""
    length = scans[0].shape[axes[0]] if scans else 0
    for tensor, axis in zip(scans, axes):
        if tensor.shape[axis] != length:
            raise OnnxError("scan inputs differ in sequence length")
    collected: list[list] = []
    for step in range(length):
        slices = []
        for tensor, axis, direction in zip(scans, axes, directions):
            position = length - 1 - step if direction else step
            slices.append(narrow(tensor, axis, position, position + 1).squeeze(axis))
        outputs = ctx.run_subgraph(body, states + slices)
        states = outputs[:len(states)]
        if not collected:
            collected = [[] for _ in outputs[len(states):]]
        for values, value in zip(collected, outputs[len(states):]):
            values.append(value)
    return states, collected


def _stack_scan(values: list, axis: int, direction: int) -> Tensor:
    if direction:
        values = list(reversed(values))
    return fuel.stack(values, axis)


@onnx_op("Scan")
def scan(ctx: NodeContext) -> list:
    body = ctx.attr("body")
    count = ctx.attr("num_scan_inputs")
    if ctx.opset < 9:
        return _scan_batched(ctx, body, count)
    inputs = [ctx.input(i) for i in range(ctx.num_inputs)]
    states, scans = inputs[:len(inputs) - count], inputs[len(inputs) - count:]
    axes = [axis_of(a, t.ndim) for a, t in zip(ctx.attr("scan_input_axes") or [0] * count,
                                                 scans)]
    directions = ctx.attr("scan_input_directions") or [0] * count
    states, collected = _scan_body(ctx, body, states, scans, axes, directions)
    out_count = len(body.output) - len(states)
    out_axes = ctx.attr("scan_output_axes") or [0] * out_count
    out_directions = ctx.attr("scan_output_directions") or [0] * out_count
    outputs = []
    for values, axis, direction in zip(collected, out_axes, out_directions):
        rank = values[0].ndim + 1
        outputs.append(_stack_scan(values, axis_of(axis, rank), direction))
    return states + outputs


def _scan_batched(ctx: NodeContext, body, count: int) -> list:
    """Scan-8: a leading batch axis, scan axis 1, an optional sequence_lens first input."""
    lengths = ctx.static(0)
    inputs = [ctx.input(i) for i in range(1, ctx.num_inputs)]
    states, scans = inputs[:len(inputs) - count], inputs[len(inputs) - count:]
    directions = ctx.attr("directions") or [0] * count
    batch = states[0].shape[0] if states else scans[0].shape[0]
    if lengths is not None and np.any(np.asarray(lengths) != scans[0].shape[1]):
        raise OnnxError("Scan-8 with sequence_lens shorter than the sequence is not supported")
    final_states, final_scans = [], []
    for b in range(batch):
        own_states = [narrow(s, 0, b, b + 1).squeeze(0) for s in states]
        own_scans = [narrow(s, 0, b, b + 1).squeeze(0) for s in scans]
        result_states, collected = _scan_body(ctx, body, own_states, own_scans, [0] * count,
                                              directions)
        final_states.append(result_states)
        final_scans.append([fuel.stack(values, 0) for values in collected])
    stacked_states = [fuel.stack([s[i] for s in final_states], 0) for i in range(len(states))]
    stacked_scans = [fuel.stack([s[i] for s in final_scans], 0)
                     for i in range(len(final_scans[0]))] if final_scans else []
    return stacked_states + stacked_scans

