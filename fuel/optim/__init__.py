"""fuel.optim: SGD, Adam, AdamW and learning-rate schedulers (torch's names and formulas)."""

from fuel.optim import lr_scheduler
from fuel.optim.optimizer import SGD, Adam, AdamW, Optimizer

__all__ = ["SGD", "Adam", "AdamW", "Optimizer", "lr_scheduler"]
