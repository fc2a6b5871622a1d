"""Which *lay* maps each slot of a source's stream to a row, when weights change inside an epoch (live phases).

Under ``spans`` an epoch's rows of each source are laid out for its parts when the epoch begins
(``stretches.py``): the epoch's slots of source s, ``[Q0, Q0 + count)`` of its stream, are cut into
portions of its passes, and each portion into the parts' shares (``passes.py``). That count is the
schedule's at the epoch's end, so a weight changed inside the epoch (``set_weights``: a *live phase*)
changes it, and laying the epoch out again would move rows already read. Instead the stream is laid in
*lays*, each fixed once made:

- an *event* is an epoch's start, or the start (on the grid) of a live phase inside an epoch. At an event at
  run position g of epoch j the *known* schedule is the Mixture's own phases and the live phases that start
  at or before g; its count of source s at the epoch's end is the event's *planned end* E;
- the *frontier* F is the highest planned end so far (at first: the count at the first event's epoch start);
  an event makes the lay ``[F, E)`` (nothing where E <= F) and moves F to E. So the lays tile the stream,
  and each slot is mapped by the one lay that covers it, however later events change the counts;
- a lay maps its slots bijectively onto the pass positions ``[F - pL, E - pL)`` of each pass p it touches,
  laid to the parts of its epoch (their shares, as ``stretches.py`` lays an epoch): its virtual order is
  epoch j's with the known schedule, on epoch j's first world.

Slots are read in order (a global batch edge reads a prefix of the stream), so every slot below F at an
event is either read or still mapped as before: the past is never rewritten, and passes stay whole. A slot
a later virtual order hands to another part than its lay's is read there (locality is lost for it, for the
rest of that epoch). With no live phase inside an epoch every lay is the epoch's ``[Q0, Q0 + count)`` on its
own virtual order: the order of version 6 exactly.

Worked (``tests/shards/test_mixture_lays.py`` pins it): n = 10 per epoch, two sources, weights 1:1 from 0;
at run position 4 of epoch 0 source 0 drops to 0. Epoch 0's start lays source 0's ``[0, 5)``; the event
at 4 plans 2 (``[0, 2)`` read), so nothing new, F stays 5. Epoch 1 (weights 0:1) reads none of source 0.
Source 1: ``[0, 5)`` at the start, then ``[5, 8)`` at 4 (its planned end 2 + 6), then ``[8, 18)`` in epoch 1.

Words: docs/glossary.md (lay, live phase, pass, stretch order, part).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

# counts(phases, g): each source's count (int64, sources) at run position g with the first ``phases`` phases
Counts = Callable[[int, int], np.ndarray]


@dataclass(frozen=True)
class Lay:
    """Slots ``[lo[s], hi[s])`` of each source's stream (empty where ``hi <= lo``), laid as epoch ``epoch``
    with the schedule's first ``phases`` phases lays it."""

    epoch: int
    phases: int
    lo: np.ndarray
    hi: np.ndarray


def events(live: list[int], n: int, epoch: int) -> list[tuple[int, int]]:
    """The events of ``epoch`` as (run position, live phases known): its start, then each live phase start
    (``live``: sorted, on the grid) inside it."""
    start, end = epoch * n, (epoch + 1) * n
    known = sum(1 for g in live if g <= start)
    found = [(start, known)]
    for g in live:
        if start < g < end:
            known = sum(1 for h in live if h <= g)
            if g != found[-1][0]:
                found.append((g, known))
    return found


def plan(live: list[int], built: int, n: int, epoch: int, counts: Counts) -> list[Lay] | None:
    """The lays that map ``epoch``'s slots (``live``: the live phases' starts, sorted, as the order places them;
    ``built``: the phases before them), or None where the epoch's own lay alone maps them (no live phase starts
    inside an epoch up to this one, or none leaves a frontier above this epoch's start): the order of
    version 6."""
    inside = [g for g in live if g % n and g < (epoch + 1) * n]
    if not inside:
        return None
    first, last = inside[0] // n, inside[-1] // n
    everything = built + len(live)
    frontier = counts(everything, first * n)
    lays: list[Lay] = []
    for j in range(first, min(epoch, last) + 1):
        for _, known in events(live, n, j):
            planned = counts(built + known, (j + 1) * n)
            lays.append(Lay(j, built + known, frontier, planned))
            frontier = np.maximum(frontier, planned)
    start = counts(everything, epoch * n)
    if epoch > last:  # the epochs between: the whole schedule known, each its own lay below this epoch's start
        frontier = np.maximum(frontier, start)
        lays.append(Lay(epoch, everything, frontier, counts(everything, (epoch + 1) * n)))
    end = counts(everything, (epoch + 1) * n)
    kept = [lay for lay in lays if bool(np.any(np.maximum(lay.lo, start) < np.minimum(lay.hi, end)))]
    if len(kept) == 1 and kept[0].epoch == epoch and kept[0].phases == everything and \
            bool(np.all(kept[0].lo == start)) and bool(np.all(kept[0].hi >= end)):
        return None
    return kept
