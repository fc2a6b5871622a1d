"""The deals, one module each: what every deal does differently, answered in one place.

The order says *what* an epoch is; a deal says *who* reads which of its positions. Every question the
loader, the run's history, the state and ``which`` ask of a deal is a method of the ``Deal`` protocol
(``_core/cut.py``), answered by one module per deal:

- ``strided.py``: DistributedSampler's, rank r reads r, r + W, ... (the default for map-style datasets);
- ``spans.py``: each rank a contiguous stretch, a new world re-deals what remains (the default for corpora);
- ``buckets.py``: every per-rank batch one bucket (``DataLoader(buckets=keys)``).

No caller outside these modules asks a deal its name to decide what to do (``tests/test_layout.py`` checks).
Here: the deal a name means (a state's ``deal``, a caller's ``deal=``), and the default deal of a dataset.

Words: docs/glossary.md (deal, strided, spans, bucket).
"""

from __future__ import annotations

from collections.abc import Sequence

from shufflepoint._core.cut import Cut, Deal
from shufflepoint._core.deals import spans, strided
from shufflepoint._core.deals.buckets import BucketDeal
from shufflepoint._core.plan import Layout
from shufflepoint._errors import refusal

NAMES: tuple[str, ...] = (strided.DEAL.name, spans.DEAL.name, BucketDeal.name)  # the deals a state may name


def named(name: str) -> Deal:
    """The deal ``name`` means: ``strided``, ``spans``, or the bucket deal without its keys (it names the deal and
    checks its segments, and refuses to cut: a bucket run is read through the loader built with its keys)."""
    if name == strided.DEAL.name:
        return strided.DEAL
    if name == spans.DEAL.name:
        return spans.DEAL
    if name == BucketDeal.name:
        return BucketDeal()
    raise ValueError(refusal("deal", name, " or ".join(map(repr, NAMES)), "name one of these deals"))


def default_name(corpus: bool) -> str:
    """The deal a loader left to the default reads with: ``spans`` for a corpus order (a node reads its own
    share of the shards), ``strided`` (DistributedSampler's) for anything else."""
    return spans.DEAL.name if corpus else strided.DEAL.name


def check_argument(name: str | None) -> None:
    """A caller's ``deal=``: the bucket deal comes with ``buckets=keys``, never by its name alone (the other
    names are checked with the dataset, ``_loading/capabilities.deal_for``)."""
    if name == BucketDeal.name:
        raise ValueError(refusal("deal", name, "'strided', 'spans' or None: 'buckets' comes with buckets=keys",
                                 "pass the run's keys as buckets= (and leave deal unset)"))


def cut(layout: Layout, deal: str | Deal, cursor: int, segments: Sequence[Sequence[int]],
        parts: int | None = None) -> Cut:
    """The rest of an epoch at (cursor, segments) under ``deal`` (or the deal it names), for ``layout``'s world;
    ``parts``: under ``spans``, the world size whose stretches are the canonical parts (``History.parts``)."""
    return (named(deal) if isinstance(deal, str) else deal).cut(layout, cursor, segments, parts)
