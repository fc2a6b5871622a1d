"""The Trainer mixin: a ``shufflepoint.DataLoader`` as the train loader, its state in every
checkpoint, and a resume that places the data from that state instead of replaying batches."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import warnings
from typing import TYPE_CHECKING, Any

import torch.utils.data

import shufflepoint.integrations.transformers._touch as _touch
from shufflepoint._core.trainer_placement import Placement, place, updates_per_epoch
from shufflepoint._errors import Plain, ResumeWarning, refusal
from shufflepoint._loading.agreement import settle_gloo_threads
from shufflepoint._loading.keyed import Transform
from shufflepoint._loading.loader import DataLoader
from shufflepoint.integrations.transformers._budget import Budget, end_of, refuse_training_nothing, step_size, steps_to
from shufflepoint.integrations.transformers._mixin_order import (
    refuse_a_mixin_without_a_trainer,
    refuse_a_trainer_before_the_mixin,
)
from shufflepoint.integrations.transformers._numbering import (
    RUN_FILE,
    Numbering,
    read_json,
    saved_numbering,
    write_json,
)
from shufflepoint.integrations.transformers._ramp import follow_data
from shufflepoint.integrations.transformers._schedule import ContinueSchedule, continue_schedule

if TYPE_CHECKING:
    import transformers

    _TrainerBase = transformers.Trainer
else:
    _TrainerBase = object

LOADER_STATE_FILE = "shufflepoint_loader.json"
"""The loader's state in each ``checkpoint-N`` folder the Trainer saves, read back on a resume."""
# Where max_steps ends in the data (set by the run that set max_steps; see _budget), with that run's numbers.
BUDGET_FILE = "shufflepoint_budget.json"
"""Where ``max_steps`` ends in the data, saved in the checkpoint by the run that set it, with that run's
numbers, so that a resume on another world size stops at the same sample."""


