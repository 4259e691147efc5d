"""RNN, GRU and LSTM, unrolled over the sequence into matmuls and elementwise gates."""

from __future__ import annotations

import numpy as np

import fuel
from fuel.frontend.structured import matmul
from fuel.onnx.context import NodeContext, onnx_op
from fuel.onnx.errors import OnnxError, UnsupportedOp
from fuel.onnx.ops.activations import softplus
from fuel.onnx.ops.common import OpKind, Tensor, unary, where


def _activation(name: str, alpha, beta):
    """The named ONNX RNN activation as a function of a tensor."""
    key = name.lower()
    if key == "sigmoid":
        return lambda x: unary(OpKind.SIGMOID, x)
    if key == "tanh":
        return lambda x: unary(OpKind.TANH, x)
    if key == "relu":
        return lambda x: unary(OpKind.RELU, x)
    if key == "affine":
        return lambda x: x * (1.0 if alpha is None else alpha) + (0.0 if beta is None else beta)
    if key == "leakyrelu":
        slope = 0.01 if alpha is None else alpha
        return lambda x: where(x >= 0, x, x * slope, dtype=x.dtype)
    if key == "thresholdedrelu":
        threshold = 1.0 if alpha is None else alpha
        return lambda x: where(x > threshold, x, 0.0, dtype=x.dtype)
    if key == "scaledtanh":
        a, b = (1.0 if alpha is None else alpha), (1.0 if beta is None else beta)
        return lambda x: unary(OpKind.TANH, x * b) * a
    if key == "hardsigmoid":
        a, b = (0.2 if alpha is None else alpha), (0.5 if beta is None else beta)
        return lambda x: (x * a + b).clamp(0.0, 1.0)
    if key == "elu":
        a = 1.0 if alpha is None else alpha
        return lambda x: where(x > 0, x, (unary(OpKind.EXP, x) - 1) * a, dtype=x.dtype)
    if key == "softsign":
        return lambda x: x / (unary(OpKind.ABS, x) + 1.0)
    if key == "softplus":
        return softplus
    raise UnsupportedOp(f"RNN activation {name!r} is not supported")


def _activations(ctx: NodeContext, defaults: list[str], directions: int) -> list[list]:
    names = ctx.attr("activations") or defaults * directions
    if len(names) == len(defaults):
        names = names * directions
    alphas = list(ctx.attr("activation_alpha") or [])
    betas = list(ctx.attr("activation_beta") or [])
    functions = []
    for index, name in enumerate(names):
        alpha = alphas[index] if index < len(alphas) else None
        beta = betas[index] if index < len(betas) else None
        functions.append(_activation(name, alpha, beta))
    per = len(defaults)
    return [functions[d * per:(d + 1) * per] for d in range(directions)]


class _Setup:
    """Inputs of a recurrent op in (seq, batch, ...) layout, split per direction."""

    def __init__(self, ctx: NodeContext, gates: int, defaults: list[str]) -> None:
        x = ctx.input(0)
        self.layout = ctx.attr("layout", 0)
        if self.layout:
            x = x.permute(1, 0, 2)
        self.x = x
        self.w, self.r = ctx.input(1), ctx.input(2)
        self.directions = self.w.shape[0]
        self.hidden = ctx.attr("hidden_size") or self.r.shape[-1]
        self.direction = ctx.attr("direction", "forward")
        expected = 2 if self.direction == "bidirectional" else 1
        if self.directions != expected:
            raise OnnxError(f"direction {self.direction!r} needs {expected} weight sets")
        self.bias = ctx.optional(3)
        lengths = ctx.static(4)
        steps, batch = x.shape[0], x.shape[1]
        self.mask = None
        if lengths is not None and np.any(np.asarray(lengths) != steps):
            if self.direction != "forward":
                raise UnsupportedOp("sequence_lens shorter than the sequence needs "
                                    "direction 'forward'")
            self.mask = np.asarray(lengths).reshape(1, batch)
        initial = ctx.optional(5)
        if initial is not None and self.layout:
            initial = initial.permute(1, 0, 2)
        self.initial = initial
        self.clip = ctx.attr("clip")
        self.gates = gates
        self.activations = _activations(ctx, defaults, self.directions)
        self.zeros = fuel.zeros(batch, self.hidden, dtype=x.dtype, device=x.device)

    def direction_inputs(self, d: int):
        w = self.w[d]
        r = self.r[d]
        size = self.gates * self.hidden
        if self.bias is not None:
            wb = self.bias[d].narrow(0, 0, size)
            rb = self.bias[d].narrow(0, size, size)
        else:
            wb = rb = None
        h0 = self.initial[d] if self.initial is not None else self.zeros
        return w, r, wb, rb, h0

    def order(self, d: int) -> list[int]:
        steps = list(range(self.x.shape[0]))
        reverse = self.direction == "reverse" or (self.direction == "bidirectional" and d == 1)
        return list(reversed(steps)) if reverse else steps

    def clipped(self, t: Tensor) -> Tensor:
        return t.clamp(-self.clip, self.clip) if self.clip is not None else t

    def step_mask(self, step: int):
        if self.mask is None:
            return None
        return fuel.tensor((step < self.mask).reshape(-1, 1), device=self.x.device)

    def finish(self, ys: list[list[Tensor]], finals: list[list[Tensor]], ctx: NodeContext):
        """Y (seq, directions, batch, hidden) and the final states, in the op's layout."""
        y = fuel.stack([fuel.stack(per_dir, 0) for per_dir in ys], 1)
        states = [fuel.stack([f[k] for f in finals], 0) for k in range(len(finals[0]))]
        if self.layout:
            y = y.permute(2, 0, 1, 3)
            states = [s.permute(1, 0, 2) for s in states]
        return [y] + states


