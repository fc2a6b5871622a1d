"""The Trainer run's own optimizer-step numbers -> the loader steps each one trained. Pure arithmetic, in _core
so that ``shufflepoint which`` reads it without importing transformers.

A Trainer run counts optimizer steps (``global_step``, 1-based: step ``u`` is the ``u``-th optimizer step) and
keeps counting across every resume, on any world size or accumulation. The loader counts ``loader steps``:
batches each rank received since the run began (``DataLoader.step``). Each optimizer step trains a stretch
of consecutive loader steps: ``GA`` of them, fewer at an epoch's end or after a resume between two optimizer
steps. The record of a run is a short list of spans; a span says where one optimizer step's batches begin
and how the following ones fall::

    Span(step=u0, loader_step=s0, first=f, left=R, per_epoch=L, accumulation=GA)
    u0              : loader steps [s0, s0 + f)
    then            : the R batches left of that epoch, GA at a time (the last stretch shorter),
                      then epochs of L batches, GA at a time, each epoch's last stretch shorter

Worked (pinned in ``tests/tools/test_trainer_steps.py``): 1 rank x batch 4 over 35 samples (9 batches an
epoch), GA 2, from the start: ``Span(1, 0, 2, 7, 9, 2)``: step 1 = loader steps [0, 2), step 5 = [8, 9)
(the epoch's short last step), step 6 = [9, 11).

The Trainer integration writes a new span whenever the step just trained is not the one the last span
foretells (a resume, an exclusion, a batch-size change), so every recorded step is the one that ran: the
list grows with those events, not with the steps or the epochs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shufflepoint._errors import Plain, StateError, refusal

_NOT_OURS = "the file is damaged or not shufflepoint's; use another checkpoint"

FIELDS = ("step", "loader_step", "first", "left", "per_epoch", "accumulation")


@dataclass(frozen=True)
class Span:
    """Optimizer step ``step`` trained loader steps ``[loader_step, loader_step + first)``; the steps after
    it take the ``left`` batches left of that epoch, then epochs of ``per_epoch``, ``accumulation`` at a time."""

    step: int
    loader_step: int
    first: int
    left: int
    per_epoch: int
    accumulation: int

    def batches(self, update: int) -> tuple[int, int]:
        """``(first, stop)``: the loader steps optimizer step ``update`` (>= ``step``) trained, as foretold.

        >>> Span(1, 0, 2, 7, 9, 2).batches(5), Span(1, 0, 2, 7, 9, 2).batches(6)
        ((8, 9), (9, 11))
        """
        if update == self.step:
            return self.loader_step, self.loader_step + self.first
        at, later, ga = self.loader_step + self.first, update - self.step - 1, self.accumulation
        in_this_epoch = -(-self.left // ga)
        if later < in_this_epoch:
            return at + later * ga, min(at + (later + 1) * ga, at + self.left)
        at, later = at + self.left, later - in_this_epoch
        per_epoch = max(-(-self.per_epoch // ga), 1)
        epochs, index = divmod(later, per_epoch)
        begin = at + epochs * self.per_epoch
        return begin + index * ga, min(begin + (index + 1) * ga, begin + self.per_epoch)

    def to_json(self) -> list[int]:
        return [getattr(self, name) for name in FIELDS]


class StepsError(ValueError):
    """An optimizer step the record cannot place: never run, or not recorded."""


@dataclass(frozen=True)
class Steps:
    """The spans of a run, in step order; ``Steps.read`` checks one written by the Trainer integration."""

    spans: tuple[Span, ...]

    def batches(self, update: int, last: int) -> tuple[int, int]:
        """The loader steps ``[first, stop)`` optimizer step ``update`` trained, for a record that ends at the
        checkpoint's ``global_step`` ``last``; ``StepsError`` for a step it cannot place.

        >>> Steps((Span(1, 0, 2, 7, 9, 2), Span(8, 13, 1, 0, 12, 1))).batches(9, last=10)
        (14, 15)
        """
        if isinstance(update, bool) or not isinstance(update, int) or update < 1:
            raise StepsError(f"--step: found {update!r}, expected an optimizer step >= 1 (the Trainer's "
                             "global_step after it)")
        if update > last:
            raise StepsError(f"--step: found {update}, but this checkpoint was saved at optimizer step {last}: "
                             "a later step had not run then; ask a later checkpoint of the run")
        spans = [span for span in self.spans if span.step <= update]
        if not spans:
            first = self.spans[0].step if self.spans else last + 1
            raise StepsError(f"--step: found {update}, but the record of this run's steps begins at step {first}: "
                             "the run resumed from a checkpoint written before shufflepoint recorded the Trainer's "
                             "steps (0.5), so the steps before it cannot be placed")
        return spans[-1].batches(update)

    def to_json(self) -> list[list[int]]:
        return [span.to_json() for span in self.spans]

    @classmethod
    def read(cls, value: Any, source: str) -> Steps:
        """The record in ``value`` (a list of spans), or ``StateError`` naming what is wrong."""
        if not isinstance(value, list):
            raise StateError(refusal(f"{source}: steps", Plain(type(value).__name__), "a list of spans "
                                     f"[{', '.join(FIELDS)}]", _NOT_OURS))
        spans: list[Span] = []
        for number, entry in enumerate(value):
            if not isinstance(entry, list) or len(entry) != len(FIELDS) or not all(
                    isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in entry):
                raise StateError(refusal(f"{source}: steps[{number}]", entry, f"{len(FIELDS)} integers >= 0 "
                                         f"[{', '.join(FIELDS)}]", _NOT_OURS))
            span = Span(*entry)
            if span.step < 1 or span.accumulation < 1 or (spans and (
                    span.step <= spans[-1].step or span.loader_step != spans[-1].batches(span.step - 1)[1])):
                raise StateError(refusal(f"{source}: steps[{number}]", entry, "a span that begins at step >= 1, "
                                         "after the span before it, where that one's batches end, with accumulation "
                                         ">= 1", _NOT_OURS))
            spans.append(span)
        return cls(tuple(spans))


def recorded(spans: tuple[Span, ...], update: int, begin: int, end: int, *, left: int, per_epoch: int,
             accumulation: int, new: bool) -> tuple[Span, ...]:
    """``spans`` once optimizer step ``update`` trained loader steps ``[begin, end)``: unchanged where the last
    span foretells it, else with a span that begins there (always where ``new``: the first step of a train()).
    ``left`` and ``per_epoch``: the loader's batches left of its epoch after ``end`` and of a whole epoch.

    >>> first = recorded((), 1, 0, 2, left=7, per_epoch=9, accumulation=2, new=True)
    >>> recorded(first, 2, 2, 4, left=5, per_epoch=9, accumulation=2, new=False) == first
    True
    """
    if not new and spans and spans[-1].step < update and spans[-1].batches(update) == (begin, end):
        return spans
    return (*spans, Span(update, begin, end - begin, left, per_epoch, accumulation))
