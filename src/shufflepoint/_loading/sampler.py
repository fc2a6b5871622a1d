"""Samplers on top of the plan: the rank's index stream, and a DistributedSampler drop-in."""

from __future__ import annotations

import itertools
import os
import warnings
from collections.abc import Iterator, Sized
from typing import Any

import numpy as np
from torch.utils.data.distributed import DistributedSampler

from shufflepoint._core import state as _state
from shufflepoint._core.history import MAX_EPOCH, History, Place, place_after
from shufflepoint._core.plan import STRIDED, Layout, StridedCut, cut
from shufflepoint._core.spans import NAME as SPANS
from shufflepoint._core.spans import SpanCut
from shufflepoint._core.spanskips import Cut
from shufflepoint._loading.agreement import validate_everywhere
from shufflepoint._loading.capabilities import deal_for, schedule_hooks
from shufflepoint._loading.mesh import sampler_world  # imports this module's resolve_world lazily
from shufflepoint._loading.orders import OrderCache, explain_fingerprint, resolve_fingerprint
from shufflepoint._loading.progress import Progress
from shufflepoint._order import (
    Order,
    check_int,
)
from shufflepoint._shards.blocks import NAME as BLOCKS

# First chunks are small so a resume reaches its first batch fast; later ones amortise numpy calls.
# The largest bounds the working set: 8192 indices as Python ints plus numpy temporaries stay
# < 1 MiB at any n (benchmarks/results.md, memory), still far above what a loader consumes.
_FIRST_CHUNK, _MAX_CHUNK = 1 << 8, 1 << 13


def resolve_world(world_size: int | None, rank: int | None) -> tuple[int, int]:
    """(world_size, rank): given values, else the initialised process group's, else (1, 0)."""
    import torch.distributed as dist

    initialised = dist.is_available() and dist.is_initialized()
    if world_size is None:
        world_size = dist.get_world_size() if initialised else 1
    if rank is None:
        rank = dist.get_rank() if initialised else 0
    check_int("world_size", world_size, 1, 2**31)
    check_int("rank", rank, 0, 2**31)
    if rank >= world_size:
        raise ValueError(f"rank: found {rank}, expected an int in [0, world_size={world_size})")
    return int(world_size), int(rank)


def dataset_length(dataset: object) -> int:
    if not isinstance(dataset, Sized):
        raise TypeError(
            f"dataset: found {type(dataset).__name__} without __len__, expected a map-style dataset "
            "(one with __getitem__ and __len__); an IterableDataset has no seekable order"
        )
    return len(dataset)


class Deal:
    """The deal a loader or sampler reads with: ``strided`` or ``spans``, chosen or defaulted.

    ``deal=None`` picks ``spans`` for a corpus order (``blocks``, ``mixture``), so a node reads its
    own share of the shards, and ``strided`` (DistributedSampler's) for anything else. A deal left
    to the default follows the deal a loaded state records (a 0.2 state of a corpus: ``strided``).
    """

    def __init__(self, name: str | None, orders: OrderCache) -> None:
        self.chosen = name is not None  # deal_for checks the name, and a dataset that needs one deal (Mixture's)
        self.name: str = deal_for(name, SPANS if orders.is_corpus else STRIDED, orders._dataset)

    def for_state(self, state: object) -> Deal:
        """This deal, or the state's when this one was left to the default (adopted once valid)."""
        found = state.get("deal", STRIDED) if isinstance(state, dict) else None
        if self.chosen or found not in _state.DEALS or found == self.name:
            return self
        adopted = Deal.__new__(Deal)
        adopted.chosen, adopted.name = False, str(found)
        return adopted

    def cut(self, layout: Layout, cursor: int, segments: list[list[int]],
            parts: int | None = None) -> StridedCut | SpanCut:
        return cut(layout, self.name, cursor, segments, parts)


def warn_if_blocks_exceed_the_share(orders: OrderCache, deal: Deal, n: int, world_size: int) -> None:
    """Under ``spans`` a node reads its share of the corpus; a ``shuffle_block`` of more than half of
    it makes the order's blocks as large as the stretches (the shuffle is capped at a stretch), and
    after a re-deal a block cut by a new edge is read by two nodes. Said once, at construction."""
    if deal.name != SPANS or orders.name != BLOCKS:
        return  # a dataset's own order (Mixture, Packed) counts its shuffle_block in its own units
    local_env = os.environ.get("LOCAL_WORLD_SIZE", "")
    local = int(local_env) if local_env.isdigit() else world_size  # unknown (not torchrun): one node
    if world_size <= max(local, 1):
        return  # one node reads the whole corpus anyway
    share = n * min(local, world_size) // world_size
    if orders.shuffle_block is not None and orders.shuffle_block * 2 > share:
        warnings.warn(
            f"shuffle_block: {orders.shuffle_block} rows is more than half of a node's share of the corpus "
            f"({share} of {n} rows over {world_size} ranks, {local} per node): the shuffle cannot reach "
            "beyond a rank's stretch, and after a change of world size a block cut by a new node edge is "
            f"fetched by two nodes. Use shuffle_block <= {max(share // 8, 1)} (docs/shards.md, 'Choosing "
            "shuffle_block').", UserWarning, stacklevel=3,
        )


