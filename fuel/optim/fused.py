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
            addresses = [_address(storage)] + [_address(m) for m in storages[:-1]]
            addresses += [None] * (4 - len(addresses))
            known = cache[id(param)] = (storage, storages, addresses,
                                        storages[-1].buffer.reshape(-1))
        taken.append((known, _address(grad_storage)))
    if not taken:
        return left
    beta1, beta2 = group["betas"]
    lr, decay, eps = float(group["lr"]), float(group["weight_decay"]), float(group["eps"])
    scalars = np.empty(_SCALARS * len(taken), np.float64)
    pointers: list = [_address_of(scalars)]
    sizes = [len(taken), _DTYPES[kind], int(bool(group["maximize"])) | 2 * int(
        bool(group["amsgrad"])), _threads()]
    for index, ((storage, _, addresses, counter), grad_address) in enumerate(taken):
        counter[0] += 1  # torch's step_t += 1 (a float tensor: exact integers)
        step = float(counter[0])
        scalars[_SCALARS * index:_SCALARS * (index + 1)] = (
            1.0 - lr * decay if optimizer.decoupled and decay else 1.0,
            decay if decay and not optimizer.decoupled else 0.0,
            1.0 - beta1, beta2, 1.0 - beta2, math.sqrt(1.0 - beta2 ** step), eps,
            -(lr / (1.0 - beta1 ** step)))
        pointers += [addresses[0], grad_address, *addresses[1:]]
        sizes.append(storage.size)
    data = (ctypes.c_void_p * len(pointers))(*pointers)
    size_array = (ctypes.c_int64 * len(sizes))(*sizes)
    function(data, size_array, None)
    return left


def _address(storage) -> int:
    address = storage.address  # read once per storage (it keeps its buffer for life)
    if not address:
        address = storage.address = storage.buffer.__array_interface__["data"][0]
    return address


def _address_of(array: np.ndarray) -> int:
    return array.__array_interface__["data"][0]


@functools.cache
def _threads() -> int:
    """The CPUs this process may run on (read once)."""
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
               else os.cpu_count() or 1)
