"""What the loader asks of a dataset through its declared capabilities (``_core/capabilities.py``), each
question one function here, so the loader's modules never name a hook: its length, its share, the deal
and the grid a ``Scheduled`` dataset needs, its own order under a deal, its identity, how it reads.

A dataset's public capabilities (``OwnOrder``, ``Identified``, ...) are asked of the dataset itself; the
rest of what shufflepoint's own corpora offer, of their hooks (``hooks_of``). A ``Mixture`` with a schedule
offers ``Scheduled``: it needs no one deal (``required_deal`` is None: under ``spans`` its order is laid
along the stretches, ``mixture/stretches.py``), says when a global batch no longer fits the grid its
phases follow (``check_global_batch``), records its phases in the state (``phases``), and a resume whose
phases changed may still be its own run with phases appended (``phase_changed``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sized
from typing import Any

from shufflepoint._core.capabilities import (
    CountsShare,
    EarlierLaidVersion,
    ExplainsFingerprint,
    ExplainsOrderVersion,
    FitsDecodeBudget,
    FixedOrder,
    KeepsShardsOpen,
    LaysOnStretches,
    LegacyIdentified,
    LiveWeighted,
    ReadsAhead,
    ReadsAtDensity,
    Scheduled,
    hooks_of,
)
from shufflepoint._core.state import DEALS
from shufflepoint._errors import Plain, refusal


def deal_for(name: str | None, default: str, dataset: Any) -> str:
    """The deal to read ``dataset`` with: ``name``, else the one the dataset needs (``required_deal``), else
    ``default``. A name that is no deal, or one the dataset cannot be read under, is refused."""
    if name is not None and name not in DEALS:
        raise ValueError(refusal("deal", name, f"one of {', '.join(map(repr, DEALS))} or None",
                                 "pass one of these, or leave deal unset for the loader's default"))
    hooks = hooks_of(dataset)
    needed = hooks.required_deal if isinstance(hooks, Scheduled) else None
    if needed not in DEALS:  # None: any deal
        return default if name is None else name
    if name is not None and name != needed:
        # LIMIT(scheduled-mixture-deal): docs/shards.md#limits
        raise ValueError(refusal(
            "deal", name, f"{needed!r}, the only deal this {type(dataset).__name__} is read under",
            f"leave deal unset (or pass deal={needed!r})",
            why="this dataset starts each phase at the sample it names only under that deal"))
    return str(needed)


def is_scheduled(dataset: Any) -> bool:
    """Whether the dataset's order follows a schedule (a ``Mixture`` built with one)."""
    return isinstance(hooks_of(dataset), Scheduled)


def schedule_hooks(dataset: Any, shuffle_block: int | None, laid: bool = False,
                   ) -> Callable[[list[list[Any]], int, int, int | None], int | None] | None:
    """The scheduled dataset's check of a state's phases (``state.Expected.phases_changed``); None for any
    other dataset. ``laid``: the state is read in the dataset's order laid along the ``spans`` stretches."""
    hooks = hooks_of(dataset)
    if not isinstance(hooks, Scheduled):
        return None
    return functools.partial(hooks.phase_changed, shuffle_block=shuffle_block or 0, laid=laid)


def phases_of(dataset: Any) -> tuple[tuple[int, str], ...]:
    """The phases of a scheduled dataset's schedule, as its state records them; ``()`` for any other."""
    hooks = hooks_of(dataset)
    return tuple(hooks.phases) if isinstance(hooks, Scheduled) else ()


def check_grid(dataset: Any, grid: int | None, global_batch: int) -> None:
    """Warn when a loader's global batch no longer fits the grid its schedule follows (after a resize to
    another global batch, or ``set_batch_size``)."""
    hooks = hooks_of(dataset)
    if grid is not None and isinstance(hooks, Scheduled):
        hooks.check_global_batch(global_batch, grid)


def tell_share(dataset: object, seed: int, rank: int, world_size: int) -> None:
    """Tell a dataset that sets itself up by share (``Packed``'s token counts) this loader's seed, rank and
    world size, before its length is asked. Every rank builds its loader, so a collective here is safe."""
    hooks = hooks_of(dataset)
    if isinstance(hooks, CountsShare):
        hooks.count_share(seed, rank, world_size)


def keep_open_for(dataset: Any, shuffle_block: int) -> None:
    """Tell a corpus that keeps a block's shards open (``Shards``) the block the loader reads with."""
    hooks = hooks_of(dataset)
    if isinstance(hooks, KeepsShardsOpen):
        hooks.keep_open_for(shuffle_block)


def fitting_shuffle_block(dataset: Any) -> int | None:
    """The block a corpus sizes to the process's decode budget (``Shards``), or None."""
    hooks = hooks_of(dataset)
    return int(hooks.fitting_shuffle_block()) if isinstance(hooks, FitsDecodeBudget) else None


def lays_on_stretches(dataset: Any) -> bool:
    """Whether the dataset's own order is laid along the ``spans`` deal's stretches under it."""
    return isinstance(hooks_of(dataset), LaysOnStretches)


