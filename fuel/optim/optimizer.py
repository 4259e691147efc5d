"""Optimizer and the update rules of SGD, Adam and AdamW (torch's formulas and defaults).

A step builds every parameter's update as lazy graph under ``no_grad`` and realizes all of
them, with the optimizer state, in one plan (``fuel.frontend.backward.assign``): each
parameter's update is one fused kernel per value it writes (SGD without momentum: one; Adam:
the parameter and its two moments). The step count and the learning rate are tensors, so a
step traced by ``fuel.jit`` replays with the current values (a scheduler's new learning rate
is written into the same storage). Adam and AdamW on the CPU take a shorter way in an eager
step: one C kernel updates every parameter of a group in place (``fuel.optim.fused``), so a
step allocates no new parameters or moments.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from fuel.frontend import factories
from fuel.frontend.backward import assign
from fuel.frontend.elementwise import where
from fuel.frontend.tape import no_grad
from fuel.ir.errors import InvalidArgument
from fuel.tensor import Tensor


class Optimizer:
    """Parameter groups (dicts: ``params`` plus hyperparameters) and per-parameter state."""

    def __init__(self, params, defaults: dict) -> None:
        self.defaults = dict(defaults)
        self.param_groups: list[dict] = []
        self.state: dict = {}
        groups = list(params)
        if not groups:
            raise InvalidArgument("optimizer got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for group in groups:
            self.add_param_group(group)

    def add_param_group(self, group: dict) -> None:
        params = group["params"]
        params = [params] if isinstance(params, Tensor) else list(params)
        for param in params:
            if not isinstance(param, Tensor):
                raise InvalidArgument(f"optimizers take Tensors, got {type(param).__name__}")
            if not param.is_leaf:
                raise InvalidArgument("an optimizer can only update leaf tensors")
        full = {**self.defaults, **group, "params": params}
        self.param_groups.append(full)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Drop every parameter's ``.grad`` (or set it to zeros)."""
        for group in self.param_groups:
            for param in group["params"]:
                if param.grad is None:
                    continue
                param.grad = None if set_to_none else factories.zeros(
                    *param.shape, dtype=param.dtype, device=param.device)

    def _scalar(self, group: dict, name: str, like: Tensor) -> Tensor:
        """``group[name]`` as a realized 0-d tensor, refilled in place when the value
        changes (``refresh``), so a traced step reads the current value."""
        cache = group.setdefault("_tensors", {})
        key = (name, like.dtype, like.device)
        found = cache.get(key)
        if found is None:
            value = float(group[name])
            found = cache[key] = [factories.tensor(value, dtype=like.dtype,
                                                   device=like.device).realize(), value]
        else:
            self.refresh()
        return found[0]

    def refresh(self) -> None:
        """Write every group's current hyperparameters into their tensors (a scheduler calls
        it: a step replayed by fuel.jit runs no Python, so reads them from there)."""
        for group in self.param_groups:
            for (name, dtype, _), found in group.get("_tensors", {}).items():
                value = float(group[name])
                if found[1] != value:
                    storage = found[0]._node.buffer
                    storage.backend.write_from_host(storage, np.array(value, dtype.numpy))
                    found[1] = value

    def _state(self, param: Tensor, names: Iterable[str]) -> dict:
        state = self.state.get(param)
        if state is None:
            state = self.state[param] = {name: factories.zeros(
                *param.shape, dtype=param.dtype, device=param.device).realize()
                for name in names}
            state["step"] = factories.tensor(0.0, dtype=param.dtype, device=param.device)
        return state

    def step(self, closure=None):
        """One update of every parameter that has a gradient; returns ``closure()``'s loss."""
        loss = None
        if closure is not None:
            from fuel.frontend.tape import enable_grad

            with enable_grad():
                loss = closure()
        updates: list = []
        with no_grad():
            for group in self.param_groups:
                params = [p for p in group["params"] if p.grad is not None]
                if params:
                    params = self._fused(group, params)
                for param in params:
                    updates.extend(self._update(group, param, param.grad))
        if updates:
            assign(updates)
        return loss

    def _fused(self, group: dict, params: list) -> list:
        """Update what one fused in-place kernel can; return the params left to the graph."""
        return params

    def _update(self, group: dict, param: Tensor, grad: Tensor) -> list:
        raise NotImplementedError

    def state_dict(self) -> dict:
        """The hyperparameters per group and the state per parameter index (as arrays)."""
        index = {}
        groups = []
        for group in self.param_groups:
            ids = []
            for param in group["params"]:
                index[id(param)] = len(index)
                ids.append(index[id(param)])
            groups.append({k: v for k, v in group.items() if k not in ("params", "_tensors")}
                          | {"params": ids})
        state = {index[id(p)]: {k: v.numpy() for k, v in s.items()}
                 for p, s in self.state.items() if id(p) in index}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict) -> None:
        params = [p for group in self.param_groups for p in group["params"]]
        for group, saved in zip(self.param_groups, state_dict["param_groups"]):
            group.update({k: v for k, v in saved.items() if k != "params"})
        for position, values in state_dict["state"].items():
            param = params[int(position)]
            self.state[param] = {k: factories.tensor(np.asarray(v), device=param.device)
                                 for k, v in values.items()}