def _input_projection(x: Tensor, w: Tensor, bias: Tensor | None) -> Tensor:
    """x @ W^T (+ bias) for every step at once: (seq, batch, gates * hidden)."""
    projected = matmul(x, w.t())
    return projected + bias if bias is not None else projected


def _keep(mask, new: Tensor, old: Tensor) -> Tensor:
    return new if mask is None else where(mask, new, old, dtype=new.dtype)


@onnx_op("RNN")
def rnn(ctx: NodeContext) -> list:
    setup = _Setup(ctx, 1, ["Tanh"])
    ys, finals = [], []
    for d in range(setup.directions):
        w, r, wb, rb, h = setup.direction_inputs(d)
        f = setup.activations[d][0]
        projected = _input_projection(setup.x, w, wb)
        outputs = [None] * setup.x.shape[0]
        for step in setup.order(d):
            gates = projected[step] + matmul(h, r.t())
            if rb is not None:
                gates = gates + rb
            mask = setup.step_mask(step)
            new = f(setup.clipped(gates))
            outputs[step] = _keep(mask, new, setup.zeros)
            h = _keep(mask, new, h)
        ys.append(outputs)
        finals.append([h])
    return setup.finish(ys, finals, ctx)


@onnx_op("GRU")
def gru(ctx: NodeContext) -> list:
    setup = _Setup(ctx, 3, ["Sigmoid", "Tanh"])
    hidden = setup.hidden
    linear_before_reset = ctx.attr("linear_before_reset", 0)
    ys, finals = [], []
    for d in range(setup.directions):
        w, r, wb, rb, h = setup.direction_inputs(d)
        f, g = setup.activations[d]
        projected = _input_projection(setup.x, w, wb)
        r_zr, r_h = r.narrow(0, 0, 2 * hidden), r.narrow(0, 2 * hidden, hidden)
        rb_zr = rb.narrow(0, 0, 2 * hidden) if rb is not None else None
        rb_h = rb.narrow(0, 2 * hidden, hidden) if rb is not None else None
        outputs = [None] * setup.x.shape[0]
        for step in setup.order(d):
            xp = projected[step]
            zr = xp.narrow(1, 0, 2 * hidden) + matmul(h, r_zr.t())
            if rb_zr is not None:
                zr = zr + rb_zr
            zr = f(setup.clipped(zr))
            z, reset = zr.narrow(1, 0, hidden), zr.narrow(1, hidden, hidden)
            if linear_before_reset:
                recurrent = matmul(h, r_h.t())
                if rb_h is not None:
                    recurrent = recurrent + rb_h
                candidate = xp.narrow(1, 2 * hidden, hidden) + reset * recurrent
            else:
                candidate = xp.narrow(1, 2 * hidden, hidden) + matmul(reset * h, r_h.t())
                if rb_h is not None:
                    candidate = candidate + rb_h
            candidate = g(setup.clipped(candidate))
            new = (1 - z) * candidate + z * h
            mask = setup.step_mask(step)
            outputs[step] = _keep(mask, new, setup.zeros)
            h = _keep(mask, new, h)
        ys.append(outputs)
        finals.append([h])
    return setup.finish(ys, finals, ctx)


@onnx_op("LSTM")
def lstm(ctx: NodeContext) -> list:
    setup = _Setup(ctx, 4, ["Sigmoid", "Tanh", "Tanh"])
    hidden = setup.hidden
    initial_c = ctx.optional(6)
    if initial_c is not None and setup.layout:
        initial_c = initial_c.permute(1, 0, 2)
    peepholes = ctx.optional(7)
    input_forget = ctx.attr("input_forget", 0)
    ys, finals = [], []
    for d in range(setup.directions):
        w, r, wb, rb, h = setup.direction_inputs(d)
        f, g, act_h = setup.activations[d]
        c = initial_c[d] if initial_c is not None else setup.zeros
        projected = _input_projection(setup.x, w, wb)
        if peepholes is not None:
            p_i, p_o, p_f = (peepholes[d].narrow(0, k * hidden, hidden) for k in range(3))
        outputs = [None] * setup.x.shape[0]
        for step in setup.order(d):
            gates = projected[step] + matmul(h, r.t())
            if rb is not None:
                gates = gates + rb
            gates = setup.clipped(gates)
            i, o, fg, cand = (gates.narrow(1, k * hidden, hidden) for k in range(4))
            if peepholes is not None:
                i, fg = i + p_i * c, fg + p_f * c
            i = f(i)
            fg = 1 - i if input_forget else f(fg)
            new_c = fg * c + i * g(cand)
            if peepholes is not None:
                o = o + p_o * new_c
            new_h = f(o) * act_h(new_c)
            mask = setup.step_mask(step)
            outputs[step] = _keep(mask, new_h, setup.zeros)
            h, c = _keep(mask, new_h, h), _keep(mask, new_c, c)
        ys.append(outputs)
        finals.append([h, c])
    return setup.finish(ys, finals, ctx)
