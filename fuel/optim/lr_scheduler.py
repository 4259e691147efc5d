"""Learning-rate schedules (torch.optim.lr_scheduler's closed forms): ``step()`` once per
epoch or iteration sets each group's ``lr``."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from fuel.ir.errors import InvalidArgument
from fuel.optim.optimizer import Optimizer


class LRScheduler:
    """Sets ``group['lr'] = factor(step) * base_lr`` for every parameter group."""

    def __init__(self, optimizer: Optimizer, last_epoch: int = -1) -> None:
        self.optimizer = optimizer
        for group in optimizer.param_groups:
            group.setdefault("initial_lr", group["lr"])
        self.base_lrs = [group["initial_lr"] for group in optimizer.param_groups]
        self.last_epoch = last_epoch
        self.step()

    def lr_at(self, base_lr: float, epoch: int) -> float:
        raise NotImplementedError

    def get_last_lr(self) -> list[float]:
        return [group["lr"] for group in self.optimizer.param_groups]

    def step(self) -> None:
        self.last_epoch += 1
        for group, base in zip(self.optimizer.param_groups, self.base_lrs):
            group["lr"] = self.lr_at(base, self.last_epoch)
        self.optimizer.refresh()

    def state_dict(self) -> dict:
        return {"last_epoch": self.last_epoch, "base_lrs": list(self.base_lrs)}

    def load_state_dict(self, state: dict) -> None:
        self.last_epoch, self.base_lrs = state["last_epoch"], list(state["base_lrs"])


class StepLR(LRScheduler):
    """Multiply by ``gamma`` every ``step_size`` steps."""

    def __init__(self, optimizer: Optimizer, step_size: int, gamma: float = 0.1,
                 last_epoch: int = -1) -> None:
        if step_size <= 0:
            raise InvalidArgument(f"step_size must be positive, got {step_size}")
        self.step_size, self.gamma = step_size, gamma
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base_lr, epoch):
        return base_lr * self.gamma ** (epoch // self.step_size)


class CosineAnnealingLR(LRScheduler):
    """Half a cosine from the base rate down to ``eta_min`` over ``T_max`` steps."""

    def __init__(self, optimizer: Optimizer, T_max: int, eta_min: float = 0.0,  # noqa: N803
                 last_epoch: int = -1) -> None:
        if T_max <= 0:
            raise InvalidArgument(f"T_max must be positive, got {T_max}")
        self.T_max, self.eta_min = T_max, eta_min
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base_lr, epoch):
        return self.eta_min + (base_lr - self.eta_min) * (
            1 + math.cos(math.pi * epoch / self.T_max)) / 2


class LinearLR(LRScheduler):
    """Linear warmup (or decay): the factor goes from ``start_factor`` to ``end_factor``
    over ``total_iters`` steps, then stays."""

    def __init__(self, optimizer: Optimizer, start_factor: float = 1.0 / 3,
                 end_factor: float = 1.0, total_iters: int = 5, last_epoch: int = -1) -> None:
        if not 0 < start_factor <= 1 or not 0 <= end_factor <= 1:
            raise InvalidArgument("start_factor must be in (0, 1] and end_factor in [0, 1]")
        self.start_factor, self.end_factor, self.total_iters = (start_factor, end_factor,
                                                                total_iters)
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base_lr, epoch):
        progress = min(epoch, self.total_iters) / self.total_iters if self.total_iters else 1.0
        return base_lr * (self.start_factor + (self.end_factor - self.start_factor) * progress)


class LambdaLR(LRScheduler):
    """``lr_lambda(step) * base_lr``."""

    def __init__(self, optimizer: Optimizer, lr_lambda: Callable[[int], float],
                 last_epoch: int = -1) -> None:
        self.lr_lambda = lr_lambda
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base_lr, epoch):
        return base_lr * self.lr_lambda(epoch)


class SequentialLR(LRScheduler):
    """``schedulers[i]`` until ``milestones[i]``, each restarted at its milestone (warmup
    then cosine)."""

    def __init__(self, optimizer: Optimizer, schedulers: Sequence[LRScheduler],
                 milestones: Sequence[int], last_epoch: int = -1) -> None:
        if len(milestones) != len(schedulers) - 1:
            raise InvalidArgument("SequentialLR needs one milestone fewer than schedulers")
        self.schedulers, self.milestones = list(schedulers), list(milestones)
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base_lr, epoch):
        start = 0
        chosen = self.schedulers[0]
        for scheduler, milestone in zip(self.schedulers[1:], self.milestones):
            if epoch >= milestone:
                chosen, start = scheduler, milestone
        return chosen.lr_at(base_lr, epoch - start)
