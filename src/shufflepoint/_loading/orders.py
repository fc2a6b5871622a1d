"""The order a loader or sampler reads an epoch in, built once per epoch, and the dataset identity
(fingerprint) that joins the state: the two things a resume checks before it trusts a position.

Words: docs/glossary.md (order, block, shuffle block, fingerprint).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import numpy as np

from shufflepoint._core.capabilities import Identified, OwnOrder, ShardedCorpus
from shufflepoint._core.cut import Cut, Deal
from shufflepoint._core.state_fields import OrderParameters
from shufflepoint._errors import Refused, StateError, refusal
from shufflepoint._loading.block_choice import default_block
from shufflepoint._loading.capabilities import (
    earlier_laid_version,
    fingerprint_explainer,
    fixed_epoch_order,
    fixed_versions,
    is_scheduled,
    keep_open_for,
    lays_on_stretches,
    legacy_fingerprint,
    own_epoch_order,
    phases_of,
    schedule_hooks,
    stretched_version,
)
from shufflepoint._order import (
    DEFAULT_ORDER,
    DEFAULT_ORDERS,
    Order,
    check_int,
    check_order_name,
    make_order,
    order_version,
)
from shufflepoint._order.blocks import NAME as BLOCKS
from shufflepoint._order.blocks import VERSION as BLOCKS_VERSION
from shufflepoint._order.blocks import BlockOrder, StretchBlockOrder
from shufflepoint._shards.corpora.packed.identity import seq_lens_making


def resolve_fingerprint(value: str | None, dataset: Any, n: int, *, legacy: bool = False) -> str | None:
    """None, the user's own string, or ``"auto"``: length plus a hash of a few items.

    A dataset that names its own content (``Identified``: ``Shards``, ``Mixture``, ``Packed``) always
    carries it; the user's own string, if any, is appended. The order's parameters (its block, a
    schedule's grid and phases) are the state's own fields since state version 4 (``OrderCache.parameters``).
    ``legacy``: the same as shufflepoint 0.2 wrote it (None when the dataset has no older identity).
    """
    if value is not None and not isinstance(value, str):
        raise TypeError(refusal("dataset_fingerprint", value, "a str, 'auto' or None",
                                "pass a string naming the dataset's version, 'auto', or leave it unset"))
    if legacy:
        corpus = legacy_fingerprint(dataset)
    else:
        corpus = dataset.fingerprint if isinstance(dataset, Identified) else None
    if isinstance(corpus, str):
        return corpus if value in (None, "auto") else f"{corpus}:{value}"
    if legacy:
        return None
    if value == "auto":
        from shufflepoint._core.fingerprint import fingerprint

        return fingerprint(dataset, n)
    return value


def explain_fingerprint(dataset: Any) -> Callable[[str], str] | None:
    """The dataset's own account of a changed fingerprint (``Shards`` names the changed shards)."""
    return fingerprint_explainer(dataset)


@runtime_checkable
class _MixesSources(Protocol):
    """What ``explain_length`` reads of a ``Mixture`` (without importing it: the position model stays torch-free)."""

    sources: list[Any]
    lengths: list[int]
    samples_per_epoch: int


@runtime_checkable
class _PacksRows(Protocol):
    """What ``explain_length`` reads of a ``Packed``."""

    seq_len: int
    tokens_per_epoch: int


def explain_length(dataset: Any) -> Callable[[int], str | None] | None:
    """Why a state's ``n`` differs, where the dataset can say: a ``Mixture`` of ``Packed`` sources (an epoch of
    all their rows) names the ``seq_len`` that makes the saved number of rows (``Packed`` names it in its
    fingerprint, which the mixture's hashes)."""
    if not isinstance(dataset, _MixesSources) or dataset.samples_per_epoch != sum(dataset.lengths):
        return None
    sources = dataset.sources
    if not sources or not all(isinstance(source, _PacksRows) for source in sources):
        return None
    seq_len = sources[0].seq_len

    def explain(saved: int) -> str | None:
        found = seq_lens_making([source.tokens_per_epoch for source in sources], saved)
        if found is None or found[0] <= seq_len <= found[1]:
            return None
        shown = str(found[0]) if found[0] == found[1] else f"one of {found[0]}..{found[1]}"
        fix = f"seq_len={found[0]}" if found[0] == found[1] else f"the seq_len the run was started with ({shown})"
        return (f"the packing changed: packing parameter seq_len: saved {shown}, now {seq_len} (the mixture's "
                f"Packed sources make {saved} rows an epoch at the saved seq_len, {dataset.samples_per_epoch} now); "
                f"build the Packed sources with {fix} to resume this run, or start a new run")

    return explain


class Identity:
    """What a state says of the dataset it was saved for: its fingerprint, the fingerprint 0.2 wrote, the
    dataset's own account of a changed fingerprint, and a scheduled dataset's check of the state's phases
    (which reads the order's block: ``for_orders`` gives the identity under a state's adopted block)."""

    def __init__(self, value: str | None, dataset: Any, orders: OrderCache) -> None:
        self._value, self._dataset, self._block = value, dataset, orders.shuffle_block
        self._n = orders.n
        self.fingerprint = resolve_fingerprint(value, dataset, orders.n)
        self.explain = explain_fingerprint(dataset)
        self.explain_length = explain_length(dataset)

    def compatible(self, laid: bool) -> Callable[[list[list[Any]], int, int, int | None], int | None] | None:
        """The scheduled dataset's check of a state's phases (``schedule_hooks``); ``laid``: read in its order laid
        along the ``spans`` stretches (``OrderCache.laid_under``)."""
        return schedule_hooks(self._dataset, self._block, laid)

    def legacy_for(self, state: object) -> str | None:
        """The fingerprint 0.2 wrote for this dataset, asked only for a state 0.2 wrote (version 1): a corpus
        hashes its whole index for it, O(shards), which no construction and no newer state pays."""
        written_by_0_2 = isinstance(state, dict) and state.get("version") == 1
        return resolve_fingerprint(self._value, self._dataset, self._n, legacy=True) if written_by_0_2 else None

    def for_orders(self, orders: OrderCache) -> Identity:
        """The identity under ``orders`` (a state's block adopted): this one when the block is the same."""
        return self if orders.shuffle_block == self._block else Identity(self._value, self._dataset, orders)


class OrderCache:
    """The order of the current epoch, built once per epoch (the ``torch`` order costs O(n)).

    ``order=None`` picks the default: the dataset's own order when it has one (``Mixture``:
    ``mixture``), ``blocks`` for a sharded corpus (a dataset with ``shard_rows``), ``radix-feistel``
    for anything else. ``shuffle_block`` applies to ``blocks`` and ``mixture`` only. Nothing remembers
    whether a value was given or defaulted: a resume reads the same for ``order=None`` and the order it
    resolves to (``for_state``), and for ``shuffle_block=None`` and the block it resolves to (``block_choice``).
    """

    def __init__(self, name: str | None, n: int, seed: int, *, dataset: Any = None,
                 shuffle_block: int | None = None, grid: int | None = None) -> None:
        rows = dataset.shard_rows if isinstance(dataset, ShardedCorpus) else None
        own = dataset.order_name if isinstance(dataset, OwnOrder) else None
        if name is None:
            name = own or (BLOCKS if rows is not None else DEFAULT_ORDER)
        self.n, self.seed, self.shuffle_block = n, seed, None
        self._dataset = dataset
        self._rows: np.ndarray | None = None
        if own is not None and name == "identity":
            # LIMIT(own-order-shuffled): docs/shards.md#limits
            raise ValueError(refusal("shuffle", False, f"True: a {type(dataset).__name__} is always read in its own "
                                     f"shuffled order {own!r}", "leave shuffle at True"))
        if own is not None and name != own:
            raise ValueError(refusal("order", name, f"{own!r}, the own order of a {type(dataset).__name__}",
                                     "leave order unset"))
        if name == BLOCKS and rows is None:
            raise ValueError(refusal("order", "blocks", f"a sharded corpus (shufflepoint.Shards), not a "
                                     f"{type(dataset).__name__}", "use order='feistel'"))
        if name in (BLOCKS, own):
            block = default_block(dataset, name) if shuffle_block is None else shuffle_block  # block_choice
            self.shuffle_block = check_int("shuffle_block", block, 1, 2**62)
            if name == BLOCKS:
                self._rows = np.asarray(rows, dtype=np.int64)
                keep_open_for(dataset, self.shuffle_block)  # Shards: keep the shards of a block open
            self.name = name
            self.version = BLOCKS_VERSION if name == BLOCKS else int(dataset.order_version)
        else:
            if shuffle_block is not None:
                raise ValueError(refusal("shuffle_block", shuffle_block, f"None: it applies to order='blocks' only "
                                         f"(order is {name!r})", "leave shuffle_block unset"))
            self.name, self.version = check_order_name(name), order_version(name)
        # a loader's global batch, for a dataset whose schedule follows it (Mixture(schedule=...)); in the fingerprint
        scheduled = is_scheduled(dataset)
        self.grid = grid if self.shuffle_block is not None and scheduled else None
        # a Mixture built without a schedule: read on the grid as the schedule of its counts, or (a sampler, no
        # grid; a state written before 0.6: ``for_state``) in its fixed order (``mixture/fixed.py``)
        self._fixed = fixed_versions(dataset) if self.shuffle_block is not None else None
        self.fixed = self._fixed is not None and self.grid is None
        self.began_fixed = False  # a state written in the fixed order was loaded (a run begun before 0.6)
        if self.fixed:
            self.version = self._fixed[0]  # type: ignore[index]
        # a dataset's own order laid along the spans deal's stretches (Mixture), unless a state of the order
        # before it was laid so is resumed (for_state)
        self._stretched = self.shuffle_block is not None and lays_on_stretches(dataset)
        self._epoch: tuple[int, int | None] | None = None
        self._order: Order | None = None
        # each epoch's first world (the run's history: ``LoaderPosition`` sets it), for a dataset's own order
        # whose earlier epochs' lays map this one's slots (a Mixture's weights changed inside an epoch)
        self.epoch_parts: Callable[[int], int | None] | None = None
        # the earlier version of the dataset's laid order to read (a state written in it; ``read_part_after_part``),
        # None: its own
        self.laid_version: int | None = None
        self.part_lot: int | None = None  # its parts of whole lots of this size (``read_part_after_part``)
        if self.shuffle_block is not None and self._rows is None:
            # the dataset's own order checks shuffle_block against itself: fail here, not mid-loop
            self.get(0)

    def for_state(self, state: object, deal: Deal) -> OrderCache:
        """The orders to validate ``state`` against, read with ``deal``: these; or, where these are today's
        default order (``radix-feistel``) and the state records an earlier default (0.1's ``feistel``), that one,
        so that an upgrade resumes a run in the order it started with; or, for a dataset that lays its order on
        the stretches of a deal that reads them, its order before it did so, for a state of that version.
        Adopted only once the state is valid."""
        found = state.get("order") if isinstance(state, dict) else None
        saved = state.get("order_version") if isinstance(state, dict) else None
        if self._fixed is not None and not self.fixed and saved in self._fixed:  # a run begun before 0.6
            fixed = copy.copy(self)
            fixed.fixed, fixed.grid, fixed.version, fixed._epoch, fixed._order = True, None, self._fixed[0], None, None
            fixed.began_fixed = True
            fixed._stretched = self._stretched and saved == self._fixed[1]  # version 1 under spans: not laid
            return fixed
        if self._stretched and deal.stretched and saved is not None and saved != self.version_for(True) and \
                saved == earlier_laid_version(self._dataset):  # a Mixture's 6: written before 0.6 (pass_edges.py)
            in_turn = copy.copy(self)
            in_turn.laid_version, in_turn._epoch, in_turn._order = saved, None, None
            return in_turn
        if self._stretched and isinstance(state, dict) and deal.stretched and \
                state.get("order_version") == self.version:  # written before Mixture laid its order on stretches
            unlaid = copy.copy(self)
            unlaid._stretched, unlaid._epoch, unlaid._order = False, None, None
            return unlaid
        earlier = self.name == DEFAULT_ORDER and found in DEFAULT_ORDERS and found != self.name
        if self.shuffle_block is not None or not earlier:
            return self
        return OrderCache(str(found), self.n, self.seed, dataset=self._dataset)

    def laid_under(self, stretched: bool) -> bool:
        """Whether the dataset's own order is read laid along the stretches by a deal that reads stretches or not."""
        return stretched and self._stretched

    def version_for(self, stretched: bool) -> int:
        """The order's version read by a deal that reads stretches or not: a dataset's order laid along the
        stretches has its own (``LaysOnStretches``)."""
        if self.laid_under(stretched):
            if self.fixed and self._fixed:
                return self._fixed[1]
            return self.laid_version if self.laid_version is not None else stretched_version(self._dataset)
        return self.version

    def read_part_after_part(self, lot: int) -> OrderCache:
        """These orders as a loader that reads each window's parts one after another in whole lots of ``lot``
        reads them (the torchft loader): a dataset's earlier laid version where it keeps one (a ``Mixture``'s 6, whose
        windows number their slots so: ``mixture/pass_edges.py``), its parts stretches of whole lots as the loader's
        groups read them (``stretches.part_lengths``); else these."""
        earlier = earlier_laid_version(self._dataset) if self._stretched else None
        if earlier is None or (self.laid_version, self.part_lot) == (earlier, lot):
            return self
        adopted = copy.copy(self)
        adopted.laid_version, adopted.part_lot, adopted._epoch, adopted._order = earlier, lot, None, None
        return adopted

    @property
    def dataset(self) -> Any:
        """The dataset these orders are of (the user's, as passed to the loader)."""
        return self._dataset

    @property
    def identity(self) -> tuple[int | None, int | None]:
        """What of these orders a resume may adopt from a state: (shuffle_block, grid)."""
        return self.shuffle_block, self.grid

    @property
    def parameters(self) -> OrderParameters:
        """The order's parameters a state records and a load checks: the block, a schedule's grid and phases."""
        phases = phases_of(self._dataset) if self.shuffle_block is not None and not self.fixed else ()
        return OrderParameters(self.shuffle_block, self.grid, phases)

    def forget(self) -> None:
        """Build the next order asked for anew: the dataset's schedule changed (``set_weights``)."""
        self._epoch, self._order = None, None

    def on_grid(self, grid: int | None) -> OrderCache:
        """These orders on another grid (a state's, adopted on a resume), or these when it is the same."""
        if grid is None or self.grid in (None, grid):
            return self
        adopted = copy.copy(self)
        adopted.grid, adopted._epoch, adopted._order = grid, None, None
        return adopted

    @property
    def is_corpus(self) -> bool:
        """A corpus order (``blocks`` or a dataset's own): the ``spans`` deal is its default."""
        return self.shuffle_block is not None

    def get(self, epoch: int, cut: Cut | None = None) -> Order:
        """The epoch's order as ``cut`` reads it: a corpus's order is laid along the cut's stretches where its deal
        reads stretches (the ``blocks`` order, a ``LaysOnStretches`` dataset's own); None: not laid."""
        return self.laid(epoch, cut.stretches if cut is not None else None)

    def laid(self, epoch: int, stretches: int | None) -> Order:
        """The epoch's order, laid along the stretches of ``stretches`` ranks where it can be (None: not laid)."""
        if self._rows is None and not self._stretched:
            stretches = None
        if self._order is None or self._epoch != (epoch, stretches):
            if self.shuffle_block is None:
                self._order = make_order(self.name, self.n, self.seed, epoch)
            elif self._rows is not None and stretches is not None:
                self._order = StretchBlockOrder(self._rows, self.seed, epoch, self.shuffle_block, stretches)
            elif self._rows is not None:
                self._order = BlockOrder(self._rows, self.seed, epoch, self.shuffle_block)
            elif self.fixed:
                self._order = fixed_epoch_order(self._dataset, self.seed, epoch, self.shuffle_block, stretches)
            else:
                self._order = own_epoch_order(self._dataset, self.seed, epoch, self.shuffle_block, self.grid,
                                              stretches, self.epoch_parts, self.laid_version, self.part_lot)
            self._epoch = (epoch, stretches)
        return self._order


def within_bounds(orders: OrderCache, epoch: int, start: Cut, *, field: str | None = None) -> None:
    """Build ``epoch``'s order now (it is kept for the reads): a dataset's own bound on epochs (``Packed``,
    ``Mixture``: their indices stay below 2**62), lower than the orders' own, is refused before anything
    changes, as a ``StateError`` naming ``field`` for a state."""
    try:
        orders.get(epoch, start)
    except Refused as refused:
        if field is None or refused.subject != "epoch":
            raise
        raise StateError(refusal(field, refused.found, refused.expected, "use a checkpoint written for this "
                                 "dataset", why="the state is damaged or was written for another dataset")) from None
