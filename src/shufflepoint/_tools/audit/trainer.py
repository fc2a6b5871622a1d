"""Auditing a Hugging Face Trainer: a TARGET factory may return a ``transformers.Trainer`` instead of a
loader. The audit then runs the Trainer's own loop and its own checkpoint/resume, and records what
it *trained*: every batch ``training_step`` received, in the epoch the Trainer counted it in.

- record / reference / interrupt: ``trainer.train()`` for ``--epochs`` epochs; at the save point
  (``EPOCH:STEP``, STEP batches per rank into EPOCH, a whole number of optimizer steps) a callback
  asks the Trainer to save a checkpoint (and, when interrupting, to stop).
- resume: a new Trainer from the same factory, ``trainer.train(resume_from_checkpoint=...)``.

The epoch a batch is trained in is the one the Trainer's loop counts, as ``TrainerState.epoch`` says
at the optimizer step that trains it (the loop's epoch plus the fraction of it done, so the loop's
epoch is ``ceil(state.epoch) - 1``); the epochs after the first of a ``train()`` follow by its
``on_epoch_begin`` calls. Not ``global_step // steps_per_epoch``: a shufflepoint Trainer numbers its
steps on from the saved ``global_step`` on any world size, so its step says nothing of its epoch.

A resumed Trainer may count its first epoch as an earlier one than the save point's: the stock
Trainer does on fewer processes (``global_step // steps_per_epoch`` with more steps an epoch). What
it trains in such an epoch is reported as ``replayed`` (a note), and the audited epochs judge only
what it trained in the epochs it counted as the save point's and later: the stock Trainer then
trains the whole interrupted epoch again (``DUPLICATED``), or skips part of it (``DROPPED``).
The Trainer's ``output_dir`` and ``num_train_epochs`` are set by the audit; ``max_steps`` must be unset.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any

from shufflepoint._tools.audit.config import SavePoint
from shufflepoint._tools.audit.verdicts import UsageError


def is_trainer(candidate: Any) -> bool:
    """Whether a TARGET returned a ``transformers.Trainer`` (without importing transformers otherwise)."""
    module = type(candidate).__module__.split(".")[0]
    if module != "transformers" and not any(c.__module__.startswith("transformers.") for c in type(candidate).__mro__):
        return False
    import transformers

    return isinstance(candidate, transformers.Trainer)


def describe(trainer: Any) -> dict[str, Any]:
    """The facts the report shows and the judge sizes the tail with."""
    try:
        length: int | None = len(trainer.train_dataset)
    except TypeError:
        length = None
    return {"loader": f"{type(trainer).__module__}.{type(trainer).__qualname__}", "dataset_length": length,
            "drop_last": bool(trainer.args.dataloader_drop_last),
            "batch_size": int(trainer.args.per_device_train_batch_size)}


class TrainerRun:
    """One ``train()`` of a Trainer, recorded. ``observe(batch, ids, digests)`` is the worker's."""

    def __init__(self, trainer: Any, epochs: int, output_dir: str, observe: Callable[..., Any]) -> None:
        from transformers import TrainerCallback

        if trainer.args.max_steps is not None and trainer.args.max_steps > 0:
            raise UsageError(f"TARGET: the Trainer has max_steps={trainer.args.max_steps}; the audit runs "
                             "--epochs epochs, so leave max_steps unset")
        trainer.args.output_dir = output_dir
        trainer.args.num_train_epochs = epochs
        self.trainer, self.observe = trainer, observe
        # this train()'s epochs in the order its loop began them: (batch ids, content digests) each
        self.passes: list[tuple[list[list[Any]], list[list[str] | None]]] = []
        self.first: int | None = None  # the Trainer's epoch of passes[0], known at its first optimizer step
        self.save: SavePoint | None = None
        self.stop = False
        self.saved_to: str | None = None
        self.saving = False
        self.on_saved: Callable[[str], None] = lambda folder: None
        run = self

        class Recorder(TrainerCallback):
            def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
                run.passes, run.first = [], None

            def on_epoch_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
                run.passes.append(([], []))

            def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
                if run.first is None:  # the loop's epoch: state.epoch is epoch + (batches done) / (its batches)
                    run.first = math.ceil(state.epoch) - len(run.passes)
                save = run.save
                if save is not None and run.saved_to is None and run.first + len(run.passes) - 1 == save.epoch \
                        and len(run.passes[-1][0]) == save.step:
                    control.should_save = True
                    control.should_training_stop = run.stop
                    run.saving = True

            def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
                if run.saving and run.saved_to is None:  # the handler clears should_save before this call
                    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

                    run.saved_to = os.path.join(args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}")
                    run.on_saved(run.saved_to)

        trainer.add_callback(Recorder())
        training_step = trainer.training_step

        def recording_step(model: Any, inputs: Any, *args: Any, **kwargs: Any) -> Any:
            run.observe(inputs, *run.passes[-1])
            return training_step(model, inputs, *args, **kwargs)

        trainer.training_step = recording_step

    def train(self, save: SavePoint | None, stop: bool, resume_from: str | None = None) -> None:
        self.save, self.stop = save, stop
        if save is not None and save.step < 1:
            raise UsageError(f"--save-at {save}: a Trainer saves after an optimizer step; use a STEP >= 1")
        self.trainer.train(resume_from_checkpoint=resume_from)
        if save is not None and self.saved_to is None:
            accumulation = self.trainer.args.gradient_accumulation_steps
            seen = len(self.epochs(save.epoch, save.epoch)[0][0])
            raise UsageError(f"--save-at {save}: the Trainer never stood there; it saves only after an optimizer "
                             f"step ({accumulation} batches each), so STEP must be a multiple of {accumulation} "
                             f"and less than the epoch's batches ({seen} seen)")

    def _by_epoch(self) -> dict[int, tuple[list[list[Any]], list[list[str] | None]]]:
        """The Trainer's epoch -> what it trained in it (nothing before its first optimizer step)."""
        if self.first is None:
            return {}
        return {self.first + number: found for number, found in enumerate(self.passes)}

    def epochs(self, first: int, last: int) -> tuple[list[list[list[Any]]], list[list[list[str] | None]]]:
        """The batches and content digests of the Trainer's epochs ``first`` to ``last`` (inclusive)."""
        found = self._by_epoch()
        return ([found[e][0] if e in found else [] for e in range(first, last + 1)],
                [found[e][1] if e in found else [] for e in range(first, last + 1)])

    def replayed(self, before: int) -> dict[str, int]:
        """Samples trained in epochs the resumed Trainer counted as earlier than ``before``."""
        return {str(e): sum(map(len, b)) for e, (b, _) in sorted(self._by_epoch().items()) if e < before and b}