class SGD(Optimizer):
    """Stochastic gradient descent with momentum, dampening, Nesterov and weight decay."""

    def __init__(self, params, lr: float = 1e-3, momentum: float = 0.0, dampening: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False,
                 maximize: bool = False) -> None:
        if lr < 0 or momentum < 0 or weight_decay < 0:
            raise InvalidArgument("lr, momentum and weight_decay must be non-negative")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise InvalidArgument("Nesterov momentum requires a momentum and zero dampening")
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening,
                                      weight_decay=weight_decay, nesterov=nesterov,
                                      maximize=maximize))

    def _update(self, group, param, grad):
        lr = self._scalar(group, "lr", param)
        if group["maximize"]:
            grad = -grad
        if group["weight_decay"]:
            grad = grad + param * group["weight_decay"]
        updates = []
        momentum = group["momentum"]
        if momentum:
            state = self._state(param, ("momentum_buffer",))
            buffer, step = state["momentum_buffer"], state["step"]
            dampening = group["dampening"]
            new = buffer * momentum + grad * (1.0 - dampening) if dampening else \
                buffer * momentum + grad
            if dampening:  # torch's first step takes the gradient itself
                new = where(step == 0.0, grad, new)
                updates.append((step, step + 1.0))
            updates.append((buffer, new))
            grad = grad + new * momentum if group["nesterov"] else new
        updates.append((param, param - lr * grad))
        return updates


class Adam(Optimizer):
    """Adam (``decoupled`` False) and AdamW's update, torch's single-tensor formulas. On the
    CPU an eager step updates a group's parameters in place with one fused C kernel
    (``fuel.optim.fused``; ``fused=False`` keeps every update as lazy graph)."""

    decoupled = False

    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0, amsgrad: bool = False,
                 maximize: bool = False, fused: bool | None = None) -> None:
        if not 0.0 <= betas[0] < 1.0 or not 0.0 <= betas[1] < 1.0:
            raise InvalidArgument(f"betas must be in [0, 1), got {betas}")
        if lr < 0 or eps < 0 or weight_decay < 0:
            raise InvalidArgument("lr, eps and weight_decay must be non-negative")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay, amsgrad=amsgrad,
                                      maximize=maximize, fused=fused))

    def _fused(self, group, params):
        from fuel.optim.fused import adam

        return adam(self, group, params)

    def _update(self, group, param, grad):
        lr = self._scalar(group, "lr", param)
        beta1, beta2 = group["betas"]
        names = ("exp_avg", "exp_avg_sq") + (("max_exp_avg_sq",) if group["amsgrad"] else ())
        state = self._state(param, names)
        if group["maximize"]:
            grad = -grad
        decay = group["weight_decay"]
        if decay and not self.decoupled:
            grad = grad + param * decay
        base = param * (1.0 - lr * decay) if decay and self.decoupled else param
        step = state["step"] + 1.0
        exp_avg = state["exp_avg"] + (grad - state["exp_avg"]) * (1.0 - beta1)
        exp_avg_sq = state["exp_avg_sq"] * beta2 + grad * grad * (1.0 - beta2)
        updates = [(state["step"], step), (state["exp_avg"], exp_avg),
                   (state["exp_avg_sq"], exp_avg_sq)]
        second = exp_avg_sq
        if group["amsgrad"]:
            second = state["max_exp_avg_sq"].maximum(exp_avg_sq)
            updates.append((state["max_exp_avg_sq"], second))
        correction1 = 1.0 - beta1 ** step
        correction2 = (1.0 - beta2 ** step).sqrt()
        denominator = second.sqrt() / correction2 + group["eps"]
        updates.append((param, base - (lr / correction1) * (exp_avg / denominator)))
        return updates


class AdamW(Adam):
    """Adam with decoupled weight decay (default 0.01, as torch)."""

    decoupled = True

    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 1e-2, amsgrad: bool = False,
                 maximize: bool = False, fused: bool | None = None) -> None:
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, maximize, fused)
