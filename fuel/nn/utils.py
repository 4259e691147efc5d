"""torch.nn.utils' gradient clipping."""

from __future__ import annotations

from collections.abc import Iterable

from fuel.frontend.tape import no_grad
from fuel.ir.errors import InvalidArgument
from fuel.tensor import Tensor


def clip_grad_norm_(parameters: Iterable[Tensor] | Tensor, max_norm: float,
                    norm_type: float = 2.0) -> Tensor:
    """Scale every ``.grad`` so that their joint norm is at most ``max_norm``; returns the
    norm before clipping. Lazy: it runs with the optimizer step that reads the gradients."""
    params = [parameters] if isinstance(parameters, Tensor) else list(parameters)
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        from fuel.frontend.factories import tensor

        return tensor(0.0)
    with no_grad():
        if norm_type == float("inf"):
            norms = [g.abs().amax() for g in grads]
            total = norms[0]
            for norm in norms[1:]:
                total = total.maximum(norm)
        elif norm_type > 0:
            total = None
            for g in grads:
                part = (g.abs() ** float(norm_type)).sum() if norm_type != 2 else (g * g).sum()
                total = part if total is None else total + part
            total = total ** (1.0 / norm_type)
        else:
            raise InvalidArgument(f"norm_type must be positive or inf, got {norm_type}")
        scale = (float(max_norm) / (total + 1e-6)).clamp(max=1.0)
        for param in params:
            if param.grad is not None:
                param.grad = param.grad * scale.to(param.grad.dtype)
    return total