def rank_chunks(order: Order, deal: Cut,
                rank: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """This rank's (epoch positions, sample indices) from ``deal``'s start to the end of the epoch."""
    total = deal.samples_per_rank()
    start, size = 0, _FIRST_CHUNK
    while start < total:
        stop = min(start + size, total)
        positions = deal.rank_positions(rank, start, stop)
        yield positions, order.take(positions)
        start, size = stop, min(size * 4, _MAX_CHUNK)


def rank_index_chunks(order: Order, deal: StridedCut | SpanCut, rank: int) -> Iterator[list[int]]:
    """This rank's sample indices from ``deal``'s start to the end of the epoch, as lists of ints."""
    for _, indices in rank_chunks(order, deal, rank):
        yield indices.tolist()


class ResumableSampler(DistributedSampler[int]):
    """``DistributedSampler`` with the same arguments and order layout, plus an exact state.

    Use it wherever a ``DistributedSampler`` goes (a plain ``DataLoader``, torchdata's
    ``StatefulDataLoader``, Lightning): call ``set_epoch(epoch)`` at the start of every epoch as
    usual. ``state_dict()`` counts the indices this sampler's current iterator has yielded; under
    ``StatefulDataLoader`` (any ``num_workers``) and under a plain ``DataLoader`` with
    ``num_workers=0`` that is exactly what the training loop received. (A plain ``DataLoader``
    with workers prefetches ahead of the loop: use ``shufflepoint.DataLoader`` there.)

    ``order="torch"`` reproduces ``DistributedSampler``'s own order exactly, so a running job can
    switch to this class mid-training without a jump in its data order.

    >>> sampler = ResumableSampler(range(10), num_replicas=2, rank=0, seed=7)
    >>> it = iter(sampler); first = [next(it) for _ in range(2)]
    >>> state = sampler.state_dict()              # cursor: 4 positions of the global stream
    >>> fresh = ResumableSampler(range(10), num_replicas=2, rank=0, seed=7)
    >>> fresh.load_state_dict(state)
    >>> list(fresh) == list(it)
    True
    """

    def __init__(
        self,
        dataset: Any,
        num_replicas: int | None = None,
        rank: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
        *,
        order: str | None = None,
        shuffle_block: int | None = None,
        deal: str | None = None,
        dataset_fingerprint: str | None = None,
        verify_ranks: bool = True,
        mesh: Any = None, process_group: Any = None,
    ) -> None:
        world_size, rank, self._groups = sampler_world(num_replicas, rank, mesh, process_group)
        n = dataset_length(dataset)
        check_int("seed", seed, 0, 2**64 - 1)
        if not isinstance(shuffle, bool):
            raise TypeError(f"shuffle: found {shuffle!r}, expected a bool")
        super().__init__(dataset, num_replicas=world_size, rank=rank, shuffle=shuffle, seed=seed,
                         drop_last=drop_last)
        self._layout = Layout(n, world_size, 1, drop_last)
        self._orders = OrderCache(order if shuffle else "identity", n, seed, dataset=dataset,
                                  shuffle_block=shuffle_block if shuffle else None)
        self._deal = Deal(deal, self._orders)
        warn_if_blocks_exceed_the_share(self._orders, self._deal, n, world_size)
        self._fingerprint = resolve_fingerprint(dataset_fingerprint, dataset, n, self._orders)
        self._legacy_fingerprint = resolve_fingerprint(dataset_fingerprint, dataset, n, self._orders,
                                                       "legacy_fingerprint")
        self._explain = explain_fingerprint(dataset)
        self._compatible = schedule_hooks(dataset, self._orders.shuffle_block)
        self._verify_ranks = bool(verify_ranks)
        self._pending: StridedCut | SpanCut | None = None  # from load_state_dict, for the next __iter__
        self._active: Progress | None = None
        self._steps = 0  # samples yielded since the run began, before the active iterator
        self._history = History.begin(n, self._deal.name, self._layout, Place(0, 0))

    @property
    def deal(self) -> str:
        """``strided`` or ``spans``: who reads which positions of the epoch."""
        return self._deal.name

    def _start(self) -> StridedCut | SpanCut:
        if self._pending is not None:
            return self._pending
        return self._deal.cut(self._layout, 0, [], self._history.parts())

    def __iter__(self) -> Iterator[int]:
        start, self._pending = self._start(), None
        chunks = rank_index_chunks(self._orders.get(self.epoch, start), start, self.rank)
        self._record(self.epoch, start)
        self._active = Progress(self.epoch, start)
        return itertools.chain.from_iterable(self._active.track(chunks))

    def __len__(self) -> int:
        return self._layout.samples_per_rank(0)

    def set_epoch(self, epoch: int) -> None:
        """Start ``epoch`` at its first sample; the current epoch again keeps a restored position."""
        check_int("epoch", epoch, 0, MAX_EPOCH)
        if epoch != self.epoch:
            self._record(epoch, self._deal.cut(self._layout, 0, []))
            self.epoch, self._pending, self._active = int(epoch), None, None

    def _record(self, epoch: int, start: StridedCut | SpanCut) -> None:
        """The run reads from ``start`` of ``epoch`` next: counted and recorded in its history."""
        steps = self._steps + (self._active.yielded if self._active is not None else 0)
        self._history = self._history.record(steps, self._layout, place_after(epoch, start, 0))
        self._steps = steps

    def _position(self) -> tuple[int, list[list[int]]]:
        active = self._active
        if self._pending is not None or active is None or active.epoch != self.epoch:
            return self._start().after(0)
        return active.cut.after(active.yielded)

    @property
    def cursor(self) -> int:
        """Positions of this epoch's global stream handed out, over all ranks."""
        return self._position()[0]

    def state_dict(self) -> dict[str, Any]:
        cursor, segments = self._position()
        steps = self._steps + (self._active.yielded if self._active is not None else 0)
        place = Place(self.epoch, cursor, tuple((w, t) for w, t in segments))
        return _state.build(
            kind="sampler", seed=self.seed, epoch=self.epoch, cursor=cursor, n=self._layout.n,
            shuffle=self.shuffle, order=self._orders.name, order_version=self._orders.version,
            world_size=self._layout.world_size, batch_size=1, drop_last=self.drop_last,
            dataset_fingerprint=self._fingerprint, deal=self._deal.name, segments=segments, steps=steps,
            # recorded here too: ``sampler.epoch`` may have been set directly (DistributedSampler's attribute)
            history=self._history.record(steps, self._layout, place), parameters=self._orders.parameters,
        )

    def load_state_dict(
        self, state: dict[str, Any], *, strict: bool = True, verify_ranks: bool | None = None,
    ) -> None:
        """Make the next ``iter()`` continue where the state's run was. Refused loads change nothing.

        The state's epoch wins over the sampler's, except that a state of a *finished* epoch never
        moves the sampler back from a later epoch already chosen with ``set_epoch``. Rank agreement
        and ``strict`` work as in ``shufflepoint.DataLoader.load_state_dict``.
        """
        orders, deal = self._orders.for_state(state), self._deal.for_state(state)
        position = validate_everywhere(
            state, self._expected(orders, deal), strict=strict, rank=self.rank, world_size=self._layout.world_size,
            verify_ranks=self._verify_ranks if verify_ranks is None else verify_ranks, groups=self._groups,
        )
        self._orders, self._deal = orders, deal
        start = deal.cut(self._layout, position.cursor, position.segments)
        self._steps, self._history, self._active = position.steps, position.history, None
        if start.samples_per_rank() == 0 and self.epoch > position.epoch:
            # A finished epoch says nothing about a later epoch the loop already chose with
            # set_epoch (torchdata applies a loaded state lazily, after the loop's set_epoch).
            self._pending = None
            self._record(self.epoch, deal.cut(self._layout, 0, []))
            return
        self._record(position.epoch, start)
        start = deal.cut(self._layout, position.cursor, position.segments, self._history.parts())
        self.epoch, self._pending = position.epoch, start

    def _expected(self, orders: OrderCache, deal: Deal) -> _state.Expected:
        return _state.Expected(
            kind="sampler", n=self._layout.n, seed=self.seed, shuffle=self.shuffle,
            order=orders.name, order_version=orders.version,
            dataset_fingerprint=self._fingerprint, explain_fingerprint=self._explain, deal=deal.name,
            legacy_fingerprint=self._legacy_fingerprint, layout=self._layout,
            parameters=orders.parameters, phases_changed=self._compatible,
        )


__all__ = ["ResumableSampler"]
