"""An HF Trainer checkpoint's optimizer step -> the loader steps it trained, for ``shufflepoint which``.

Since 0.5 the Trainer records what every optimizer step of the run trained (``shufflepoint_run.json``,
``steps``: a few spans, ``_core/trainer_steps``), carried from checkpoint to checkpoint across every resume, so
the newest checkpoint answers every step of the run: a step before a resize with the layout that ran it.
Its ``global_step`` never decreases, so a step number names one optimizer step. The record's end is checked
against the loader's state before anything is answered.

An older checkpoint (no record) is answered by the closed form of ``which_trainer`` only where that is
exact: one layout and no exclusion, or resizes whose renumbering left every step number with one run.
Anything else is refused, never answered wrong.

Words: docs/glossary.md (optimizer step, step, leg, layout, exclusion).
"""

from __future__ import annotations

from typing import Any

from shufflepoint._core.trainer_steps import Steps, StepsError
from shufflepoint._errors import StateError

__all__ = ["StepsError", "trainer_loader_steps"]


def _recorded_accumulation(run: dict[str, Any], given: int | None) -> int | None:
    recorded = run.get("gradient_accumulation_steps")
    if recorded is not None and (isinstance(recorded, bool) or not isinstance(recorded, int) or recorded < 1):
        raise StepsError(f"shufflepoint_run.json: gradient_accumulation_steps: found {recorded!r}, expected an "
                         "integer >= 1; the file is damaged")
    if given is not None and recorded is not None and given != recorded:
        raise StepsError(f"--accumulation: found {given}, but the checkpoint's run trained with "
                         f"gradient_accumulation_steps={recorded} (shufflepoint_run.json); leave --accumulation out "
                         "to use it")
    return recorded if recorded is not None else given


def trainer_loader_steps(found: Any, state: dict[str, Any], update: int, accumulation: int | None) -> list[int]:
    """The loader steps optimizer step ``update`` trained, from ``found`` (an HF Trainer checkpoint whose loaded
    loader state is ``state``); ``StepsError`` for a step that cannot be placed."""
    if isinstance(update, bool) or not isinstance(update, int) or update < 1:
        raise StepsError(f"--step: found {update!r}, expected an optimizer step >= 1 (an HF Trainer checkpoint "
                         "numbers its steps as global_step does: the first is 1)")
    run = found.run or {}
    given = _recorded_accumulation(run, accumulation)
    last = found.trainer_step
    if "steps" not in run:
        return _without_record(state, update, given or 1, last)
    try:
        steps = Steps.read(run["steps"], "shufflepoint_run.json")
    except StateError as error:
        raise StepsError(str(error)) from None
    if steps.spans and steps.spans[0].step <= last and steps.spans[-1].step <= last:
        ends = steps.batches(last, last)[1]
        if ends != state["steps"]:
            raise StepsError(f"shufflepoint_run.json: its record of the steps ends at loader step {ends} at "
                             f"global_step {last}, but the loader's state is at {state['steps']}: the files are not "
                             "of one checkpoint")
    first, stop = steps.batches(update, last)
    return list(range(first, stop))


def _without_record(state: dict[str, Any], update: int, accumulation: int, last: int | None) -> list[int]:
    """A checkpoint written before the record: the closed form, where it is exact (see the module)."""
    from shufflepoint._tools.which_legs import a_layout_changed_on_one_world, legs_of
    from shufflepoint._tools.which_trainer import loader_steps, trainer_step_at

    old = "this checkpoint was written before shufflepoint recorded the Trainer's steps (0.5)"
    if state.get("excluded"):
        raise StepsError(f"--step {update}: {old}, and its run excluded samples, which the Trainer's step numbers "
                         "do not follow in closed form; resume from it and ask a checkpoint written by 0.5")
    legs = legs_of(state)
    expected = trainer_step_at(state["steps"], legs, accumulation)
    if last is not None and expected != last:
        raise StepsError(
            f"--accumulation: found {accumulation}, but with it the checkpoint's loader position "
            f"({state['steps']} batches per rank) is optimizer step {expected}, and trainer_state.json says "
            f"{last}. Pass the run's gradient_accumulation_steps as --accumulation.")
    if last is not None and update > last:
        raise StepsError(f"--step: found {update}, but this checkpoint was saved at optimizer step {last}: a later "
                         "step had not run then; ask a later checkpoint of the run")
    if a_layout_changed_on_one_world(state):
        raise StepsError(f"--step {update}: {old}, and its batch size changed on one world size (inside a run, "
                         "which keeps its step numbers, or at a resume, which renumbered them): the closed form "
                         "cannot tell which")
    runs = loader_steps(update, legs, accumulation)
    if not runs:
        raise StepsError(f"--step {update}: {old}; the Trainer then renumbered its steps at a resize, and this "
                         f"number never ran (layouts begin at loader steps {[leg.step for leg in legs]})")
    if len(runs) > 1:
        raise StepsError(f"--step {update}: {old}; the Trainer then renumbered its steps at a resize, and this "
                         f"number ran {len(runs)} times, with other samples each time")
    return list(range(runs[0].first, runs[0].stop))
