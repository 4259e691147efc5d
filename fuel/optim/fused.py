"""The fused Adam/AdamW step on the CPU: one C call (``fused.c``) updates every parameter of a
group in place, reading each parameter, gradient and moment once, as torch's single-tensor
formulas do. A step takes it when its tensors are realized, contiguous float32/float64 CPU
storages and no fuel.jit trace is recording (a trace keeps the update as graph, captured as
the step's effects); the rest of the group goes through the lazy graph.
"""

from __future__ import annotations

import ctypes
import functools
import math
import os
import weakref
from pathlib import Path

import numpy as np

from fuel.frontend import factories
from fuel.ir import dtype as dt
from fuel.ir.device import CPU

SOURCE = Path(__file__).with_name("fused.c")
_DTYPES = {dt.float32: 0, dt.float64: 1}
_SCALARS = 8  # fused.c's scalars per tensor


def _function():
    from fuel.backends.cpu.c_library import entry_point

    return entry_point("fused_adam", SOURCE.read_text, openmp=True)


def _storage(tensor):
    """``tensor``'s realized, contiguous CPU storage (offset 0, all of it), else None."""
    node = tensor._node
    storage = node.buffer
    if storage is None or node.device is not CPU or not isinstance(storage.buffer, np.ndarray):
        return None
    layout = node.layout
    if layout is not None and (layout.offset != 0 or not layout.is_contiguous()):
        return None
    if storage.size != math.prod(node.shape):
        return None
    return storage


def _deferring() -> bool:
    from fuel.frontend.backward import _Defer

    return _Defer.depth > 0


def adam(optimizer, group: dict, params: list) -> list:
    """Update the ``params`` (all with a ``.grad``) of ``group`` in place with one call;
    return the ones it could not take (for the graph path)."""
    if group.get("fused") is False or _deferring():
        return params
    kind = params[0].dtype
    if kind not in _DTYPES or any(p.dtype is not kind for p in params):
        return params
    function = _function()
    if function is None:  # no C compiler on this machine
        return params
    names = ("exp_avg", "exp_avg_sq") + (("max_exp_avg_sq",) if group["amsgrad"] else ())
    calls = optimizer.__dict__.setdefault("_fused_calls", {})
    call = calls.get(id(group))
    if call is not None and call.fits(optimizer, params, names):
        call.run(optimizer, group)
        return []
    cache = optimizer.__dict__.setdefault("_fused_addresses", {})
    taken, left = [], []
    for param in params:
        grad = param.grad
        storage = _storage(param)
        if storage is not None and grad._node.buffer is None:
            grad.realize()
        grad_storage = _storage(grad) if storage is not None else None
        if grad_storage is None:
            left.append(param)
            continue
        state = optimizer.state.get(param)
        if state is None:  # zeros of its own (updated in place), the step a 0-d float
            state = optimizer.state[param] = {name: factories.tensor(
                np.zeros(param.shape, kind.numpy)) for name in names}
            state["step"] = factories.tensor(np.zeros((), kind.numpy))
        tensors = [state[name] for name in names] + [state["step"]]
        known = cache.get(id(param))
        # The addresses of a parameter's storage and state, kept while they are the same
        # storages (the update is in place; load_state_dict or a moved parameter changes them).
        if known is None or known[0] is not storage or any(
                t._node.buffer is not b for t, b in zip(tensors, known[1])):
            storages = [_storage(t) for t in tensors]
            if any(m is None for m in storages):
                left.append(param)
                continue
            addresses = [storage.host_address()] + [m.host_address() for m in storages[:-1]]
            addresses += [None] * (4 - len(addresses))
            known = cache[id(param)] = (storage, storages, addresses,
                                        storages[-1].buffer.reshape(-1))
        taken.append((known, grad_storage.host_address()))
    if not taken:
        return left
    call = _Call(function, kind, taken)
    if not left:
        call.note(optimizer, params, names)
        calls[id(group)] = call
    call.run(optimizer, group)
    return left


class _Call:
    """One group's prepared call of the fused kernel: its pointer and size arrays, kept for
    the next steps while the parameters, their gradients and their state are the same
    storages (an eager step's gradients are, when its backward plan writes them again:
    ``BoundPlan.reuse_outputs``); only the step-dependent scalars are written per step."""

    __slots__ = ("function", "scalars", "data", "sizes", "counters", "checks", "params")

    def __init__(self, function, kind, taken: list) -> None:
        self.function = function
        self.scalars = np.empty(_SCALARS * len(taken), np.float64)
        pointers: list = [_address_of(self.scalars)]
        sizes = [len(taken), _DTYPES[kind], 0, _threads()]
        for (storage, _, addresses, _), grad_address in taken:
            pointers += [addresses[0], grad_address, *addresses[1:]]
            sizes.append(storage.size)
        self.data = (ctypes.c_void_p * len(pointers))(*pointers)
        self.sizes = (ctypes.c_int64 * len(sizes))(*sizes)
        self.counters = [counter for (_, _, _, counter), _ in taken]
        self.checks: list = []
        self.params: list = []

    def note(self, optimizer, params: list, names: tuple) -> None:
        """Remember what ``fits`` checks: every parameter's node and the storages of its
        gradient and state (the kernel's pointers)."""
        self.params = list(params)
        self.checks = []
        for param in params:
            state = optimizer.state[param]
            grad = param.grad._node
            # The gradient's storage weakly: a reference here would keep the backward plan
            # from writing it again (it writes an output again only when nothing holds it).
            self.checks.append((param._node, state, weakref.ref(grad.buffer), grad.layout,
                                [state[name]._node for name in names], state["step"]._node))

    def fits(self, optimizer, params: list, names: tuple) -> bool:
        """Whether this call's pointers are still those of ``params``' storages."""
        if len(params) != len(self.params) or len(names) != len(self.checks[0][4]):
            return False
        state_of = optimizer.state
        for param, known, (node, state, grad_storage, grad_layout, moments, step) in zip(
                params, self.params, self.checks):
            grad = param.grad._node
            if param is not known or param._node is not node or grad.buffer is not grad_storage() \
                    or grad.layout is not grad_layout or state_of.get(param) is not state or \
                    state["step"]._node is not step:
                return False
            for name, moment in zip(names, moments):
                if state[name]._node is not moment:
                    return False
        return True

    def run(self, optimizer, group: dict) -> None:
        """Step every counter and run the kernel with this step's scalars."""
        beta1, beta2 = group["betas"]
        lr, decay, eps = float(group["lr"]), float(group["weight_decay"]), float(group["eps"])
        self.sizes[2] = int(bool(group["maximize"])) | 2 * int(bool(group["amsgrad"]))
        scalars = self.scalars
        last = None
        for index, counter in enumerate(self.counters):
            counter[0] += 1  # torch's step_t += 1 (a float tensor: exact integers)
            step = float(counter[0])
            if step != last:  # the parameters of a group mostly share their step
                last = step
                row = (1.0 - lr * decay if optimizer.decoupled and decay else 1.0,
                       decay if decay and not optimizer.decoupled else 0.0,
                       1.0 - beta1, beta2, 1.0 - beta2, math.sqrt(1.0 - beta2 ** step), eps,
                       -(lr / (1.0 - beta1 ** step)))
            scalars[_SCALARS * index:_SCALARS * (index + 1)] = row
        self.function(self.data, self.sizes, None)


def _address_of(array: np.ndarray) -> int:
    return array.__array_interface__["data"][0]


@functools.cache
def _threads() -> int:
    """The CPUs this process may run on (read once)."""
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
               else os.cpu_count() or 1)
