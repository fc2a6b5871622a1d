"""The Trainer mixin: a ``shufflepoint.DataLoader`` as the train loader, its state in every
checkpoint, and a resume that places the data from that state instead of replaying batches."""

from __future__ import annotations

import contextlib
import json
import os
import warnings
from typing import TYPE_CHECKING, Any

import torch.utils.data

from shufflepoint._core.errors import ResumeWarning
from shufflepoint._loading.keyed import Transform
from shufflepoint._loading.loader import DataLoader
from shufflepoint.integrations.transformers import _touch
from shufflepoint.integrations.transformers._placement import Placement, place, updates_per_epoch
from shufflepoint.integrations.transformers._schedule import ContinueSchedule, continue_schedule

if TYPE_CHECKING:
    import transformers

    _TrainerBase = transformers.Trainer
else:
    _TrainerBase = object

LOADER_STATE_FILE = "shufflepoint_loader.json"


class ResumableTrainerMixin(_TrainerBase):
    """Mix into any ``transformers.Trainer`` subclass (before it) for an exact, O(1), elastic resume::

        class MySFTTrainer(ResumableTrainerMixin, trl.SFTTrainer): ...

    Extra constructor arguments, which ``TrainingArguments`` cannot carry: ``seed_per_sample`` and
    ``transform`` (augmentations that survive a resume, see ``shufflepoint.DataLoader``), ``order``,
    and ``force_version`` (run on a transformers outside ``TESTED_TRANSFORMERS``, with a warning).
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _refuse_a_trainer_before_the_mixin(cls)

    def __init__(self, *args: Any, seed_per_sample: bool = False, transform: Transform | None = None,
                 order: str | None = None, force_version: bool = False, **kwargs: Any) -> None:
        _refuse_a_mixin_without_a_trainer(type(self))
        self._shufflepoint_version = _touch.check_version(force_version)
        self._shufflepoint_options: dict[str, Any] = {"seed_per_sample": seed_per_sample, "transform": transform,
                                                      "order": order}
        self._shufflepoint_loader: DataLoader | None = None
        self._shufflepoint_checkpoint: str | None = None
        self._shufflepoint_placement: Placement | None = None
        self._shufflepoint_saved_step: int | None = None
        self._shufflepoint_first_chunk: int | None = None
        super().__init__(*args, **kwargs)
        self.add_callback(ContinueSchedule(self))

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
            raise ValueError(
                f"train_sampling_strategy / group_by_length: found {strategy!r}, expected 'random': the "
                "shufflepoint Trainer draws the order itself (a seekable shuffle); use the stock Trainer "
                "for length grouping, or leave train_sampling_strategy at 'random' (and group_by_length off)")
        dataset, collator = _touch.without_unused_columns(self, self.train_dataset)
        if isinstance(dataset, torch.utils.data.IterableDataset):
            raise TypeError("train_dataset: found an IterableDataset, expected a map-style dataset (len and "
                            "__getitem__): shufflepoint seeks by index; a sharded corpus works as "
                            "shufflepoint.Shards")
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
        self._shufflepoint_loader = loader
        return loader

    # -- resume --------------------------------------------------------------------------------
    def train(self, resume_from_checkpoint: str | bool | None = None, *args: Any, **kwargs: Any) -> Any:
        if resume_from_checkpoint is True:  # as Trainer.train does: the newest checkpoint-N
            resume_from_checkpoint = _touch.last_checkpoint(str(self.args.output_dir))
            if resume_from_checkpoint is None:
                raise ValueError(f"No valid checkpoint found in output directory ({self.args.output_dir})")
        self._shufflepoint_checkpoint = resume_from_checkpoint or None
        self._shufflepoint_placement = None
        self._shufflepoint_saved_step = None
        self._shufflepoint_first_chunk = None
        skip = (contextlib.nullcontext() if _touch.has_resume_hook(self._shufflepoint_version)
                else _touch.skip_first_batches_passes(self._is_ours, self._check_resumed))
        with skip:
            return super().train(resume_from_checkpoint or None, *args, **kwargs)

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
        if placement is not None and placement.epoch == epochs and not placement.aligned:
            batches = placement.batches_done
            self._shufflepoint_first_chunk = placement.accumulation - batches % placement.accumulation
        return epochs, batches

    def get_batch_samples(self, epoch_iterator: Any, num_batches: int, *args: Any, **kwargs: Any) -> Any:
        # TOUCH POINT: Trainer.get_batch_samples pulls one optimizer step's batches. After a resume
        # between two optimizer steps, the first pull stops at the next whole step, so that every
        # later pull (and DDP's gradient sync, at the last batch of a pull) is on a step boundary.
        short, self._shufflepoint_first_chunk = self._shufflepoint_first_chunk, None
        if short is not None:
            num_batches = min(num_batches, short)
        return super().get_batch_samples(epoch_iterator, num_batches, *args, **kwargs)

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
        if self.args.ignore_data_skip:
            raise ValueError("ignore_data_skip: found True, expected False: the shufflepoint Trainer reads no "
                             "skipped data on resume (a seek), so there is nothing to save by restarting "
                             "the epoch")
        accumulation = self.args.gradient_accumulation_steps
        path = os.path.join(folder, LOADER_STATE_FILE)
        if os.path.exists(path):
            with open(path) as f:
                loader.load_state_dict(json.load(f))
        else:
            nupe = updates_per_epoch(len(loader), accumulation)
            epoch, step = divmod(self.state.global_step, nupe)
            warnings.warn(
                f"{path} not found: the checkpoint was not written by a shufflepoint Trainer, so the data is "
                f"placed by global_step alone (epoch {epoch}, {step * accumulation} batches): exact only if "
                "this run has the saved run's world size, batch size and gradient accumulation, and was "
                "written with the shufflepoint order", ResumeWarning, stacklevel=2)
            loader.seek(epoch, min(step * accumulation, len(loader)))
        left = loader.batches_left()
        placement = place(loader.epoch, len(loader), left, accumulation)
        if placement.epoch != loader.epoch:
            loader.set_epoch(placement.epoch)
        if not placement.aligned and not _touch.has_resume_hook(self._shufflepoint_version):
            warnings.warn(
                f"resumed {placement.batches_done} batches into epoch {placement.epoch}, not a whole number of "
                f"optimizer steps of {accumulation} batches; on transformers {self._shufflepoint_version} "
                "the Trainer numbers the batches from the last whole step, so the epoch's last accumulation "
                "may be short or carried into the next epoch (every sample is still trained once). "
                "transformers >= 5.25 makes the first step short instead", ResumeWarning, stacklevel=2)
        self._shufflepoint_saved_step = self.state.global_step
        self.state.global_step = placement.global_step
        self._shufflepoint_placement = placement

    def _on_train_begin(self, scheduler: Any, optimizer: Any) -> None:
        """After the scheduler was loaded: continue it at the placed ``global_step``."""
        if self._shufflepoint_placement is not None and scheduler is not None and optimizer is not None:
            if self._shufflepoint_saved_step != self._shufflepoint_placement.global_step:
                continue_schedule(scheduler, optimizer, self._shufflepoint_placement.global_step)

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
        path = os.path.join(folder, LOADER_STATE_FILE)
        with open(f"{path}.tmp{os.getpid()}", "w") as f:
            json.dump(loader.state_dict(), f)
        os.replace(f"{path}.tmp{os.getpid()}", path)


def _refuse_a_trainer_before_the_mixin(cls: type) -> None:
    """``TypeError`` when a ``transformers.Trainer`` comes before ``ResumableTrainerMixin`` in ``cls``'s
    method resolution order: its methods (``get_train_dataloader``, ``train``, ``_save_checkpoint``)
    would then shadow the mixin's, and the class would silently be the stock Trainer (the stock order,
    no loader state in the checkpoints).

    ``class X(trl.SFTTrainer, ResumableTrainerMixin)`` has the order X, SFTTrainer, Trainer, mixin: refused.
    ``class X(ResumableTrainerMixin, trl.SFTTrainer)`` has X, mixin, SFTTrainer, Trainer: right.
    """
    import transformers

    order = cls.__mro__
    mixin_at = order.index(ResumableTrainerMixin)
    shadowing = [c for c in order[:mixin_at]
                 if issubclass(c, transformers.Trainer) and not issubclass(c, ResumableTrainerMixin)]
    if shadowing:
        bases = ", ".join(base.__name__ for base in cls.__bases__)
        raise TypeError(
            f"class {cls.__name__}({bases}): {shadowing[0].__name__} comes before ResumableTrainerMixin in "
            f"its method resolution order ({' -> '.join(c.__name__ for c in order[:mixin_at + 1])}), so the "
            "Trainer's own methods shadow the mixin's and the class would silently train the stock order, "
            "with no loader state in its checkpoints.\n"
            f"Fix: list the mixin first, class {cls.__name__}(ResumableTrainerMixin, {shadowing[0].__name__}) "
            "(or subclass shufflepoint.integrations.transformers.Trainer).")


def _refuse_a_mixin_without_a_trainer(cls: type) -> None:
    import transformers

    if not issubclass(cls, transformers.Trainer):
        raise TypeError(
            f"{cls.__name__}: ResumableTrainerMixin found no transformers.Trainer among its bases; it changes a "
            f"Trainer's loader and checkpoints. Fix: class {cls.__name__}(ResumableTrainerMixin, transformers.Trainer) "
            "(or TRL's SFTTrainer, or any other Trainer subclass), mixin first.")
