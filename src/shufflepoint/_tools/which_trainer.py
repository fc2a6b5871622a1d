"""An HF Trainer's optimizer step -> the loader steps (batches per rank) it trained on. Pure arithmetic.

``loader.which(step)`` counts the batches each rank received since the run began. The Trainer counts
optimizer steps, each ``GA`` batches (gradient accumulation), numbered inside each epoch's cut
(``_core/trainer_placement.py``)::

    nupe          = ceil(L / GA)                      updates per epoch, L batches per rank per epoch
    update u      = the u-th optimizer step (global_step is u after it)
                  = epoch E = (u - 1) // nupe, its batches [j * GA, min((j + 1) * GA, L)), j = (u - 1) % nupe

A *leg* of the run (its steps read with one layout from one place, see ``_core/history``) begins at loader step
``s`` with ``R`` of its epoch's ``L`` batches left; the Trainer places itself there (``place``) at
``global_step g`` with ``k = L - R`` batches of the epoch counted as done. In that leg, batch
``kk`` of epoch ``E`` is loader step ``s + (E - E0) * L + kk - k``, and update ``u > g`` is whole
but for a first one cut short at ``k`` (a resume between two optimizer steps).

Worked (``tests/tools/test_which_trainer.py`` pins it): 64 samples, GA 1; 2 ranks x batch 4 (L 8)
for 11 steps, then 1 rank x batch 4 (L 16). Leg 1 begins at loader step 11, epoch 1 with 10 of 16
batches left: the Trainer jumps from global_step 11 to 22. Update 11 is loader step 10 (leg 0);
update 23 is loader step 11 (leg 1); updates 12-22 never ran.

A resize to more ranks moves ``global_step`` back: an update number may then have run twice, once
per leg; every run of it is returned, the latest first.

Words: docs/glossary.md (optimizer step, step, leg, layout, epoch).
"""

from __future__ import annotations

from dataclasses import dataclass

from shufflepoint._core.trainer_placement import place


@dataclass(frozen=True)
class Leg:
    """Where a leg begins: its first loader step, the epoch there, the leg's batches per rank per
    epoch ``L`` and how many of the epoch's batches were left at its start."""

    step: int
    epoch: int
    batches_per_epoch: int
    batches_left: int


@dataclass(frozen=True)
class Ran:
    """One run of an optimizer step: loader steps ``[first, stop)``, in leg ``leg``."""

    leg: int
    first: int
    stop: int
    epoch: int


def _run_in_leg(number: int, legs: list[Leg], update: int, accumulation: int, end: int | None) -> Ran | None:
    leg = legs[number]
    placed = place(leg.epoch, leg.batches_per_epoch, leg.batches_left, accumulation)
    if update <= placed.global_step:
        return None
    nupe, length = placed.updates_per_epoch, leg.batches_per_epoch
    epoch, j = divmod(update - 1, nupe)
    begin, finish = j * accumulation, min((j + 1) * accumulation, length)
    if epoch == placed.epoch:
        begin = max(begin, placed.batches_done)
    offset = leg.step + (epoch - placed.epoch) * length - placed.batches_done
    first, stop = offset + begin, offset + finish
    if end is not None and first >= end:
        return None
    return Ran(number, first, stop if end is None else min(stop, end), epoch)


def loader_steps(update: int, legs: list[Leg], accumulation: int) -> list[Ran]:
    """Every run of optimizer step ``update`` (>= 1), the latest first; ``[]`` when it never ran.

    >>> legs = [Leg(0, 0, 8, 8), Leg(11, 1, 16, 10)]
    >>> loader_steps(11, legs, 1), loader_steps(23, legs, 1), loader_steps(15, legs, 1)
    ([Ran(leg=0, first=10, stop=11, epoch=1)], [Ran(leg=1, first=11, stop=12, epoch=1)], [])
    """
    if isinstance(update, bool) or not isinstance(update, int) or update < 1:
        raise ValueError(f"--step: found {update!r}, expected an optimizer step >= 1 (the Trainer's global_step "
                         "after that step)")
    found = []
    for number in reversed(range(len(legs))):
        end = legs[number + 1].step if number + 1 < len(legs) else None
        ran = _run_in_leg(number, legs, update, accumulation, end)
        if ran is not None:
            found.append(ran)
    return found


def trainer_step_at(step: int, legs: list[Leg], accumulation: int) -> int:
    """The Trainer's ``global_step`` once every rank has received ``step`` batches, at an optimizer-step
    boundary of the last leg (where a checkpoint is saved): what ``trainer_state.json`` says then, so a
    wrong ``accumulation`` is caught before anything is answered.

    >>> trainer_step_at(12, [Leg(0, 0, 8, 8), Leg(11, 1, 16, 10)], 1)
    23
    """
    leg = legs[-1]
    placed = place(leg.epoch, leg.batches_per_epoch, leg.batches_left, accumulation)
    done = step - leg.step
    if done <= 0:
        return placed.global_step
    epochs, batches = divmod(placed.batches_done + done, leg.batches_per_epoch)
    return (placed.epoch + epochs) * placed.updates_per_epoch + -(-batches // accumulation)
