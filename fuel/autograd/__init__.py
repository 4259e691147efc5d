"""fuel.autograd: reverse-mode automatic differentiation over the lazy graph (torch's names).

The backward pass is more lazy graph: each op's gradient rule (``fuel/frontend/gradients.py``)
builds front-end ops, which are fused, planned and freed like the forward's.
"""

from fuel.frontend.backward import backward, grad
from fuel.frontend.gradients import NOT_DIFFERENTIABLE, RULES, gradient
from fuel.frontend.tape import enable_grad, is_grad_enabled, no_grad, set_grad_enabled

__all__ = ["NOT_DIFFERENTIABLE", "RULES", "backward", "enable_grad", "grad", "gradient",
           "is_grad_enabled", "no_grad", "set_grad_enabled"]
