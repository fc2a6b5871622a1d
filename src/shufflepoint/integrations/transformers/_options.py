"""The stock Trainer options that change who reads which data, each honoured as stock or refused by name when the
Trainer is built (never accepted and silently changed).

- ``split_batches=True`` (``accelerator_config``): stock's loader yields ``per_device_train_batch_size`` samples a
  step, which Accelerate splits over the processes, so every rank trains ``per_device_train_batch_size / world_size``.
  Honoured: the shufflepoint loader serves that many per rank; a batch size that does not divide is refused, as
  Accelerate refuses it.
- ``even_batches=False``: stock gives the last ranks fewer samples instead of repeating the epoch's first ones.
  Honoured with ``dataloader_drop_last=True`` (the incomplete global batch is dropped: nothing repeats); refused
  without it, where the shufflepoint loader pads the tail (``drop_last=False``, the DistributedSampler's padding).
- ``ignore_data_skip=True``: stock resumes at the checkpoint's epoch from its first batch, ``global_step`` and the
  schedule going on from the checkpoint. Honoured (``ResumableTrainerMixin._place_loader``), with a
  ``ResumeWarning`` that says which samples may be trained again; also the way to continue on a dataset whose
  length changed (docs/integrations.md, a dataset whose length changed).

Words: docs/glossary.md (split batches, batch, rank).
"""

from __future__ import annotations

from typing import Any

from shufflepoint._errors import Plain, refusal


def split_batches(trainer: Any) -> bool:
    """Whether the Trainer's Accelerator splits each loader batch over the processes."""
    return bool(getattr(trainer.accelerator, "split_batches", False))  # TOUCH POINT: Accelerator.split_batches


def even_batches(trainer: Any) -> bool:
    """Whether the Trainer's Accelerator evens out the ranks' batches (Accelerate's default, True)."""
    return getattr(trainer.accelerator, "even_batches", True) is not False  # TOUCH POINT: Accelerator.even_batches


def per_rank_batch_size(trainer: Any, batch_size: int, world_size: int) -> int:
    """The samples each rank reads a batch: ``batch_size`` (the Trainer's ``_train_batch_size``), or its
    ``world_size``-th part under ``split_batches``, refused by name where it does not divide."""
    if not split_batches(trainer):
        return batch_size
    if batch_size % world_size:
        raise ValueError(refusal(
            "accelerator_config.split_batches", Plain(f"True with a batch of {batch_size} samples on "
                                                      f"{world_size} processes"),
            f"a per_device_train_batch_size that is a multiple of the {world_size} processes",
            f"pass per_device_train_batch_size={max(batch_size // world_size, 1) * world_size}, or leave "
            "split_batches off (then per_device_train_batch_size is per process)",
            why="split_batches divides each batch over the processes, as Accelerate does"))
    return batch_size // world_size


def check_options(trainer: Any) -> None:
    """Refuse at construction what the shufflepoint Trainer cannot honour (see the module)."""
    args = trainer.args
    if not even_batches(trainer) and not args.dataloader_drop_last:
        raise ValueError(refusal(
            "accelerator_config.even_batches", False, "True, or even_batches=False with dataloader_drop_last=True",
            "pass dataloader_drop_last=True (the epoch's incomplete global batch is dropped, nothing repeats), or "
            "leave even_batches on",
            why="the shufflepoint loader pads the epoch's last global batch with its first samples, which "
            "even_batches=False asks not to do"))
    batch_size = int(trainer._train_batch_size)  # private: TOUCH POINT, Trainer._train_batch_size
    per_rank_batch_size(trainer, batch_size, int(args.world_size))
