"""``ignore_data_skip=True`` honoured as the stock Trainer does: a resume starts the checkpoint's epoch from its first
batch, while ``global_step``, the schedule and ``max_steps`` go on from the checkpoint.

Stock: ``epochs_trained = global_step // num_update_steps_per_epoch`` and no batch skipped. Here the epoch is the
loader state's (a finished epoch is the next one, where nothing repeats), and the loader is seeked to its start. It
is also the way to continue on a dataset whose length changed, which an exact resume refuses: the checkpoint's
epoch restarts in the new dataset's order, its samples trained before the checkpoint may be trained again, and a
``ResumeWarning`` says how many. Nothing is exact about it: the warning says so.

Words: docs/glossary.md (epoch, cursor, resume, state).
"""

from __future__ import annotations

import warnings
from typing import Any

from shufflepoint._core.plan import Layout
from shufflepoint._core.trainer_placement import Placement, place, updates_per_epoch
from shufflepoint._errors import Plain, ResumeWarning, StateError, refusal


def restart_epoch(loader: Any, state: dict[str, Any], path: str, global_step: int, accumulation: int) -> Placement:
    """Seek ``loader`` to the first batch of the epoch ``state`` (read from ``path``) was in, and place the
    Trainer there at the checkpoint's own ``global_step`` (the stock Trainer's numbers)."""
    saved_n, now_n = _field(state, "n", path), int(loader.state_dict()["n"])
    if saved_n == now_n:  # the same data: its exclusions and history carry over
        loader.load_state_dict(state)
        epoch = place(loader.epoch, len(loader), loader.batches_left(), accumulation).epoch
        again = loader.cursor if epoch == loader.epoch else 0
        changed = ""
    else:
        epoch, again = _epoch_of(state, path, saved_n)
        excluded = len(state.get("excluded") or [])
        changed = (f"; the dataset has {now_n} samples now, the checkpoint's {saved_n}: epoch {epoch} is this "
                   "dataset's order" + (f", and the checkpoint's {excluded} excluded ranges are dropped (they "
                                        "name the old dataset's indices)" if excluded else ""))
    loader.seek(epoch, 0)
    if again or changed:
        warnings.warn(
            f"ignore_data_skip=True: the data restarts at the first batch of epoch {epoch}, while global_step "
            f"goes on from {global_step}{changed}. Up to {again} samples of epoch {epoch} the saved run trained "
            "before its checkpoint may be trained again, and as many steps as repeat are missing at the run's "
            "end (max_steps counts steps); shufflepoint which answers this run's steps from here on only",
            ResumeWarning, stacklevel=4)
    return Placement(epoch, 0, global_step, updates_per_epoch(len(loader), accumulation), accumulation)


def refuse_another_length(loader: Any, state: dict[str, Any], path: str) -> None:
    """An exact resume of a dataset whose length changed is refused, naming the Trainer's way on."""
    saved_n, now_n = _field(state, "n", path), int(loader.state_dict()["n"])
    if saved_n != now_n:
        epoch, _ = _epoch_of(state, path, saved_n)  # a checkpoint at an epoch's end restarts the next one
        raise StateError(refusal(
            "state field 'n'", saved_n, f"{now_n} (len(dataset) now)",
            "resume with the dataset the checkpoint was written with; or, to go on with this one, pass "
            f"ignore_data_skip=True: epoch {epoch} restarts in this dataset's order, "
            "and a ResumeWarning says which samples may be trained again",
            why=f"the dataset changed length since the checkpoint ({path})"))


def _epoch_of(state: dict[str, Any], path: str, saved_n: int) -> tuple[int, int]:
    """(the epoch to restart, the samples of it trained before the checkpoint) from a state of another dataset:
    its epoch, or the next one where its cursor had reached the epoch's end."""
    epoch, cursor = _field(state, "epoch", path), _field(state, "cursor", path)
    excluded = sum(int(stop) - int(start) for start, stop in state.get("excluded") or [])
    layout = Layout(max(saved_n - excluded, 0), _field(state, "world_size", path), _field(state, "batch_size", path),
                    bool(state.get("drop_last")))
    if cursor >= layout.n or layout.batches_per_rank(min(cursor, layout.n)) == 0:
        return epoch + 1, 0
    return epoch, cursor


def _field(state: dict[str, Any], name: str, path: str) -> int:
    value = state.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise StateError(refusal(f"{path}: field {name!r}", Plain(repr(value)), "an integer >= 0",
                                 "use another checkpoint", why="the file is damaged or not shufflepoint's"))
    return value
