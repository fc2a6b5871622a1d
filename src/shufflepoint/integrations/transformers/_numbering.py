"""The run's own optimizer-step numbers, and the record of what each one trained (``shufflepoint_run.json``).

A resume places the data by the loader's state, in the new run's cut of the epoch (``_core/trainer_placement``):
on another world size, batch size or accumulation that place is another step number than the saved
``global_step`` (lower on more processes). The Trainer's own arithmetic (epochs trained, batches to skip), the
learning-rate schedule and ``max_steps`` keep following that data step; ``global_step`` does not: it goes on
from the saved one, so the numbers of a run never decrease and no ``checkpoint-N`` is written twice::

    offset       = saved global_step - placed step     (any sign; 0 on the same layout)
    global_step  = placed step + offset                (the run's count: saved, +1 per optimizer step)
    max_steps    = the data's max_steps + offset       (the run ends where the data ends)

Every optimizer step's loader steps are recorded as they run, in a few spans (``_core/trainer_steps``), carried
from checkpoint to checkpoint, so ``shufflepoint which CKPT --step N`` answers every step of the run, before and
after each resize, from the newest checkpoint.

Words: docs/glossary.md (optimizer step, step, place, layout).
"""

from __future__ import annotations

import json
import os
import warnings
from dataclasses import dataclass
from typing import Any

from shufflepoint._core.trainer_steps import Span, Steps, recorded
from shufflepoint._errors import Plain, ResumeWarning, StateError, refusal

# The saved run's gradient accumulation (TrainerState does not keep it) and its steps' record.
RUN_FILE = "shufflepoint_run.json"


@dataclass
class Numbering:
    """Where one ``train()`` call stands in the run's numbering (see the module)."""

    spans: tuple[Span, ...] = ()
    offset: int = 0  # the run's global_step minus the data's (placed) step
    saved_step: int | None = None  # the checkpoint's global_step, to number the run from (None: a fresh run)
    numbered: bool = False  # global_step already moved from the placed step to the run's
    mark: int | None = None  # the loader step the next optimizer step's batches begin at
    new: bool = True  # the next optimizer step begins a span (the first of this train())

    def number(self, state: Any) -> bool:
        """Move ``state.global_step`` (and ``max_steps``) from the placed step to the run's; True if it moved now."""
        if self.numbered or self.saved_step is None:
            return False
        state.global_step, state.max_steps = self.saved_step, state.max_steps + self.offset
        self.numbered = True
        return True

    def stepped(self, update: int, loader: Any, accumulation: int) -> None:
        """Optimizer step ``update`` has just run: record the loader steps it trained."""
        end = loader.step
        if self.mark is None or end < self.mark:
            raise RuntimeError(f"shufflepoint Trainer: optimizer step {update} ended at loader step {end}, before "
                               f"{self.mark}: the loader was moved outside the Trainer's loop")
        self.spans = recorded(self.spans, update, self.mark, end, left=loader.batches_left(), per_epoch=len(loader),
                              accumulation=accumulation, new=self.new)
        self.mark, self.new = end, False

    def to_json(self, accumulation: int) -> dict[str, Any]:
        return {"gradient_accumulation_steps": accumulation, "steps": Steps(self.spans).to_json()}


def read_json(path: str) -> Any:
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def write_json(path: str, value: Any) -> None:
    with open(f"{path}.tmp{os.getpid()}", "w") as f:
        json.dump(value, f)
    os.replace(f"{path}.tmp{os.getpid()}", path)


def saved_numbering(folder: str, saved_step: int, placed_step: int, loader_step: int) -> Numbering:
    """The numbering of a run resumed from ``folder``: on from ``saved_step``, its record carried over when it
    ends where the loader's state does (else started afresh, with a ``ResumeWarning``: ``which`` then refuses
    the steps before this resume)."""
    path = os.path.join(folder, RUN_FILE)
    found = read_json(path)
    spans: tuple[Span, ...] = ()
    if isinstance(found, dict) and "steps" in found:
        steps = Steps.read(found["steps"], path)
        ends = (steps.batches(saved_step, saved_step)[1] if steps.spans and steps.spans[0].step <= saved_step
                and steps.spans[-1].step <= saved_step else None)
        if ends == loader_step:
            spans = steps.spans
        elif steps.spans:
            warnings.warn(f"{path}: its record of the run's steps ends at loader step {ends} at global_step "
                          f"{saved_step}, but the loader's state is at {loader_step}: the record is not this "
                          "checkpoint's; shufflepoint which will not answer the steps before this resume",
                          ResumeWarning, stacklevel=3)
    elif found is not None and not isinstance(found, dict):
        raise StateError(refusal(path, Plain(type(found).__name__), "a JSON object", "use another checkpoint",
                                 why="the file is damaged or not shufflepoint's"))
    return Numbering(spans, saved_step - placed_step, saved_step)