class ResumableTrainerMixin(_TrainerBase):
    """Mix into any ``transformers.Trainer`` subclass (before it) for an exact, O(1), elastic resume::

        class MySFTTrainer(ResumableTrainerMixin, trl.SFTTrainer): ...

    Extra constructor arguments, which ``TrainingArguments`` cannot carry: ``seed_per_sample`` and
    ``transform`` (augmentations that survive a resume, see ``shufflepoint.DataLoader``), ``order``,
    and ``force_version`` (run on a transformers outside ``TESTED_TRANSFORMERS``, with a warning).
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        refuse_a_trainer_before_the_mixin(cls, ResumableTrainerMixin)

    def __init__(self, *args: Any, seed_per_sample: bool = False, transform: Transform | None = None,
                 order: str | None = None, force_version: bool = False, **kwargs: Any) -> None:
        refuse_a_mixin_without_a_trainer(type(self))
        self._shufflepoint_version = _touch.check_version(force_version)
        self._shufflepoint_options: dict[str, Any] = {"seed_per_sample": seed_per_sample, "transform": transform,
                                                      "order": order}
        self._shufflepoint_loader: DataLoader | None = None
        self._shufflepoint_checkpoint: str | None = None
        self._shufflepoint_placement: Placement | None = None
        self._shufflepoint_saved_step: int | None = None
        self._shufflepoint_kept_step = False  # a ramped run resumed: its saved global_step kept (_place_data)
        self._shufflepoint_first_chunk: int | None = None
        self._shufflepoint_budget: Budget | None = None
        self._shufflepoint_batch_size: int | None = None  # the loader's, as the Trainer last counted steps with
        self._shufflepoint_excluded: Any = None  # the loader's excluded set, likewise
        self._shufflepoint_numbering = Numbering()  # the run's own step numbers (_numbering)
        super().__init__(*args, **kwargs)
        # first: on 4.x its on_train_begin numbers global_step on from the saved one, before any other callback
        _touch.add_first_callback(self, ContinueSchedule(self))

    # -- the loader ----------------------------------------------------------------------------
    def get_train_dataloader(self) -> DataLoader:
        """A ``shufflepoint.DataLoader`` from what ``Trainer._get_dataloader`` would use. Not passed
        through ``accelerator.prepare``: it shards over the ranks itself, and the Trainer moves each
        batch to the device (``_prepare_inputs``)."""
        if self.train_dataset is None:
            raise ValueError("Trainer: training requires a train_dataset.")
        args = self.args
        strategy = getattr(args, "train_sampling_strategy", "random")
        if strategy != "random" or getattr(args, "group_by_length", False):
            raise ValueError(refusal(
                "train_sampling_strategy / group_by_length", strategy, "'random' (and group_by_length off)",
                "use the stock Trainer for length grouping, or leave train_sampling_strategy at 'random'",
                why="the shufflepoint Trainer draws the order itself (a seekable shuffle)"))
        dataset, collator = _touch.without_unused_columns(self, self.train_dataset)
        if isinstance(dataset, torch.utils.data.IterableDataset):
            raise TypeError(refusal("train_dataset", Plain("an IterableDataset"), "a map-style dataset (len and "
                                    "__getitem__)", "pass a map-style dataset; a sharded corpus works as "
                                    "shufflepoint.Shards", why="shufflepoint seeks by index"))
        options: dict[str, Any] = {}
        for name in ("multiprocessing_context", "in_order"):  # 5.x only
            if getattr(args, f"dataloader_{name}", None) is not None:
                options[name] = getattr(args, f"dataloader_{name}")
        workers = args.dataloader_num_workers
        loader = DataLoader(
            dataset, batch_size=self._train_batch_size,  # TOUCH POINT: Trainer._train_batch_size
            seed=args.data_seed if args.data_seed is not None else args.seed,
            drop_last=args.dataloader_drop_last, rank=args.process_index, world_size=args.world_size,
            collate_fn=collator, num_workers=workers, pin_memory=args.dataloader_pin_memory,
            persistent_workers=args.dataloader_persistent_workers and workers > 0,
            prefetch_factor=args.dataloader_prefetch_factor if workers > 0 else None,
            worker_init_fn=_touch.worker_init(args), **options, **self._shufflepoint_options,
        )
        self._shufflepoint_loader, self._shufflepoint_batch_size = loader, loader.batch_size
        self._shufflepoint_excluded = loader.excluded
        return loader

    # -- resume --------------------------------------------------------------------------------
    def train(self, resume_from_checkpoint: str | bool | None = None, *args: Any, **kwargs: Any) -> Any:
        """``Trainer.train``, resuming the loader from the checkpoint's saved state (exact, on any world size)
        instead of skipping batches; ``True`` takes the newest ``checkpoint-N`` as the Trainer does."""
        if resume_from_checkpoint is True:  # as Trainer.train does: the newest checkpoint-N
            resume_from_checkpoint = _touch.last_checkpoint(str(self.args.output_dir))
            if resume_from_checkpoint is None:
                raise ValueError(f"No valid checkpoint found in output directory ({self.args.output_dir})")
        self._shufflepoint_checkpoint = resume_from_checkpoint or None
        self._shufflepoint_placement = None
        self._shufflepoint_saved_step, self._shufflepoint_kept_step = None, False
        self._shufflepoint_first_chunk = None
        self._shufflepoint_budget = None
        self._shufflepoint_numbering = Numbering()
        skip = (contextlib.nullcontext() if _touch.has_resume_hook(self._shufflepoint_version)
                else _touch.skip_first_batches_passes(self._is_ours, self._check_resumed))
        with skip:
            output = super().train(resume_from_checkpoint or None, *args, **kwargs)
        # The Trainer's last collectives are freed by Gloo's threads, which need the GIL: let them, before a
        # script that ends here (or destroys its group holding the GIL) tears Gloo down (_loading/agreement.py).
        settle_gloo_threads()
        return output

    def set_initial_training_values(self, *args: Any, **kwargs: Any) -> Any:
        """The Trainer's epochs, samples and ``max_steps``; with ``max_steps`` set, its steps reach the data
        the run that set it meant, on any world size (``BUDGET_FILE``)."""
        # TOUCH POINT: Trainer.set_initial_training_values returns (num_train_epochs, ..., num_train_samples
        # at 3, ..., max_steps last), from which the loop, TrainerState.max_steps and the scheduler are
        # built; with max_steps set, its steps are made to reach the data the run that set it meant.
        values: list[Any] = list(super().set_initial_training_values(*args, **kwargs))
        if self.args.max_steps > 0 and self._shufflepoint_loader is not None:
            max_steps = self._budgeted_max_steps(int(values[-1]))
            updates = updates_per_epoch(len(self._shufflepoint_loader), self.args.gradient_accumulation_steps)
            values[0] = max(-(-max_steps // updates), 1)
            values[3] = max_steps * self.get_total_train_batch_size(self.args)
            values[-1] = max_steps
        return tuple(values)

    def _budgeted_max_steps(self, max_steps: int) -> int:
        """This run's max_steps: ``args.max_steps`` on a fresh run, or when this run changes it (it then
        counts this run's steps); else as many of this run's steps as reach the data the run that set
        it meant (``_budget``). Records the budget for this run's checkpoints."""
        loader, folder, accumulation = self._shufflepoint_loader, self._shufflepoint_checkpoint, \
            self.args.gradient_accumulation_steps
        assert loader is not None
        now = loader.cursor_after
        fresh = functools.partial(loader.cursor_after, from_epoch_start=True)
        placement = (place(loader.epoch, len(loader), loader.batches_left(), accumulation) if folder is None
                     else self._place_loader(loader, folder, accumulation))
        if placement is None:  # not written by a shufflepoint Trainer: placed by global_step later
            return max_steps
        saved = self._saved_budget(folder)
        if folder is not None and saved is not None and saved.max_steps == self.args.max_steps \
                and self._continues_saved_run(loader, folder):  # its own steps: the budget is its max_steps
            self._shufflepoint_budget = saved
            return max_steps
        reach = steps_to(saved.end, placement, len(loader), now, fresh) if saved is not None else None
        if saved is not None and reach is not None and saved.max_steps == self.args.max_steps:
            if reach.overshoot:
                warnings.warn(
                    f"{saved.describe()} ends at position {saved.end.cursor} of epoch {saved.end.epoch}, inside a "
                    f"step of this run ({self._step_size(loader)}): its last step, {reach.max_steps}, is whole and "
                    f"trains {reach.overshoot} samples past it", ResumeWarning, stacklevel=3)
            max_steps, self._shufflepoint_budget = reach.max_steps, saved
        else:
            self._shufflepoint_budget = Budget(self.args.max_steps, end_of(max_steps, placement, now, fresh),
                                               loader.world_size, int(loader.batch_size or 1), accumulation)
        if folder is not None and max_steps <= placement.global_step:
            refuse_training_nothing(read_json(os.path.join(folder, _touch.TRAINER_STATE_FILE)), self.args.max_steps,
                                    placement.global_step, self._step_size(loader), saved, reach)
        return max_steps

    def _saved_budget(self, folder: str | None) -> Budget | None:
        path = os.path.join(folder, BUDGET_FILE) if folder is not None else None
        found = read_json(path) if path is not None else None
        return Budget.from_json(found, path) if path is not None and found is not None else None

    def _step_size(self, loader: DataLoader) -> str:
        return step_size(loader.world_size, int(loader.batch_size or 1), self.args.gradient_accumulation_steps)

    def _load_callback_state(self) -> None:
        # TOUCH POINT: Trainer._load_callback_state runs right after trainer_state.json is read and
        # before global_step is turned into (epochs_trained, steps_trained_in_current_epoch).
        super()._load_callback_state()
        self._place_data()

    def _init_training_state(self, *args: Any, **kwargs: Any) -> tuple[int, int]:
        # TOUCH POINT (5.x): Trainer._init_training_state returns (epochs_trained, batches to skip);
        # a position between two optimizer steps is given as its exact batch count.
        epochs, batches = super()._init_training_state(*args, **kwargs)
        placement = self._shufflepoint_placement
        if placement is None:
            return epochs, batches
        # the loader's place, not global_step // num_update_steps_per_epoch: the Trainer counted that from
        # len(loader) before the state was loaded (an exclusion, a ramp or a resize changes it since)
        if not placement.aligned:
            self._shufflepoint_first_chunk = placement.accumulation - placement.batches_done % placement.accumulation
        self._shufflepoint_numbering.number(self.state)  # global_step: the run's own, from here on
        return placement.epoch, placement.batches_done

    def get_batch_samples(self, epoch_iterator: Any, num_batches: int, *args: Any, **kwargs: Any) -> Any:
        """One optimizer step's batches; after a resume between two optimizer steps, the first pull stops
        at the next whole step, so every later pull (and DDP's gradient sync) is on a step boundary."""
        # TOUCH POINT: Trainer.get_batch_samples pulls one optimizer step's batches. After a resume
        # between two optimizer steps, the first pull stops at the next whole step, so that every
        # later pull (and DDP's gradient sync, at the last batch of a pull) is on a step boundary.
        short, self._shufflepoint_first_chunk = self._shufflepoint_first_chunk, None
        if short is not None:
            num_batches = min(num_batches, short)
        loader = self._shufflepoint_loader
        if loader is not None and (loader.batch_size != self._shufflepoint_batch_size  # set_batch_size: a ramp
                                   or loader.excluded != self._shufflepoint_excluded):  # exclude(): fewer steps
            self._shufflepoint_batch_size, self._shufflepoint_excluded = loader.batch_size, loader.excluded
            follow_data(self, loader, self._shufflepoint_numbering.offset)
        return super().get_batch_samples(epoch_iterator, num_batches, *args, **kwargs)

    def _run_epoch(self, *args: Any, **kwargs: Any) -> Any:
        # TOUCH POINT (5.x): Trainer._run_epoch(model=, epoch=, train_dataloader=, steps_in_epoch=,
        # num_update_steps_per_epoch=, ...) runs the optimizer steps the Trainer counted from len(loader) at the
        # first batch size. After a set_batch_size (a ramp, from a callback's train_dataloader), an epoch that
        # begins is counted at the current size, and the rest of an epoch the change fell in is run as one more
        # pass: no sample of it is dropped (a smaller batch), no empty step is counted (a larger one).
        run_epoch: Any = super()._run_epoch
        loader: Any = kwargs.get("train_dataloader")
        epoch, accumulation = kwargs.get("epoch"), self.args.gradient_accumulation_steps
        if not self._is_ours(loader):
            return run_epoch(*args, **kwargs)
        resumed = epoch == kwargs.get("epochs_trained") and kwargs.get("resume_from_checkpoint") is not None
        placement = self._shufflepoint_placement
        steps = (placement.batches_done + loader.batches_left() if resumed and placement is not None
                 else len(loader))  # a resumed epoch: what it read before the checkpoint and what is left
        if kwargs.get("steps_in_epoch") != steps:
            kwargs |= {"steps_in_epoch": steps, "num_update_steps_per_epoch": updates_per_epoch(steps, accumulation)}
        found = run_epoch(*args, **kwargs)
        while (loader.epoch == epoch and loader.batches_left() > 0 and not self.control.should_training_stop
               and not self.control.should_epoch_stop):
            left = loader.batches_left()
            found = run_epoch(*args, **kwargs | {
                "steps_in_epoch": left, "num_update_steps_per_epoch": updates_per_epoch(left, accumulation),
                "resume_from_checkpoint": None, "epochs_trained": -1, "steps_trained_in_current_epoch": 0})
        return found

    def get_resumed_dataloader(self, dataloader: Any, num_batches: int) -> Any:
        """The loader was placed when the checkpoint was read: return it as it is (O(1))."""
        if self._is_ours(dataloader):
            self._check_resumed(dataloader, num_batches)
            return dataloader
        return super().get_resumed_dataloader(dataloader, num_batches)

    def _is_ours(self, dataloader: Any) -> bool:
        return dataloader is not None and dataloader is self._shufflepoint_loader

    def _check_resumed(self, dataloader: Any, num_batches: int) -> None:
        placement = self._shufflepoint_placement
        if placement is None or num_batches not in (placement.batches_done,
                                                    placement.batches_done // placement.accumulation
                                                    * placement.accumulation):
            raise RuntimeError(
                f"shufflepoint Trainer: the Trainer skips {num_batches} batches, but the loader was placed "
                f"at {placement}. Likely cause: the checkpoint's loader state was not read (a Trainer "
                "subclass that overrides _load_callback_state or train without calling super()).")

    def _place_data(self) -> None:
        """Load the loader's state from the checkpoint and make ``global_step`` agree with it."""
        loader, folder = self._shufflepoint_loader, self._shufflepoint_checkpoint
        if loader is None or folder is None:
            return
        accumulation = self.args.gradient_accumulation_steps
        placement = self._place_loader(loader, folder, accumulation)
        ours = placement is not None  # a loader state: the checkpoint's record of its steps goes on
        if placement is None:
            nupe = updates_per_epoch(len(loader), accumulation)
            epoch, step = divmod(self.state.global_step, nupe)
            warnings.warn(
                f"{os.path.join(folder, LOADER_STATE_FILE)} not found: the checkpoint was not written by a "
                f"shufflepoint Trainer, so the data is placed by global_step alone (epoch {epoch}, "
                f"{step * accumulation} batches): exact only if this run has the saved run's world size, batch "
                "size and gradient accumulation, and was written with the shufflepoint order",
                ResumeWarning, stacklevel=2)
            loader.seek(epoch, min(step * accumulation, len(loader)))
            placement = place(loader.epoch, len(loader), loader.batches_left(), accumulation)
        if not placement.aligned and not _touch.has_resume_hook(self._shufflepoint_version):
            warnings.warn(
                f"resumed {placement.batches_done} batches into epoch {placement.epoch}, not a whole number of "
                f"optimizer steps of {accumulation} batches; on transformers {self._shufflepoint_version} "
                "the Trainer numbers the batches from the last whole step, so the epoch's last accumulation "
                "may be short or carried into the next epoch (every sample is still trained once). "
                "transformers >= 5.25 makes the first step short instead", ResumeWarning, stacklevel=2)
        self._shufflepoint_saved_step = self.state.global_step
        self._shufflepoint_kept_step = self._continues_saved_run(loader, folder)
        if self._shufflepoint_kept_step:  # the saved run goes on as it was: its own steps
            placement = self._own_steps(loader, placement, self.state.global_step)
        self._shufflepoint_numbering = (
            saved_numbering(folder, self.state.global_step, placement.global_step, loader.step) if ours
            else Numbering(offset=self.state.global_step - placement.global_step, saved_step=self.state.global_step))
        self.state.global_step = placement.global_step  # the data's step, which the Trainer places itself by
        self._shufflepoint_placement = placement

    def _continues_saved_run(self, loader: DataLoader, folder: str) -> bool:
        """Whether this resume continues the saved run with its own settings (world size, initial per-device
        batch size, and gradient accumulation where a budget recorded it): the saved ``global_step`` then
        counts this run's steps, which placing by the position in the epoch at this run's batch size would not
        after a ``set_batch_size`` or an ``exclude`` (epochs of other lengths; 5.x, which skips by batches)."""
        saved = read_json(os.path.join(folder, LOADER_STATE_FILE))
        budget, run = self._saved_budget(folder), read_json(os.path.join(folder, RUN_FILE))
        trainer_state = read_json(os.path.join(folder, _touch.TRAINER_STATE_FILE))
        accumulation = (run or {}).get("gradient_accumulation_steps", budget.accumulation if budget else None)
        return (saved is not None and trainer_state is not None and _touch.has_resume_hook(self._shufflepoint_version)
                and saved.get("world_size") == loader.world_size
                and trainer_state.get("train_batch_size") == self._train_batch_size
                and accumulation in (None, self.args.gradient_accumulation_steps)
                and (saved.get("batch_size") != loader.batch_size or bool(saved.get("excluded"))))  # else: the same

    def _own_steps(self, loader: DataLoader, placement: Placement, saved_step: int) -> Placement:
        """``placement`` with the saved run's own step count, and the batches the loader received of its epoch
        (``batches_this_epoch``; the placement's where the loader's history cannot tell)."""
        done = loader.batches_this_epoch()
        return dataclasses.replace(placement, global_step=saved_step,
                                   batches_done=placement.batches_done if done is None else done)

    def _place_loader(self, loader: DataLoader, folder: str, accumulation: int) -> Placement | None:
        """Load the checkpoint's loader state (None without one) and move a finished epoch to the next.
        Run twice on a resume (for max_steps, then where the Trainer reads its state): O(1), and the
        second undoes anything that iterated the loader in between (4.57's token count does)."""
        if self.args.ignore_data_skip:
            raise ValueError(refusal("ignore_data_skip", True, "False", "leave ignore_data_skip off",
                                     why="the shufflepoint Trainer reads no skipped data on resume (a seek), so there "
                                     "is nothing to save by restarting the epoch"))
        state = read_json(os.path.join(folder, LOADER_STATE_FILE))
        if state is None:
            return None
        loader.load_state_dict(state)
        placement = place(loader.epoch, len(loader), loader.batches_left(), accumulation)
        if placement.epoch != loader.epoch:
            loader.set_epoch(placement.epoch)
        return placement

    def _on_train_begin(self, scheduler: Any, optimizer: Any) -> None:
        """After the scheduler was loaded: continue it at the placed step; number the run's steps on from the
        saved ``global_step`` (where ``_init_training_state`` did not: 4.x) and start the record of its steps.
        Called by the first callback, so every other callback's ``on_train_begin`` sees the run's numbers."""
        if self._shufflepoint_placement is not None and scheduler is not None and optimizer is not None:
            if self._shufflepoint_saved_step != self._shufflepoint_placement.global_step:
                continue_schedule(scheduler, optimizer, self._shufflepoint_placement.global_step)
        numbering = self._shufflepoint_numbering
        if numbering.number(self.state):  # TOUCH POINT (4.x): the loss is averaged over the steps since this one
            self._globalstep_last_logged = self.state.global_step
        if self._shufflepoint_loader is not None:
            numbering.mark, numbering.new = self._shufflepoint_loader.step, True

    def _on_step_end(self) -> None:
        """An optimizer step has run: record the loader steps it trained (``_numbering``)."""
        if self._shufflepoint_loader is not None:
            self._shufflepoint_numbering.stepped(self.state.global_step, self._shufflepoint_loader,
                                                 self.args.gradient_accumulation_steps)

    def _save_checkpoint(self, model: Any, trial: Any, *args: Any, **kwargs: Any) -> None:
        # TOUCH POINT: Trainer._save_checkpoint writes the folder (model, optimizer, trainer_state.json)
        # on the ranks that save; the loader's state joins it there, before any on_save callback runs
        # (a callback that ends the process, say, still finds a complete checkpoint).
        super()._save_checkpoint(model, trial, *args, **kwargs)
        loader = self._shufflepoint_loader
        if loader is None or not self.args.should_save:
            return
        folder = os.path.join(_touch.output_dir(self, trial), _touch.checkpoint_folder_name(self.state.global_step))
        if not os.path.isdir(folder):
            raise RuntimeError(f"shufflepoint Trainer: the checkpoint folder {folder} was not written by "
                               "Trainer._save_checkpoint, so the loader's state has no place to go")
        write_json(os.path.join(folder, LOADER_STATE_FILE), loader.state_dict())
        if self._shufflepoint_budget is not None:
            write_json(os.path.join(folder, BUDGET_FILE), self._shufflepoint_budget.to_json())
        write_json(os.path.join(folder, RUN_FILE), self._shufflepoint_numbering.to_json(
            self.args.gradient_accumulation_steps))

