"""What the loader asks of a dataset through its declared capabilities (``_core/capabilities.py``): its
length, the deal a ``Scheduled`` dataset needs, its fingerprint check and its grid warning.

A ``Mixture`` declares them: it needs no one deal (``_required_deal`` is None: under ``spans`` its order is
laid along the stretches, ``mixture_stretches.py``), says when a global batch no longer fits the grid its
phases follow (``_check_global_batch``), records its phases
in the state (``phases``), and a resume whose phases changed may still be its own run with phases appended
(``_phase_changed``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sized
from typing import Any

from shufflepoint._core.capabilities import CountsShare, Scheduled
from shufflepoint._core.errors import Plain, refusal
from shufflepoint._core.state import DEALS


def deal_for(name: str | None, default: str, dataset: Any) -> str:
    """The deal to read ``dataset`` with: ``name``, else the one the dataset needs (``_required_deal``), else
    ``default``. A name that is no deal, or one the dataset cannot be read under, is refused."""
    if name is not None and name not in DEALS:
        raise ValueError(refusal("deal", name, f"one of {', '.join(map(repr, DEALS))} or None",
                                 "pass one of these, or leave deal unset for the loader's default"))
    needed = dataset._required_deal if isinstance(dataset, Scheduled) else None
    if needed not in DEALS:  # None, or an attribute that only looks like the capability
        return default if name is None else name
    if name is not None and name != needed:
        # LIMIT(scheduled-mixture-deal): docs/shards.md#limits
        raise ValueError(refusal(
            "deal", name, f"{needed!r}, the only deal this {type(dataset).__name__} is read under",
            f"leave deal unset (or pass deal={needed!r})",
            why="this dataset starts each phase at the sample it names only under that deal"))
    return str(needed)


def schedule_hooks(dataset: Any, shuffle_block: int | None, laid: bool = False,
                   ) -> Callable[[list[list[Any]], int, int, int | None], int | None] | None:
    """The scheduled dataset's check of a state's phases (``state.Expected.phases_changed``); None for any
    other dataset. ``laid``: the state is read in the dataset's order laid along the ``spans`` stretches."""
    if not isinstance(dataset, Scheduled):
        return None
    return functools.partial(dataset._phase_changed, shuffle_block=shuffle_block or 0, laid=laid)


def phases_of(dataset: Any) -> tuple[tuple[int, str], ...]:
    """The phases of a scheduled dataset's schedule, as its state records them; ``()`` for any other."""
    return tuple(dataset.phases) if isinstance(dataset, Scheduled) else ()


def check_grid(dataset: Any, grid: int | None, global_batch: int) -> None:
    """Warn when a loader's global batch no longer fits the grid its schedule follows (after a resize to
    another global batch, or ``set_batch_size``)."""
    if grid is not None and isinstance(dataset, Scheduled):
        dataset._check_global_batch(global_batch, grid)


def tell_share(dataset: object, seed: int, rank: int, world_size: int) -> None:
    """Tell a dataset that sets itself up by share (``Packed``'s token counts) this loader's seed, rank and
    world size, before its length is asked. Every rank builds its loader, so a collective here is safe."""
    if isinstance(dataset, CountsShare):
        dataset._count_share(seed, rank, world_size)


def dataset_length(dataset: object) -> int:
    if not isinstance(dataset, Sized):
        # LIMIT(map-style-only): README.md#limits
        raise TypeError(refusal("dataset", Plain(f"{type(dataset).__name__} without __len__"), "a map-style dataset "
                                "(__getitem__ and __len__)", "wrap the data in a map-style dataset (a sharded corpus: "
                                "shufflepoint.Shards)", why="an IterableDataset has no seekable order"))
    return len(dataset)
