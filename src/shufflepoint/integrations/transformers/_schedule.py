"""Continuing the learning-rate schedule at the placed step, and the callback that does it."""

from __future__ import annotations

import warnings
import weakref
from typing import Any

import torch
from transformers import TrainerCallback

from shufflepoint._errors import ResumeWarning


def continue_schedule(scheduler: Any, optimizer: Any, step: int) -> None:
    """Put a ``LambdaLR`` (every schedule ``transformers.get_scheduler`` builds but plateau and
    greedy) at ``step``: its lambdas come from this run (total steps of the new run), its step
    count from the placement, so the learning rate follows the fraction of the data trained.

    Another scheduler keeps the step count it saved, with a ``ResumeWarning``.
    """
    inner = getattr(scheduler, "scheduler", scheduler)  # accelerate's AcceleratedScheduler wraps it
    if not isinstance(inner, torch.optim.lr_scheduler.LambdaLR):
        warnings.warn(f"{type(inner).__name__} continues at its saved step count {inner.last_epoch}, not at the "
                      f"placed global_step {step}: the learning rate of the resumed run follows the old "
                      "run's steps (only LambdaLR schedules are moved)", ResumeWarning, stacklevel=2)
        return
    rates = [base * fn(step) for base, fn in zip(inner.base_lrs, inner.lr_lambdas, strict=True)]
    inner.last_epoch = step
    for group, rate in zip(optimizer.param_groups, rates, strict=True):
        group["lr"] = rate
    inner._last_lr = list(rates)  # private: what get_last_lr() returns (no setter): the Trainer logs it


class ContinueSchedule(TrainerCallback):
    """on_train_begin comes after the Trainer loaded the checkpoint's scheduler: the Trainer then
    moves it to the placed step (``continue_schedule``) and numbers the run on from the saved global_step;
    on_step_end: the Trainer records the loader steps the optimizer step trained (``_numbering``).
    The Trainer puts it before every other callback, so they see the run's numbers."""

    def __init__(self, trainer: Any) -> None:
        self._trainer = weakref.ref(trainer)

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        trainer = self._trainer()
        if trainer is not None:
            trainer._on_train_begin(kwargs.get("lr_scheduler"), kwargs.get("optimizer"))  # private: our Trainer's

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        trainer = self._trainer()
        if trainer is not None:
            trainer._on_step_end()  # private: our Trainer's hook, kept off the user's Trainer API
