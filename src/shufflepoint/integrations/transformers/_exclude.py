"""``ExcludeSamples``: the Trainer's way to ``loader.exclude`` (issue 26): drop samples from a step on.

A callback, so that it works with ``Trainer`` and with any ``ResumableTrainerMixin`` subclass
without touching either: it calls ``exclude`` on the train loader the Trainer hands its callbacks.
The loader's state, written into every checkpoint, keeps what was excluded, so a resumed run goes
on without those samples even when the callback is not passed again (passing it again is harmless:
excluding an index twice changes nothing).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import transformers

from shufflepoint._core.exclusion import Exclusion
from shufflepoint._errors import Plain, refusal
from shufflepoint._loading.loader import DataLoader
from shufflepoint._order import check_int


class ExcludeSamples(transformers.TrainerCallback):
    """Never train on these dataset indices again, from optimizer step ``from_step`` on.

    ``from_step=0`` (the default) excludes them before the first batch; a later step excludes them
    once the Trainer's ``global_step`` reaches it, from the next batch on (a resumed run past it
    excludes them at once). To rerun without a bad stretch of steps, exclude what ``loader.which``
    returned for them and resume from the checkpoint before it::

        trainer = Trainer(model=model, args=args, train_dataset=dataset,
                          callbacks=[ExcludeSamples(bad_indices)])
        trainer.train(resume_from_checkpoint="out/checkpoint-12000")

    Needs a shufflepoint Trainer (its train loader is a ``shufflepoint.DataLoader``; TypeError otherwise).
    """

    def __init__(self, indices: Any, *, from_step: int = 0) -> None:
        values = Exclusion.from_indices(indices, 2**62).indices()  # types and signs checked now, n at the loader
        self.indices: np.ndarray = values
        self.from_step = check_int("from_step", from_step, 0, 2**62)
        self.applied = False

    def on_train_begin(self, args: Any, state: Any, control: Any, train_dataloader: Any = None,
                       **kwargs: Any) -> None:
        """Exclude at the start of training when ``from_step`` is reached already (0, or a resume past it)."""
        self._apply(state, train_dataloader)

    def on_step_end(self, args: Any, state: Any, control: Any, train_dataloader: Any = None, **kwargs: Any) -> None:
        """Exclude after the optimizer step that reaches ``from_step``, once."""
        self._apply(state, train_dataloader)

    def _apply(self, state: Any, loader: Any) -> None:
        if self.applied or state.global_step < self.from_step:
            return
        if not isinstance(loader, DataLoader):
            raise TypeError(refusal(
                "ExcludeSamples", Plain(f"a {type(loader).__name__} as the Trainer's train loader"),
                "a shufflepoint.DataLoader, which can skip samples",
                "use shufflepoint.integrations.transformers.Trainer (or ResumableTrainerMixin)"))
        loader.exclude(self.indices)
        self.applied = True