def stretched_version(dataset: Any) -> int:
    """The version of the dataset's own order laid along the stretches (``lays_on_stretches``)."""
    hooks = hooks_of(dataset)
    assert isinstance(hooks, LaysOnStretches)
    return int(hooks.stretched_version)


def own_epoch_order(dataset: Any, seed: int, epoch: int, shuffle_block: int, grid: int | None,
                    stretches: int | None, epoch_parts: Callable[[int], int | None] | None = None,
                    version: int | None = None, lot: int | None = None) -> Any:
    """The epoch's order of a dataset with its own: laid along ``stretches`` (the ``spans`` deal's first world
    size), else on the ``grid`` its schedule follows, else its plain ``epoch_order`` (``OwnOrder``).
    ``epoch_parts``: each epoch's first world (the run's history), for a dataset whose weights change while the
    run trains (``LiveWeighted``: a lay of an earlier epoch may map this one's slots). ``version``: the laid
    order's earlier version (``EarlierLaidVersion``), None for its own; ``lot``: its parts in whole lots (the torchft
    loader's)."""
    hooks = hooks_of(dataset)
    if stretches is not None and isinstance(hooks, LaysOnStretches):
        chosen = {key: value for key, value in (("version", version), ("lot", lot)) if value is not None}
        if epoch_parts is not None and isinstance(hooks, LiveWeighted):
            return hooks.laid_order(seed, epoch, shuffle_block, stretches, grid, epoch_parts, **chosen)
        return hooks.stretched_order(seed, epoch, shuffle_block, stretches, grid, **chosen)
    if grid is not None and isinstance(hooks, Scheduled):
        return hooks.scheduled_order(seed, epoch, shuffle_block, grid)
    return dataset.epoch_order(seed, epoch, shuffle_block)


def earlier_laid_version(dataset: Any) -> int | None:
    """The earlier version of a dataset's order laid along the stretches (``EarlierLaidVersion``), or None."""
    hooks = hooks_of(dataset)
    return int(hooks.earlier_laid_version) if isinstance(hooks, EarlierLaidVersion) else None


def fixed_versions(dataset: Any) -> tuple[int, int] | None:
    """The versions of a dataset's fixed order (``FixedOrder``: a ``Mixture`` built without a schedule), or None."""
    hooks = hooks_of(dataset)
    return tuple(hooks.fixed_versions) if isinstance(hooks, FixedOrder) else None  # type: ignore[return-value]


def fixed_epoch_order(dataset: Any, seed: int, epoch: int, shuffle_block: int, stretches: int | None) -> Any:
    """The epoch's fixed order of a ``FixedOrder`` dataset, laid along ``stretches`` where given."""
    hooks = hooks_of(dataset)
    assert isinstance(hooks, FixedOrder)
    return hooks.fixed_order(seed, epoch, shuffle_block, stretches)


def legacy_fingerprint(dataset: Any) -> str | None:
    """The fingerprint shufflepoint 0.2 wrote for the dataset, where it had one."""
    hooks = hooks_of(dataset)
    return hooks.legacy_fingerprint if isinstance(hooks, LegacyIdentified) else None


def fingerprint_explainer(dataset: Any) -> Callable[[str], str] | None:
    """The dataset's own account of a changed fingerprint (``Shards`` names the changed shards)."""
    hooks = hooks_of(dataset)
    return hooks.explain_fingerprint if isinstance(hooks, ExplainsFingerprint) else None


def order_version_explainer(dataset: Any) -> Callable[[int], str | None] | None:
    """The dataset's own account of a state's other order version (``Mixture``: which kind wrote it)."""
    hooks = hooks_of(dataset)
    return hooks.explain_order_version if isinstance(hooks, ExplainsOrderVersion) else None


def tell_density(dataset: Any, density: Callable[[], float]) -> None:
    """Tell a dataset how densely this rank reads the order this pass (``ReadsAtDensity``; ``density()`` is
    worked out only for such a one), before the workers copy it: how it reads remote shards."""
    hooks = hooks_of(dataset)
    if isinstance(hooks, ReadsAtDensity):
        hooks.read_at_density(density())


def reads_ahead(dataset: Any) -> bool:
    """False where a dataset says it has nothing to fetch ahead (local files: ``ReadsAhead``); True otherwise."""
    hooks = hooks_of(dataset)
    return not isinstance(hooks, ReadsAhead) or bool(hooks.reads_ahead)


def dataset_length(dataset: object) -> int:
    if not isinstance(dataset, Sized):
        # LIMIT(map-style-only): README.md#limits
        raise TypeError(refusal("dataset", Plain(f"{type(dataset).__name__} without __len__"), "a map-style dataset "
                                "(__getitem__ and __len__)", "wrap the data in a map-style dataset (a sharded corpus: "
                                "shufflepoint.Shards)", why="an IterableDataset has no seekable order"))
    return len(dataset)
