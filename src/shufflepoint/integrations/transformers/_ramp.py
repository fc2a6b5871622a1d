"""A batch size changed inside a Trainer run (``train_dataloader.set_batch_size(b)`` from a callback: a
ramp-up), or samples excluded (``ExcludeSamples``): the Trainer counted its steps from the first batch
size and the whole epochs, so the run's step budget and the learning-rate schedule's horizon are moved to
what the data now takes.

With ``num_train_epochs`` (no ``max_steps``) the run still ends where those epochs of data end:
``TrainerState.max_steps`` becomes the steps done plus the optimizer steps left at the new size, and
a ``LambdaLR`` built by ``transformers.get_scheduler`` with ``num_training_steps`` (linear, cosine,
polynomial, ...) is stretched or shrunk to that total. With ``max_steps`` set, the run keeps its
number of steps (and its schedule): they then cover more or less data.
"""

from __future__ import annotations

import functools
import math
import warnings
from typing import Any

import torch


def steps_to_the_end(global_step: int, epoch: int, batches_left: int, batches_per_epoch: int,
                     epochs: float, accumulation: int) -> int:
    """The run's total optimizer steps: those done, the rest of ``epoch`` and the epochs after it up to
    ``epochs`` (a fraction too, rounded up as the Trainer does), at the current batch size.

    >>> steps_to_the_end(2, 0, batches_left=8, batches_per_epoch=12, epochs=2, accumulation=1)
    22
    """
    per_epoch = max(-(-batches_per_epoch // accumulation), 1)
    later = max(epochs - (epoch + 1), 0.0)
    return global_step + -(-batches_left // accumulation) + math.ceil(later * per_epoch)


def stretch_schedule(scheduler: Any, total_steps: int) -> bool:
    """Point a ``LambdaLR``'s ``num_training_steps`` at ``total_steps``; False where it has none to move."""
    inner = getattr(scheduler, "scheduler", scheduler)  # accelerate's AcceleratedScheduler wraps it
    if not isinstance(inner, torch.optim.lr_scheduler.LambdaLR):
        return False
    lambdas: list[Any] = list(inner.lr_lambdas)
    if not all(isinstance(f, functools.partial) and "num_training_steps" in f.keywords for f in lambdas):
        return False
    inner.lr_lambdas = [functools.partial(f.func, *f.args, **(f.keywords | {"num_training_steps": total_steps}))
                        for f in lambdas]
    return True


def follow_data(trainer: Any, loader: Any, offset: int = 0) -> None:
    """After a batch-size change or an exclusion: the epoch-based run's step budget and LR horizon (see the
    module). ``offset``: the run's ``global_step`` minus the data's step the schedule counts (``_numbering``)."""
    args, state = trainer.args, trainer.state
    if args.max_steps > 0:
        return
    total = steps_to_the_end(state.global_step - offset, loader.epoch, loader.batches_left(), len(loader),
                             float(args.num_train_epochs), args.gradient_accumulation_steps)
    if total + offset == state.max_steps:
        return
    before, state.max_steps = state.max_steps, total + offset
    if trainer.lr_scheduler is not None and not stretch_schedule(trainer.lr_scheduler, total):
        warnings.warn(f"batch size {loader.batch_size}, {len(loader)} batches an epoch: the run now ends at step "
                      f"{total + offset} (was {before}), but its "
                      f"{type(getattr(trainer.lr_scheduler, 'scheduler', trainer.lr_scheduler)).__name__} has no "
                      "num_training_steps to move: its learning rate keeps the old horizon", UserWarning, stacklevel=3)
