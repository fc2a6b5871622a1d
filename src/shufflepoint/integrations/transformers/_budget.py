"""``max_steps`` as data: where the run that set it ends, and how many steps of this run reach there.

The Trainer counts ``max_steps`` in optimizer steps, and a step is ``W x B x GA`` samples of the run
that takes it (rows of ``seq_len`` tokens for ``Packed``: tokens are rows x ``seq_len``).
A resize changes the size of a step, so the same ``max_steps`` would mean other data. Here it is
turned, once, in the run that set it, into a position in the data, ``End(epoch, cursor)`` (the
loader's own coordinates: ``cursor`` positions of that epoch's global stream trained); every resumed
run then trains as many of its own steps as reach that position (under the ``spans`` deal the cursor
counts positions received, not a prefix: the budget is then an amount of the epoch)::

    set:    End = where max_steps of the setting run's steps end      (end_of)
    resume: max_steps of this run = its steps up to End               (steps_to)

Worked example (issue 25): 40 samples an epoch; ``max_steps=12`` on 2 ranks x batch 4 (5 steps an
epoch) ends 2 steps into epoch 2: ``End(2, 16)``. Stopped at step 5 (epoch 1, cursor 0) and resumed on
1 rank x batch 4 (10 steps an epoch), the loop is placed at step 10, and ``End(2, 16)`` is 4 batches
into epoch 2: ``max_steps = 2 * 10 + 4 = 24``, 14 steps of 4, the 56 samples the saved run had left.
The stock Trainer would stop at 12: 8 samples.

When ``End`` is not on a step boundary of this run, the last step is whole and trains past it; the
``overshoot`` (positions past ``End``, always less than one step) is stated by the caller.

The cuts are given as functions, ``batches -> cursor``: ``now`` from the placed position in the
resumed epoch (the loader re-deals the rest of that epoch from its cursor), ``fresh`` from an
epoch's start. Both are non-decreasing and stop growing at the epoch's end.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from shufflepoint._core.trainer_placement import Placement
from shufflepoint._errors import Plain, StateError, refusal

Cursor = Callable[[int], int]  # batches per rank -> the epoch's cursor after them
_DAMAGED = "the file is damaged or not shufflepoint's"
_DELETE = "delete it to count max_steps in this run's steps"


@dataclass(frozen=True, order=True)
class End:
    """A position in the run's data: ``cursor`` positions of epoch ``epoch``'s global stream trained."""

    epoch: int
    cursor: int


def step_size(world_size: int, batch_size: int, accumulation: int) -> str:
    """``'2 ranks x batch 4 x accumulation 1 (8 samples a step)'``: a step's size, for messages."""
    return (f"{world_size} rank{'s' if world_size != 1 else ''} x batch {batch_size} x accumulation {accumulation} "
            f"({world_size * batch_size * accumulation} samples a step)")


@dataclass(frozen=True)
class Budget:
    """``max_steps`` as the run that set it meant it: where it ends in the data, and that run's step size.
    Written to every checkpoint of a ``max_steps`` run (``shufflepoint_budget.json``), carried over by
    every resume that keeps the same ``max_steps``."""

    max_steps: int
    end: End
    world_size: int  # the run that set it: for messages, a step is world_size x batch_size x accumulation
    batch_size: int
    accumulation: int

    def describe(self) -> str:
        size = step_size(self.world_size, self.batch_size, self.accumulation)
        return f"max_steps={self.max_steps} set by a run of {size}"

    def to_json(self) -> dict[str, Any]:
        return {"max_steps": self.max_steps, "end": {"epoch": self.end.epoch, "cursor": self.end.cursor},
                "set_by": {"world_size": self.world_size, "batch_size": self.batch_size,
                           "accumulation": self.accumulation}}

    @classmethod
    def from_json(cls, value: Any, source: str) -> Budget:
        """The budget in ``value``, or ``StateError`` naming the field that is missing or wrong."""
        def field(path: str, found: Any, low: int) -> int:
            if isinstance(found, bool) or not isinstance(found, int) or found < low:
                raise StateError(refusal(f"{source}: {path}", found, f"an integer >= {low}", _DELETE, why=_DAMAGED))
            return found

        def part(parent: Any, key: str, path: str) -> Any:
            if not isinstance(parent, dict) or key not in parent:
                raise StateError(refusal(f"{source}: {path}", Plain("nothing (missing)"), "the field", _DELETE,
                                         why=_DAMAGED))
            return parent[key]

        end, set_by = part(value, "end", "end"), part(value, "set_by", "set_by")
        return cls(field("max_steps", part(value, "max_steps", "max_steps"), 1),
                   End(field("end.epoch", part(end, "epoch", "end.epoch"), 0),
                       field("end.cursor", part(end, "cursor", "end.cursor"), 0)),
                   *(field(f"set_by.{key}", part(set_by, key, f"set_by.{key}"), 1)
                     for key in ("world_size", "batch_size", "accumulation")))


