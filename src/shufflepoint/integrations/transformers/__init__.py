"""Exact, O(1), elastic resume for the Hugging Face Trainer: ``shufflepoint.integrations.transformers.Trainer``.

A drop-in for ``transformers.Trainer`` (``pip install 'shufflepoint[transformers]'``)::

    from shufflepoint.integrations.transformers import Trainer
    trainer = Trainer(model=model, args=args, train_dataset=dataset, seed_per_sample=True)
    trainer.train(resume_from_checkpoint=True)   # kill it anywhere; this line continues exactly

- The train loader is a ``shufflepoint.DataLoader`` built from what the Trainer would use (per-device
  batch size, collator with unused columns removed, ``dataloader_*`` settings, ``drop_last``, seed
  = ``data_seed`` or ``seed``). It shards over the ranks itself and never goes through
  ``accelerator.prepare``; the Trainer moves each batch to the device.
- Every checkpoint folder gets ``shufflepoint_loader.json``: the loader's state, a few integers,
  the same on every rank (written by the ranks that save, ``args.should_save``); with ``max_steps``
  set, also ``shufflepoint_budget.json``: where those steps end in the data (``_budget``).
- On ``resume_from_checkpoint`` that state places the data (a seek: no batch is read or replayed),
  and the Trainer's loop is placed at the data's step in this run's cut of the epoch
  (``_core/trainer_placement``), while ``global_step`` goes on from the saved one (``_numbering``: the
  run's steps are numbered once each; each one's loader steps are recorded for ``shufflepoint which``):
  on another world size, per-device batch size or gradient accumulation the
  interrupted epoch trains every sample once, ``num_train_epochs`` still counts epochs of data,
  ``max_steps`` keeps meaning the data of the run that set it (each resumed run trains as many of its
  own steps as reach it), and a ``LambdaLR`` schedule is continued at the placed step (the
  fraction of the data trained). transformers >= 5.25 asks ``get_resumed_dataloader``, which returns the placed loader;
  older versions call ``skip_first_batches``, replaced during ``train()`` for our loader only.

``ExcludeSamples(indices, from_step=...)``, a callback, drops samples from the run (``loader.exclude``).

``ResumableTrainerMixin`` gives any Trainer subclass the same (TRL's ``SFTTrainer``): put it first; a
class that lists a Trainer before it is refused with a ``TypeError`` when it is created.
Every touch point on transformers' internals is in ``_touch`` (``TOUCH_POINTS``), checked against
``TESTED_TRANSFORMERS``.

Words: docs/glossary.md (optimizer step, step, resume, elastic, state).
"""

import transformers

from shufflepoint._core.trainer_placement import Placement, place
from shufflepoint.integrations.transformers._exclude import ExcludeSamples
from shufflepoint.integrations.transformers._touch import TESTED_TRANSFORMERS, TOUCH_POINTS, version_in_range
from shufflepoint.integrations.transformers._trainer import BUDGET_FILE, LOADER_STATE_FILE, ResumableTrainerMixin


class Trainer(ResumableTrainerMixin, transformers.Trainer):
    """``transformers.Trainer`` with a ``shufflepoint.DataLoader``: exact, O(1), elastic resume.

    Takes every argument ``transformers.Trainer`` takes, plus ``seed_per_sample``, ``transform``,
    ``order`` and ``force_version`` (see ``ResumableTrainerMixin``).
    """


__all__ = ["BUDGET_FILE", "LOADER_STATE_FILE", "TESTED_TRANSFORMERS", "TOUCH_POINTS", "ExcludeSamples", "Placement",
           "ResumableTrainerMixin", "Trainer", "place", "version_in_range"]
