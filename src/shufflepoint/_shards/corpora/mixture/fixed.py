"""A ``Mixture`` built without a schedule (``Mixture([(a, 0.7), (b, 0.3)])``): its two orders.

Such a mixture gives each source exactly ``counts[s]`` of every epoch. A ``DataLoader`` (0.6 on) reads it as
the schedule of one phase, ``[(0, counts)]`` with shares exactly ``counts / samples_per_epoch``
(``schedule.of_counts``), on its grid: order version 2, or 6 under ``spans``. Its chain of floors, and its
largest remainders, give exactly ``e * counts`` at every epoch's end, so each epoch still holds ``counts``
(``max_repeats`` and ``Packed`` sources included: the counts are what the Mixture computed). Being a schedule,
``set_weights`` appends a phase at the next global batch, as for a Mixture built with ``schedule=``.

The order before that (version 1, or 5 under ``spans``: windows of ``shuffle_block`` rows, each source its count
per epoch) is kept, read through ``FixedView`` (the mixture with no schedule): a ``ResumableSampler`` reads it (it
has no global batches to place a change on), and so does a loader that resumes a state written in it, exactly as
before (``OrderCache.for_state``); neither can change the weights, and says so.

Words: docs/glossary.md (mixture, fixed order, schedule, grid).
"""

from __future__ import annotations

from typing import Any

from shufflepoint._errors import Plain, refusal
from shufflepoint._shards.corpora.mixture.order import VERSION, MixtureOrder
from shufflepoint._shards.corpora.mixture.stretches import VERSION as STRETCHED
from shufflepoint._shards.corpora.mixture.stretches import StretchedMixtureOrder

VERSIONS = (VERSION, STRETCHED)  # the fixed order's versions: (not laid, laid along the spans stretches)


class FixedView:
    """A Mixture built without a schedule, as its fixed order reads it (``MixedSources``): no schedule, no live
    phases; everything else is the Mixture's own."""

    schedule = None

    def __init__(self, mixture: Any) -> None:
        self._mixture = mixture

    def __getattr__(self, name: str) -> Any:
        return getattr(self._mixture, name)

    def live_starts(self, grid: int | None) -> list[int]:
        return []


def fixed_order(mixture: Any, seed: int, epoch: int, shuffle_block: int,
                stretches: int | None) -> MixtureOrder | StretchedMixtureOrder:
    """The fixed order of one epoch (version 1, or 5 laid along ``stretches``); refused where the Mixture's weights
    were changed (``set_weights``), which this order cannot follow."""
    if mixture.__dict__.get("_live"):
        raise ValueError(refusal("set_weights", Plain("weights changed on a Mixture read in its fixed order"),
                                 "a Mixture read by a shufflepoint.DataLoader in a run begun with 0.6",
                                 "change the weights through loader.set_weights, on a run a DataLoader began",
                                 why=f"a ResumableSampler, or a run begun in mixture order version {VERSIONS[0]} or "
                                 f"{VERSIONS[1]}, reads each source's count every epoch in windows of shuffle_block "
                                 "rows, which no change of weights can enter exactly"))
    view = FixedView(mixture)
    if stretches is not None:
        return StretchedMixtureOrder(view, seed, epoch, shuffle_block, stretches, None)  # type: ignore[arg-type]
    return MixtureOrder(view, seed, epoch, shuffle_block)  # type: ignore[arg-type]
