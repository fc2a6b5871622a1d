"""The bucket deal (``DataLoader(buckets=keys)``): every per-rank batch holds samples of one bucket, the
buckets' batches interleaved evenly over the epoch.

What sets it apart from the other deals, answered here for the loader, the history and the state (the
questions: ``_core/cut.py``; the arithmetic: ``buckets.py``):

- its cuts need the keys (a ``BucketTable``), the seed and the epoch: a deal built without keys (a state's
  name read alone, as ``shufflepoint which`` reads a history) refuses to cut;
- its position is the epoch's ``BucketSegments``, one ``(batch_size, slots)`` per batch size it was read at,
  kept in the state's ``segments`` (and a history entry's start); the cursor is their sum of batch_size x slots
  (at most n: with ``drop_last=False`` padded units may hand out more);
- its cuts read ``drop_last`` from the layout (False: each bucket's last unit and the last step padded; True:
  dropped), and a segment means another thing under each, so ``drop_last`` changes only where an epoch begins:
  a state saved inside an epoch with the other one is refused by name (``check_state``);
- the state records the keys' fingerprint (``buckets``); every batch is full, so ``len(loader)`` counts the
  fresh epoch's batches, and no sample can be excluded (a bucket's batches are whole runs of its stream).

Words: docs/glossary.md (bucket, bucket segment, slot, deal).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from shufflepoint._core import buckets as _buckets
from shufflepoint._core.buckets import NAME, BucketCut, BucketTable
from shufflepoint._core.cut import Cut, SkipsOf, Where
from shufflepoint._core.plan import Layout
from shufflepoint._core.segments import BucketSegments, Pairs
from shufflepoint._core.spanskips import Handed
from shufflepoint._errors import DAMAGED, Plain, Refused, field_error, refusal


class BucketDeal:
    """The bucket deal of ``table``'s keys and ``seed`` (module docstring); without keys it only names the deal."""

    name = NAME
    stretched = False
    redeals = False

    def __init__(self, table: BucketTable | None = None, seed: int = 0, drop_last: bool | None = None) -> None:
        self.table, self.seed, self.drop_last = table, seed, drop_last  # drop_last: the loader's (None: unknown)
        self.keys_fingerprint = table.fingerprint if table is not None else None

    def __repr__(self) -> str:
        return f"BucketDeal({self.table!r}, seed={self.seed})"

    def cut(self, layout: Layout, cursor: int, segments: Sequence[Sequence[int]] = (), parts: int | None = None, *,
            epoch: int = 0, handed: Handed | None = None, skips: SkipsOf | None = None) -> Cut:
        """At ``segments`` of ``epoch`` (the cursor follows from them; no canonical parts)."""
        if self.table is None:
            raise ValueError(refusal("deal", NAME, "'strided' or 'spans' here", "read a 'buckets' run through the "
                                     "loader built with its keys (DataLoader(..., buckets=keys))"))
        if skips is not None or handed is not None:
            self.check_exclusion()
        return BucketCut(self.table, self.seed, epoch, layout.world_size, layout.batch_size, segments,
                         layout.drop_last)

    def segments(self, pairs: Sequence[Sequence[int]]) -> BucketSegments:
        return BucketSegments(pairs)

    def check_state(self, state: Mapping[str, Any]) -> None:
        """Well-formed ``[batch_size, slots]`` pairs whose batches are the cursor (whether the keys held the slots
        is the cut's check, on load), read with the ``drop_last`` they were written with."""
        segments = state["segments"]
        try:
            pairs = _buckets.check_segments(state["n"], segments)
        except Refused as error:
            raise field_error("segments", error.where(), error.expected, DAMAGED) from None
        if state["cursor"] != pairs.cursor_of(state["n"]):
            raise field_error("cursor", state["cursor"], f"{pairs.cursor_of(state['n'])} (batch_size x slots of "
                              f"segments={segments}, at most n={state['n']})", DAMAGED)
        if pairs and self.drop_last is not None and bool(state["drop_last"]) != self.drop_last:
            # LIMIT(buckets-drop-last-mid-epoch): docs/buckets.md#limits
            raise field_error("drop_last", state["drop_last"], f"{self.drop_last} (what this loader was built with)",
                              f"build the loader with drop_last={state['drop_last']} to resume this run; change "
                              "drop_last at an epoch's start (set_epoch to the next epoch, then save)",
                              why="with buckets, drop_last decides how the epoch's batches were cut from its "
                              "first step (padded or not), and this epoch was cut with the other one (a state "
                              "with bucket keys of v1, before padding, was always read as drop_last=True)")

    def start_entry(self, cursor: int, segments: Pairs) -> list[list[int]]:
        return segments.to_state()

    def parse_start(self, n: int, field: str, start: object) -> tuple[int, BucketSegments]:
        try:
            pairs = _buckets.check_segments(n, start)
        except Refused as error:
            raise Refused(f"{field} start {error.subject}", error.found, error.expected, error.fix) from None
        return pairs.cursor_of(n), pairs

    def epoch_layout(self, layout: Layout, whole: Layout) -> Layout:
        """A layout whose epoch has as many batches per rank as a fresh bucketed epoch (every one full)."""
        per_rank = self.cut(layout, 0).samples_per_rank()
        return Layout(per_rank * layout.world_size, layout.world_size, layout.batch_size, True)

    def check_exclusion(self) -> None:
        # LIMIT(buckets-exclude): docs/buckets.md#limits
        raise ValueError(refusal("exclude", Plain("samples of a loader with buckets="), "a loader without buckets",
                                 "filter the dataset and its keys, and start a new run",
                                 why="a bucket's batches are whole runs of its stream; skipping samples inside "
                                 "would re-cut every bucket"))

    def for_state(self, recorded: object) -> BucketDeal:
        return self

    def on_grid(self) -> BucketDeal:
        """This deal: a grid changes nothing of how it deals."""
        return self

    def handed(self, cut: Cut) -> None:
        return None

    def exclusion_start(self, current: Cut, done: int, layout: Layout, segments: Pairs,
                        handed: Handed | None) -> tuple[Pairs, Handed | None]:
        self.check_exclusion()
        return segments, handed  # not reached

    def same_place(self, found: Where, place: Where) -> bool:
        return (found.epoch, found.cursor, found.segments) == (place.epoch, place.cursor, place.segments)


def check_deal_argument(deal: str | None) -> None:
    """A loader's ``deal=`` beside ``buckets=``: None, or the bucket deal's own name."""
    if deal is not None and deal != NAME:
        raise ValueError(refusal("deal", deal, f"None or {NAME!r} with buckets= (the buckets are the deal)",
                                 "leave deal unset"))
