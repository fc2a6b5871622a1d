"""Every place where the Trainer integration reaches into transformers' internals, in one module.

Each touch point is listed in ``TOUCH_POINTS`` and marked ``TOUCH POINT`` where it is used, naming
the transformers source it reads or replaces. ``check_version()`` refuses a transformers outside
``TESTED_TRANSFORMERS`` (each touch point was read in the sources of 4.57.1 and 5.25.0 and tested on
both), unless ``force=True``, which says so with a ``ResumeWarning``.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import warnings
from collections.abc import Callable, Iterator
from typing import Any

from shufflepoint._errors import Plain, ResumeWarning, refusal

# From the first (inclusive) to the second (exclusive): `make test-transformers-matrix` runs the
# oldest (4.57.1) and the newest (5.25.0) of them.
TESTED_TRANSFORMERS: tuple[str, str] = ("4.57.0", "5.26.0")
"""The transformers releases the Trainer integration is tested on: from the first (inclusive) to the second
(exclusive); the Trainer refuses any other unless ``force_version=True``."""
# The first version whose Trainer calls the overridable hook Trainer.get_resumed_dataloader.
RESUME_HOOK_SINCE = (5, 25, 0)

TOUCH_POINTS = (
    "transformers.Trainer.get_resumed_dataloader (>= 5.25): returns our loader, already placed",
    "transformers.trainer.skip_first_batches (< 5.25, the module global _inner_training_loop calls): "
    "replaced during train() by a function that returns our loader as it is, and calls the original "
    "for any other loader",
    "transformers.Trainer._load_callback_state: called right after trainer_state.json is read and "
    "before global_step is turned into (epochs_trained, steps_trained_in_current_epoch); global_step "
    "is rewritten there from the loader's state",
    "transformers.Trainer._init_training_state (>= 5.0): its returned batch count is replaced when "
    "the resumed position is not a whole optimizer step",
    "transformers.Trainer.get_batch_samples: the first pull after a resume between two optimizer "
    "steps stops at the next whole step; a batch size changed by set_batch_size moves TrainerState.max_steps "
    "and the LambdaLR's num_training_steps (epoch-based runs)",
    "transformers.Trainer._run_epoch (>= 5.0, called with keywords): an epoch is counted at the loader's "
    "current batch size, and the rest of an epoch a set_batch_size fell in is run as one more pass",
    "transformers.TrainerState.train_batch_size: the saved run's per-device batch size; with the same world "
    "size, a resume after a set_batch_size keeps the saved global_step",
    "transformers.trainer_callback.CallbackHandler.callbacks (called in list order): the integration's own "
    "callback goes first, so that on 4.x, where global_step becomes the run's number in its on_train_begin, every "
    "other callback (those passed to the constructor too) sees the run's numbers from on_train_begin on",
    "transformers.Trainer._save_checkpoint / _get_output_dir: the checkpoint folder the loader's state "
    "joins, written before any on_save callback runs",
    "transformers.Trainer._remove_unused_columns / _get_collator_with_removed_columns: the columns "
    "_get_dataloader would drop",
    "transformers.Trainer._train_batch_size: the per-device batch size (auto_find_batch_size changes it)",
    "transformers.trainer_utils.seed_worker: the worker_init_fn _get_dataloader passes",
    "transformers.Trainer.set_initial_training_values: returns (num_train_epochs, nupe, num_examples, "
    "num_train_samples, ..., max_steps); with max_steps set, its max_steps (and the epochs and samples it "
    "implies) is replaced by this run's steps to the data the run that set it meant",
    "transformers.trainer.TRAINER_STATE_NAME: the checkpoint's trainer_state.json, whose global_step and "
    "max_steps say whether the saved run had steps left",
)
"""Every place the integration touches transformers' internals, one line each (the code of each is in this
module); the integration runs on ``TESTED_TRANSFORMERS`` only, unless forced."""

TRAINER_STATE_FILE = "trainer_state.json"  # TOUCH POINT: transformers.trainer.TRAINER_STATE_NAME (checked in tests)


def _release(text: str) -> tuple[int, ...] | None:
    parts = text.split(".")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        return None  # pre-releases, dev and local builds are not a tested version
    return tuple(int(p) for p in parts)


def installed_version() -> str:
    return importlib.metadata.version("transformers")


def version_in_range(version: str) -> bool:
    """Whether ``version`` is a final release within ``TESTED_TRANSFORMERS``."""
    found, low, high = _release(version), _release(TESTED_TRANSFORMERS[0]), _release(TESTED_TRANSFORMERS[1])
    assert low is not None and high is not None
    return found is not None and low <= found < high


def check_version(force: bool) -> str:
    """The installed transformers version, refused (``RuntimeError``) outside the tested range."""
    version = installed_version()
    if version_in_range(version):
        return version
    low, high = TESTED_TRANSFORMERS
    if not force:
        raise RuntimeError(refusal(
            "shufflepoint.integrations.transformers", Plain(f"transformers {version}"),
            f"a tested version, {low} up to (not including) {high}",
            f"install a tested version (pip install 'transformers>={low},<{high}'), or pass force_version=True to "
            "the Trainer to try anyway",
            why="it overrides Trainer internals that change between releases, so an untested version could resume "
            "silently wrong"))
    warnings.warn(
        f"shufflepoint Trainer on transformers {version}, outside the tested range {low} to {high} "
        f"(exclusive): exact resume is not guaranteed; run `shufflepoint audit` on your script.",
        ResumeWarning, stacklevel=3,
    )
    return version


def has_resume_hook(version: str) -> bool:
    """Whether this Trainer asks ``get_resumed_dataloader`` (5.25 on) or calls ``skip_first_batches``."""
    found = _release(version)
    return found is not None and found >= RESUME_HOOK_SINCE


@contextlib.contextmanager
def skip_first_batches_passes(is_ours: Callable[[Any], bool], check: Callable[[Any, int], None]) -> Iterator[None]:
    """While training on a transformers < 5.25, let ``skip_first_batches`` return our loader as it is.

    TOUCH POINT: transformers.trainer.skip_first_batches, the name ``_inner_training_loop`` calls
    (imported there from accelerate). Restored on exit, even on error.
    """
    import transformers.trainer as trainer_module

    name = "skip_first_batches"
    original = vars(trainer_module)[name]

    @functools.wraps(original)
    def skip_first_batches(dataloader: Any, num_batches: int = 0) -> Any:
        if is_ours(dataloader):
            check(dataloader, num_batches)
            return dataloader
        return original(dataloader, num_batches)

    setattr(trainer_module, name, skip_first_batches)
    try:
        yield
    finally:
        setattr(trainer_module, name, original)


def add_first_callback(trainer: Any, callback: Any) -> None:
    """Add ``callback`` before every callback the Trainer has (``add_callback`` appends, after those passed to
    the constructor): the handler calls them in list order."""
    trainer.callback_handler.callbacks.insert(0, callback)  # TOUCH POINT: CallbackHandler.callbacks


def without_unused_columns(trainer: Any, dataset: Any) -> tuple[Any, Any]:
    """(dataset, collator) with the columns the model's forward does not take removed, as
    ``Trainer._get_dataloader`` does: from a ``datasets.Dataset`` itself, else in the collator."""
    try:
        import datasets
    except ImportError:
        datasets = None
    # TOUCH POINT: Trainer._remove_unused_columns / Trainer._get_collator_with_removed_columns.
    if datasets is not None and isinstance(dataset, datasets.Dataset):
        return trainer._remove_unused_columns(dataset, description="Training"), trainer.data_collator  # private: TOUCH
    return dataset, trainer._get_collator_with_removed_columns(  # private: TOUCH POINT above
        trainer.data_collator, description="Training")


def worker_init(args: Any) -> Any:
    """The ``worker_init_fn`` ``Trainer._get_dataloader`` gives a training loader."""
    from transformers.trainer_utils import seed_worker  # TOUCH POINT: its (worker_id, num_workers, rank)

    return functools.partial(seed_worker, num_workers=args.dataloader_num_workers, rank=args.process_index)


def output_dir(trainer: Any, trial: Any) -> str:
    """Where ``_save_checkpoint`` puts checkpoint-N folders (a hyperparameter search's run folder)."""
    found: str = trainer._get_output_dir(trial=trial)  # private: TOUCH POINT, Trainer._get_output_dir
    return found


def checkpoint_folder_name(global_step: int) -> str:
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

    return f"{PREFIX_CHECKPOINT_DIR}-{global_step}"


def last_checkpoint(output_dir: str) -> str | None:
    from transformers.trainer_utils import get_last_checkpoint

    found: str | None = get_last_checkpoint(output_dir)  # type: ignore[no-untyped-call]
    return found