@dataclass(frozen=True)
class Reach:
    """This run's ``max_steps`` for a budget, and how far its last step trains past the budget's end."""

    max_steps: int
    overshoot: int  # positions past End trained by the last, whole step (0: End is on a step boundary)


def _first_reaching(cursor_after: Cursor, target: int, most: int) -> int:
    """The fewest batches (at most ``most``) after which ``cursor_after`` is at least ``target``."""
    low, high = 0, most
    while low < high:
        middle = (low + high) // 2
        if cursor_after(middle) >= target:
            high = middle
        else:
            low = middle + 1
    return low


def end_of(max_steps: int, placement: Placement, now: Cursor, fresh: Cursor) -> End:
    """Where ``max_steps`` of this run's steps end in the data, counted from its ``placement``.

    >>> from shufflepoint._core.trainer_placement import place
    >>> start = place(0, batches_per_epoch=5, batches_left=5, accumulation=1)   # 2 ranks x 4, 40 samples
    >>> strided = lambda batches: min(8 * batches, 40)
    >>> end_of(12, start, now=strided, fresh=strided)
    End(epoch=2, cursor=16)
    """
    if max_steps <= placement.global_step:  # nothing left to train: the end is where the data stands
        return End(placement.epoch, now(0))
    epoch, steps = divmod(max_steps, placement.updates_per_epoch)
    if epoch == placement.epoch:  # steps > the placed step: their last batch lies ahead of batches_done
        return End(epoch, now(steps * placement.accumulation - placement.batches_done))
    return End(epoch, fresh(steps * placement.accumulation))


def steps_to(end: End, placement: Placement, batches_per_epoch: int, now: Cursor, fresh: Cursor) -> Reach:
    """This run's ``max_steps``: the steps from its ``placement`` until the data reaches ``end``.

    >>> from shufflepoint._core.trainer_placement import place
    >>> resumed = place(1, batches_per_epoch=10, batches_left=10, accumulation=1)  # 1 rank x 4, at epoch 1
    >>> strided = lambda batches: min(4 * batches, 40)
    >>> steps_to(End(2, 16), resumed, 10, now=strided, fresh=strided)
    Reach(max_steps=24, overshoot=0)
    """
    if end <= End(placement.epoch, now(0)):
        return Reach(placement.global_step, 0)
    # in the placed epoch, from the batches done (the first step may be short: it ends on a multiple of GA);
    # in a later one, from its start
    cursor, done = (now, placement.batches_done) if end.epoch == placement.epoch else (fresh, 0)
    batches = _first_reaching(cursor, end.cursor, batches_per_epoch - done)
    steps = -(-(done + batches) // placement.accumulation)
    trained = min(steps * placement.accumulation, batches_per_epoch) - done
    return Reach(end.epoch * placement.updates_per_epoch + steps, max(cursor(trained) - end.cursor, 0))


def refuse_training_nothing(trainer_state: Any, max_steps: int, placed_step: int, size: str, saved: Budget | None,
                            reach: Reach | None) -> None:
    """A resume placed at ``placed_step`` whose ``max_steps`` trains nothing: ``ValueError`` if the saved run
    (its ``trainer_state.json``) had steps left. ``size``: this run's step, for the message."""
    if trainer_state is None or int(trainer_state["global_step"]) >= int(trainer_state["max_steps"]):
        return
    if saved is not None and reach is not None:
        setting = (f"{saved.describe()}, which here ends at step {reach.max_steps}: "
                   f"{reach.max_steps - placed_step} steps left")
        fix = f"pass max_steps={saved.max_steps} as the saved run did, or one above {placed_step}"
    else:  # no budget recorded (an epoch-based or pre-0.4 checkpoint): max_steps counts this run's steps
        setting = "no max_steps budget recorded, so max_steps counts this run's steps"
        fix = f"pass a max_steps above {placed_step}"
    raise ValueError(
        "max_steps: this resume would train nothing, while the saved run had steps left.\n"
        f"  found: max_steps={max_steps}, and the resume is placed at step {placed_step} of the data "
        f"(steps of {size})\n"
        f"  saved: stopped at step {trainer_state['global_step']} of {trainer_state['max_steps']}; {setting}\n"
        "  likely cause: max_steps was changed for the new world size; it need not be: the same max_steps "
        "keeps meaning the data of the run that set it\n"
        f"  fix: {fix}")
