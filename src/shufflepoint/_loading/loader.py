"""``shufflepoint.DataLoader``: a torch DataLoader that shards, shuffles and resumes by arithmetic."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch.utils.data

from shufflepoint._core import state as _state
from shufflepoint._core.plan import Layout, StridedCut
from shufflepoint._core.spans import SpanCut
from shufflepoint._loading.agreement import validate_everywhere
from shufflepoint._loading.block_choice import adopt_recorded_block
from shufflepoint._loading.keyed import KeyedCollate, KeyedDataset, Transform, keyed_chunks
from shufflepoint._loading.sampler import (
    Deal,
    OrderCache,
    dataset_length,
    explain_fingerprint,
    rank_chunks,
    resolve_fingerprint,
    resolve_world,
    warn_if_blocks_exceed_the_share,
)
from shufflepoint._order import check_int
from shufflepoint._shards.batch import collate as columnar_collate


class _Pass:
    """One run of ``iter(loader)`` over (part of) an epoch: where it started, what was received."""

    __slots__ = ("epoch", "cut", "received")

    def __init__(self, epoch: int, start: StridedCut | SpanCut) -> None:
        self.epoch, self.cut, self.received = epoch, start, 0


Chunk = tuple[np.ndarray, np.ndarray]  # (epoch positions, dataset indices)


def _announced(chunks: Iterator[Chunk], prefetch: Callable[[np.ndarray], None]) -> Iterator[Chunk]:
    """Tell the dataset (``Shards``) each chunk of upcoming indices one chunk before it is served,
    so that its shards are downloading while the current chunk is read."""
    current = next(chunks, None)
    if current is not None:
        prefetch(current[1])
    while current is not None:
        upcoming = next(chunks, None)
        if upcoming is not None:
            prefetch(upcoming[1])
        yield current
        current = upcoming


def _check_keyed(transform: Transform | None, seed_per_sample: bool) -> bool:
    """Whether samples draw keyed randomness (the loader then wraps the dataset, see ``keyed``)."""
    if transform is not None and not callable(transform):
        raise TypeError(f"transform: found {transform!r}, expected a callable fn(sample, rng) or None")
    if not isinstance(seed_per_sample, bool):
        raise TypeError(f"seed_per_sample: found {seed_per_sample!r}, expected a bool")
    return transform is not None or seed_per_sample


def _served(dataset: Any, seed: int, transform: Transform | None, seed_per_sample: bool,
            torch_kwargs: dict[str, Any]) -> Any:
    """The dataset torch's machinery reads, and its collate (set in ``torch_kwargs``): a corpus that reads a
    batch at once (Shards, Mixture) hands it over as columns, which ``collate`` turns into default_collate's
    very result without an object per row; keyed randomness wraps the dataset (see ``keyed``)."""
    keyed = transform is not None or seed_per_sample
    if torch_kwargs.get("collate_fn") is None and not keyed and callable(getattr(dataset, "columnar", None)):
        dataset = dataset.columnar()
        torch_kwargs["collate_fn"] = columnar_collate
    if keyed:
        dataset = KeyedDataset(dataset, seed, transform, seed_per_sample)
        if seed_per_sample:
            collate = torch_kwargs.get("collate_fn") or torch.utils.data.default_collate
            torch_kwargs["collate_fn"] = KeyedCollate(collate, seed)
    return dataset


class _PassSampler(torch.utils.data.Sampler[Any]):
    """The index sampler torch's machinery drives: this rank's indices for the loader's live pass
    (keys ``(epoch, position, index)`` instead when samples draw keyed randomness)."""

    def __init__(self, loader: DataLoader) -> None:
        self._loader = loader

    def __iter__(self) -> Iterator[Any]:
        loader = self._loader
        live = loader._pass
        if live is None:
            raise RuntimeError(
                "shufflepoint.DataLoader: its sampler is being iterated by another loader (found: "
                "iteration outside iter(loader); expected: batches taken through the "
                "shufflepoint.DataLoader, which counts them). Likely cause: accelerator.prepare(loader) "
                "without shufflepoint.patch_accelerate(), which rebuilds the loader and shards it a "
                "second time, so each rank would see part of its shard and the position would never "
                "advance. Fix: call shufflepoint.patch_accelerate() before accelerator.prepare(...)."
            )
        order = loader._orders.get(live.epoch, live.cut)
        chunks = rank_chunks(order, live.cut, loader._rank)
        prefetch = getattr(loader.dataset, "prefetch", None)
        if callable(prefetch):
            chunks = _announced(chunks, prefetch)
        if loader._keyed:
            return itertools.chain.from_iterable(keyed_chunks(chunks, live.epoch))
        return itertools.chain.from_iterable(indices.tolist() for _, indices in chunks)

    def __len__(self) -> int:
        return self._loader._layout.samples_per_rank(0)

    def set_epoch(self, epoch: int) -> None:
        """Frameworks call ``loader.sampler.set_epoch(e)`` each epoch (Lightning, HF Trainer): forward it.

        Lightning ends an epoch by counting ``len(loader)`` batches, never asking for one more, so
        the loader cannot see the end by itself; this call is how it learns the new epoch.
        """
        self._loader.set_epoch(epoch)


class DataLoader(torch.utils.data.DataLoader[Any]):
    """A ``torch.utils.data.DataLoader`` whose data order survives a restart exactly.

    It shards the dataset over the ranks itself (like ``DistributedSampler``), shuffles with a
    seekable order that is a pure function of (seed, epoch, position), and counts what the
    training loop *received* (not what workers prefetched). Its whole state is a few integers,
    identical on every rank::

        loader = shufflepoint.DataLoader(dataset, batch_size=32, seed=1234, num_workers=2)
        for epoch in range(loader.epoch, epochs):     # loader.epoch: 0, or the restored epoch
            for batch in loader:                       # each iter() continues the current epoch
                ...
                torch.save({"loader": loader.state_dict(), ...}, path)

        # in new processes, maybe with another world size or batch size:
        loader.load_state_dict(torch.load(path)["loader"])   # the next batch is the right one

    Epochs: ``iter(loader)`` continues the current epoch from the cursor; when a pass is exhausted
    the loader moves to the next epoch by itself. ``set_epoch(e)`` jumps to the start of epoch e;
    calling it with the current epoch is a no-op, so a restored mid-epoch cursor survives loops
    that call ``set_epoch`` every epoch. ``rank``/``world_size`` default to the initialised
    process group, else 0 and 1. ``sampler``/``batch_sampler`` cannot be passed: the order is ours.

    Augmentations that survive a resume: ``transform=fn`` calls ``fn(sample, rng)`` with the
    sample's own ``numpy.random.Generator``, keyed by (seed, epoch, index); ``seed_per_sample=True``
    seeds torch, numpy and ``random`` from that key around ``dataset[i]`` (and from the batch's key
    around ``collate_fn``), then restores them. Any rank, worker or resume draws the same numbers.
    ``loader.dataset`` is then a thin wrapper whose ``.dataset`` is yours (so it is for a ``Shards`` or
    ``Mixture`` without a ``collate_fn`` of yours: its batches are read and collated as columns).
    """

    def __init__(
        self,
        dataset: Any,
        batch_size: int,
        *,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
        num_workers: int = 0,
        rank: int | None = None,
        world_size: int | None = None,
        order: str | None = None,
        shuffle_block: int | None = None,
        deal: str | None = None,
        dataset_fingerprint: str | None = None,
        verify_ranks: bool = True,
        transform: Transform | None = None,
        seed_per_sample: bool = False,
        **torch_dataloader_kwargs: Any,
    ) -> None:
        taken = sorted({"sampler", "batch_sampler"} & torch_dataloader_kwargs.keys())
        if taken:
            raise TypeError(
                f"shufflepoint.DataLoader got {', '.join(taken)}: it builds its own order and "
                "sharding; use seed=, shuffle=, order= instead, or shufflepoint.ResumableSampler "
                "with a plain torch DataLoader"
            )
        if not isinstance(shuffle, bool):
            raise TypeError(f"shuffle: found {shuffle!r}, expected a bool")
        world_size, rank = resolve_world(world_size, rank)
        self._layout = Layout(dataset_length(dataset), world_size, batch_size, drop_last)
        self._verify_ranks = bool(verify_ranks)
        self._rank = rank
        self._seed = check_int("seed", seed, 0, 2**64 - 1)
        self._shuffle = shuffle
        self._orders = OrderCache(order if shuffle else "identity", self._layout.n, self._seed, dataset=dataset,
                                  shuffle_block=shuffle_block if shuffle else None)
        self._deal = Deal(deal, self._orders)
        warn_if_blocks_exceed_the_share(self._orders, self._deal, self._layout.n, world_size)
        self._fingerprint = resolve_fingerprint(dataset_fingerprint, dataset, self._layout.n, self._orders)
        self._legacy_fingerprint = resolve_fingerprint(dataset_fingerprint, dataset, self._layout.n, self._orders,
                                                       "legacy_fingerprint")
        self._explain = explain_fingerprint(dataset)
        self._fingerprint_arg = dataset_fingerprint
        self._epoch = 0
        self._start: StridedCut | SpanCut = self._deal.cut(self._layout, 0, [])  # where the next pass starts
        self._pass: _Pass | None = None
        self._keyed = _check_keyed(transform, seed_per_sample)
        dataset = _served(dataset, self._seed, transform, seed_per_sample, torch_dataloader_kwargs)
        super().__init__(
            dataset, batch_size=batch_size, sampler=_PassSampler(self), drop_last=drop_last,
            num_workers=num_workers, **torch_dataloader_kwargs,
        )

    # -- position ----------------------------------------------------------------------------
    @property
    def epoch(self) -> int:
        """The epoch the next batch belongs to."""
        return self._pass.epoch if self._pass is not None else self._epoch

    def _position(self) -> tuple[int, list[list[int]]]:
        """(cursor, segments): what the training loop has received of this epoch."""
        live = self._pass
        if live is None:
            return self._start.after(0)
        return live.cut.after(self._layout.batch_size * live.received)

    @property
    def cursor(self) -> int:
        """Positions of this epoch's global stream that the training loop has received (all ranks)."""
        return self._position()[0]

    @property
    def deal(self) -> str:
        """``strided`` or ``spans``: who reads which positions of the epoch (see ``docs/shards.md``)."""
        return self._deal.name

    def _left(self) -> tuple[StridedCut | SpanCut, int]:
        live = self._pass
        return (live.cut, self._layout.batch_size * live.received) if live is not None else (self._start, 0)

    def samples_left(self) -> int:
        """Samples each rank still receives in the current epoch, tail padding included."""
        start, done = self._left()
        return max(start.samples_per_rank() - done, 0)

    def batches_left(self) -> int:
        """Batches each rank still receives in the current epoch (the same on every rank)."""
        return -(-self.samples_left() // self._layout.batch_size)

    def real_samples_left(self, rank: int) -> int:
        """Of ``rank``'s samples still to come in this epoch, how many are not tail padding."""
        start, done = self._left()
        return max(start.real_samples(rank) - done, 0)

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def world_size(self) -> int:
        return self._layout.world_size

    @property
    def seed(self) -> int:
        return self._seed

    def set_epoch(self, epoch: int) -> None:
        """Jump to the first batch of ``epoch``. The current epoch again changes nothing."""
        check_int("epoch", epoch, 0, 2**62)
        if epoch != self.epoch:
            self._pass, self._epoch, self._start = None, int(epoch), self._deal.cut(self._layout, 0, [])

    def seek(self, epoch: int, batches: int = 0) -> None:
        """Go to ``epoch`` after its first ``batches`` batches per rank: O(1), no sample is read.

        What ``skip_first_batches`` does by replaying, done by arithmetic: e.g. the Hugging Face
        Trainer's ``divmod(global_step, len(loader))`` turned into a position. With the same world
        size and batch size as the run being continued, the next batch is exactly its next batch.
        """
        check_int("epoch", epoch, 0, 2**62)
        check_int("batches", batches, 0, 2**62)
        self._pass, self._epoch = None, int(epoch)
        fresh = self._deal.cut(self._layout, 0, [])
        cursor, segments = fresh.after(int(batches) * self._layout.batch_size)
        self._start = self._deal.cut(self._layout, cursor, segments)

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        epoch, (cursor, segments) = self.epoch, self._position()
        start = self._deal.cut(self._layout, cursor, segments)
        live = _Pass(epoch, start)
        self._pass, self._epoch, self._start = live, epoch, start
        return self._count(super().__iter__(), live)

    def _count(self, batches: Iterator[Any], live: _Pass) -> Iterator[Any]:
        for batch in batches:
            if self._pass is not live:
                raise RuntimeError(
                    "this iterator was superseded by a newer iter(loader), set_epoch() or "
                    "load_state_dict(); iterate the newest one"
                )
            live.received += 1
            yield batch
        if self._pass is live:  # the pass is exhausted: the epoch is over
            self._pass, self._epoch = None, live.epoch + 1
            self._start = self._deal.cut(self._layout, 0, [])

    def __len__(self) -> int:
        """Batches per epoch on this rank (a whole epoch, whatever the cursor)."""
        return self._layout.batches_per_rank(0)

    # -- state -------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """What the training loop has received, as a small dict of JSON values, same on all ranks."""
        cursor, segments = self._position()
        return _state.build(
            kind="loader", seed=self._seed, epoch=self.epoch, cursor=cursor, n=self._layout.n,
            shuffle=self._shuffle, order=self._orders.name, order_version=self._orders.version,
            world_size=self._layout.world_size, batch_size=self._layout.batch_size,
            drop_last=self._layout.drop_last, dataset_fingerprint=self._fingerprint,
            deal=self._deal.name, segments=segments,
        )

    def load_state_dict(
        self, state: dict[str, Any], *, strict: bool = True, verify_ranks: bool | None = None,
    ) -> None:
        """Make the next batches exactly those the saved run would have received next.

        The state may come from any rank and from another world size or batch size (the rest of
        the epoch is re-dealt, each sample once). A refused state raises ``StateError`` and
        changes nothing. In a process group that matches this loader's ranks, one small collective
        checks that every rank loaded the same state (``verify_ranks=False``, here or in the
        constructor, skips it when you load on a subset of ranks on purpose). ``strict=False``
        accepts a changed ``dataset_fingerprint`` with a ``ResumeWarning``.
        """
        rebuild = lambda name, block: OrderCache(name, self._layout.n, self._seed, dataset=self.dataset,  # noqa: E731
                                                 shuffle_block=block)
        orders = adopt_recorded_block(self._orders, state, rebuild) or self._orders.for_state(state)
        deal = self._deal.for_state(state)
        position = validate_everywhere(
            state, self._expected(orders, deal), strict=strict, rank=self._rank, world_size=self._layout.world_size,
            verify_ranks=self._verify_ranks if verify_ranks is None else verify_ranks,
        )
        start = deal.cut(self._layout, position.cursor, position.segments)
        if orders.shuffle_block != self._orders.shuffle_block:  # a state's block adopted: its fingerprint too
            self._fingerprint, self._legacy_fingerprint = self._fingerprint_of(orders)
        self._orders, self._deal, self._pass, self._epoch, self._start = orders, deal, None, position.epoch, start

    def _fingerprint_of(self, orders: OrderCache) -> tuple[str | None, str | None]:
        """(fingerprint, legacy fingerprint) of the dataset read in ``orders`` (its block joins a corpus's;
        a block adopted from a state is only ever a corpus's, whose wrappers pass ``fingerprint`` on)."""
        dataset = self.dataset
        return (resolve_fingerprint(self._fingerprint_arg, dataset, self._layout.n, orders),
                resolve_fingerprint(self._fingerprint_arg, dataset, self._layout.n, orders, "legacy_fingerprint"))

    def _expected(self, orders: OrderCache, deal: Deal) -> _state.Expected:
        fingerprint, legacy = ((self._fingerprint, self._legacy_fingerprint)
                               if orders.shuffle_block == self._orders.shuffle_block else self._fingerprint_of(orders))
        return _state.Expected(
            kind="loader", n=self._layout.n, seed=self._seed, shuffle=self._shuffle,
            order=orders.name, order_version=orders.version,
            dataset_fingerprint=fingerprint, explain_fingerprint=self._explain, deal=deal.name,
            legacy_fingerprint=legacy,
        )
