"""``shufflepoint.DataLoader``: the torch adapter around the position model (``position.py``).

It hands torch's machinery this rank's indices for the live pass (``_PassSampler``), counts the
batches the training loop receives, and forwards every question and change of position to its
``LoaderPosition``; a state load is validated and agreed on across ranks here, and placed there.

Words: docs/glossary.md (batch, rank, world size, state, resume, iterator).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import time
from collections.abc import Callable, Iterator
from typing import Any, Literal, overload

import numpy as np
import torch.utils.data

from shufflepoint._core.capabilities import Locatable
from shufflepoint._core.exclusion import Exclusion
from shufflepoint._core.plan import Layout
from shufflepoint._core.skips import over_limit, slot_replacements
from shufflepoint._errors import Plain, refusal
from shufflepoint._loading.agreement import agree_on_exclusion, agree_on_weights, validate_everywhere, watch_gloo_exit
from shufflepoint._loading.bucketed import bucketed
from shufflepoint._loading.capabilities import dataset_length, is_scheduled, tell_density, tell_share
from shufflepoint._loading.deal import deal_of, rank_chunks, warn_if_blocks_exceed_the_share
from shufflepoint._loading.keyed import Transform, keyed_chunks
from shufflepoint._loading.mesh import resolve_data_parallel
from shufflepoint._loading.orders import Identity, OrderCache
from shufflepoint._loading.position import LoaderPosition, Pass, expected_state
from shufflepoint._loading.serving import (
    announced,
    announcer,
    check_arguments,
    check_keyed,
    rank_density,
    served,
    threaded,
)
from shufflepoint._loading.skipping import (
    GaveUp,
    SkippingDataset,
    WithSkips,
    agree_on_skips,
    can_exclude,
    check_skipping,
    replacement_groups,
    served_skipping,
    stop_text,
)
from shufflepoint._loading.wait import CountedBatches, DataWait, TimedCollate, WaitMeter, prefetch_limit
from shufflepoint._order import check_int

_END = object()  # the end of torch's iterator


def _orders_and_deal(dataset: Any, layout: Layout, seed: int, shuffle: bool, order: str | None,
                     shuffle_block: int | None, deal: str | None, buckets: Any) -> tuple[Any, Any]:
    """The epoch orders and the deal a loader reads by: plain, or every per-rank batch one bucket (bucketed.py)."""
    if buckets is None:
        grid = layout.world_size * layout.batch_size
        orders = OrderCache(order if shuffle else "identity", layout.n, seed, dataset=dataset,
                            shuffle_block=shuffle_block if shuffle else None, grid=grid)
        dealt = deal_of(deal, orders)
    else:
        orders, dealt = bucketed(dataset, buckets, layout.n, seed, shuffle, order, deal, shuffle_block,
                                 layout.drop_last)
    warn_if_blocks_exceed_the_share(orders, dealt, layout.n, layout.world_size)
    return orders, dealt


class _PassSampler(torch.utils.data.Sampler[Any]):
    """The index sampler torch's machinery drives: this rank's indices for the position's live pass
    (keys ``(epoch, position, index)`` instead when samples draw keyed randomness)."""

    def __init__(self, position: LoaderPosition, rank: int, keyed: bool,
                 prefetch: Callable[[np.ndarray, float], None] | None) -> None:
        self._position, self._rank, self._keyed, self._prefetch = position, rank, keyed, prefetch

    def __iter__(self) -> Iterator[Any]:
        live = self._position.live
        if live is None:
            raise RuntimeError(refusal(
                "shufflepoint.DataLoader", Plain("its sampler iterated by another loader, outside iter(loader)"),
                "batches taken through the shufflepoint.DataLoader, which counts them",
                "call shufflepoint.patch_accelerate() before accelerator.prepare(...)",
                why="likely accelerator.prepare(loader) without shufflepoint.patch_accelerate(), which rebuilds the "
                "loader and shards it a second time: each rank would see part of its shard and the position would "
                "never advance"))
        order = self._position.orders.get(live.epoch, live.cut)
        chunks = rank_chunks(order, live.cut, self._rank)
        if self._prefetch is not None:
            chunks = announced(chunks, self._prefetch)
        if self._keyed:
            return itertools.chain.from_iterable(keyed_chunks(chunks, live.epoch))
        return itertools.chain.from_iterable(indices.tolist() for _, indices in chunks)

    def __len__(self) -> int:
        return self._position.epoch_layout().samples_per_rank(0)

    def set_epoch(self, epoch: int) -> None:
        """Frameworks call ``loader.sampler.set_epoch(e)`` each epoch (Lightning, HF Trainer): forward it.

        Lightning ends an epoch by counting ``len(loader)`` batches, never asking for one more, so
        the loader cannot see the end by itself; this call is how it learns the new epoch.
        """
        self._position.set_epoch(epoch)


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

    The surface: properties say where the loader stands (``epoch``, ``step``, ``cursor``, ``rank``,
    ``world_size``, ``seed``, ``deal``, ``excluded``: O(1) reads); methods compute (``batches_left()``,
    ``batches_this_epoch()``, ``which(step)``, ...) or move it (``seek``, ``set_epoch``, ``set_batch_size``,
    ``exclude``, ``load_state_dict``).

    Epochs: ``iter(loader)`` continues the current epoch from the cursor; when a pass is exhausted
    the loader moves to the next epoch by itself. ``set_epoch(e)`` jumps to the start of epoch e;
    calling it with the current epoch is a no-op, so a restored mid-epoch cursor survives loops
    that call ``set_epoch`` every epoch. ``rank``/``world_size`` default to the initialised
    process group, else 0 and 1. ``sampler``/``batch_sampler`` cannot be passed: the order is ours.

    Tensor, context or pipeline parallelism: ``mesh=device_mesh["dp"]`` (a ``DeviceMesh`` whose
    dimensions are all data-parallel, flattened if several; or ``mesh=device_mesh, mesh_dims="dp"``)
    or ``process_group=dp_group`` deals over the data-parallel ranks only, so model-parallel peers
    receive identical batches and hold identical states (see ``_loading/mesh.py``).

    Augmentations that survive a resume: ``transform=fn`` calls ``fn(sample, rng)`` with the
    sample's own ``numpy.random.Generator``, keyed by (seed, epoch, index); ``seed_per_sample=True``
    seeds torch, numpy and ``random`` from that key around ``dataset[i]`` (and from the batch's key
    around ``collate_fn``), then restores them. Any rank, worker or resume draws the same numbers.
    ``loader.dataset`` is then a thin wrapper whose ``.dataset`` is yours (so it is for a ``Shards`` or
    ``Mixture`` without a ``collate_fn`` of yours: its batches are read and collated as columns).

    Args:
        dataset: a map-style dataset (``__getitem__`` and ``__len__``): a list, a tensor dataset, a
            ``shufflepoint.Shards`` corpus, a ``Mixture`` or a ``Packed``. An ``IterableDataset`` has no
            seekable order and is refused.
        batch_size: samples per rank per batch (the global batch is ``world_size * batch_size``). It may
            change on a resume or with ``set_batch_size``; the rest of the epoch is re-dealt, each sample once.
        shuffle: False reads the epoch in index order (``order="identity"``). Default True.
        seed: an int in [0, 2**64): with the epoch, it fixes the whole order. Default 0.
        drop_last: drop the epoch's last incomplete global batch instead of padding it (padding wraps to
            the epoch's first samples, as ``DistributedSampler`` pads). Default False.
        num_workers: torch's worker processes; any number, also another one on a resume (the state counts
            what the loop received, not what workers prefetched). Default 0.
        rank: this process's data-parallel rank. Default: the initialised process group's, else 0.
        world_size: the number of data-parallel ranks. Default: the process group's, else 1.
        order: the permutation: ``"radix-feistel"`` (the default for arrays, O(1) memory), ``"feistel"``
            (0.1's default), ``"torch"`` (``DistributedSampler``'s own order, O(n)), ``"identity"``,
            ``"blocks"`` (the default for a ``Shards`` corpus). ``None``: the dataset's own order
            (``Mixture``, ``Packed``) or the default for its kind.
        shuffle_block: for ``blocks`` and a dataset's own order, the rows shuffled together: shards are
            read in a shuffled order, in runs of about this many rows shuffled inside. ``None``: a block
            fitted to the process's decode budget (``Shards``), else 65,536; a resume adopts the run's own.
        deal: who reads which positions: ``"strided"`` (``DistributedSampler``'s, rank r reads r, r+W, ...)
            or ``"spans"`` (each rank a contiguous stretch, so a node reads only its shards). ``None``:
            ``spans`` for a corpus order, ``strided`` otherwise (docs/shards.md).
        dataset_fingerprint: the dataset's identity, checked on load: your own string, ``"auto"`` (its
            length and a hash of a few items) or ``None`` (no check; a corpus always carries its index's
            content hash). A changed one is refused, or warned about with ``load_state_dict(strict=False)``.
        verify_ranks: check on load and on ``exclude`` that every rank holds the same state (one small
            collective). False skips it, e.g. when loading on a subset of ranks on purpose. Default True.
        transform: ``fn(sample, rng)`` applied to each sample with the sample's own
            ``numpy.random.Generator`` keyed by (seed, epoch, index): augmentations that survive a resume.
        seed_per_sample: seed torch, numpy and ``random`` from the sample's key around ``dataset[i]`` and
            from the batch's key around ``collate_fn``, then restore them. Default False.
        mesh: a ``DeviceMesh`` whose dimensions are all data-parallel (or the whole mesh with
            ``mesh_dims``): rank and world size come from it; model-parallel peers get identical batches.
        process_group: the data-parallel ``ProcessGroup``; rank and world size come from it.
        mesh_dims: the data-parallel dimension name(s) of ``mesh`` (e.g. ``"dp"`` or ``("dp_replicate",
            "dp_shard")``), flattened if several.
        buckets: one small int >= 0 per sample (a list or integer array of ``len(dataset)``), or the name
            of the samples' field that holds it (read once; a ``Shards`` corpus keeps them in its cache
            folder): every per-rank batch then holds one bucket, the buckets' batches interleaved evenly over the epoch;
            full batches only: with ``drop_last=False`` every sample each epoch, a bucket's last batch filled
            with its own first samples and the last step's missing batches read again from the epoch's first;
            with ``drop_last=True`` that tail dropped (either: at most K*(B-1) + (W-1)*B samples an epoch).
            ``order`` then orders each bucket. See docs/buckets.md.
        decode_threads: read each batch's samples in this many threads of the worker, in order (a slow
            sample then costs its batch its own time, not the sum; docs/video.md); a dataset that reads a batch
            in one call (``Shards``) keeps its one read and runs the transforms in the threads. Default 0.
        skip_bad_samples: True, or a dict of limits (``max_in_a_row`` 4, ``max_skips`` 16 in a ``window`` of
            1000 steps: ``_core/skips.py``): a sample that fails to read or decode (any exception of the dataset,
            a corpus's ``transform`` or ``transform`` but a programming error such as ``TypeError``) is replaced
            in its slot by a sample arithmetic chooses and excluded from the next batch on, on every rank, and kept
            in the state's record; past the limits the run stops naming every shard and row. A ``Mixture``,
            ``Packed`` or ``buckets=`` cannot exclude: the bad sample is only replaced, the same way each time it
            comes up. False (the default): a bad sample ends the run. See docs/exclusion.md#bad-samples.
        **torch_dataloader_kwargs: passed to ``torch.utils.data.DataLoader`` (``collate_fn``,
            ``pin_memory``, ``prefetch_factor``, ``persistent_workers``, ...), except ``sampler`` and
            ``batch_sampler``: the order is this loader's.
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
        mesh: Any = None,
        process_group: Any = None,
        mesh_dims: str | tuple[str, ...] | None = None,
        buckets: Any = None,
        decode_threads: int = 0,
        skip_bad_samples: bool | dict[str, int] = False,
        **torch_dataloader_kwargs: Any,
    ) -> None:
        check_arguments(shuffle, torch_dataloader_kwargs)
        world_size, rank, self._groups = resolve_data_parallel(world_size, rank, mesh=mesh, process_group=process_group,
                                                               mesh_dims=mesh_dims)
        watch_gloo_exit()  # a finished run's Gloo group is ended safely at exit (agreement.py)
        self._seed = check_int("seed", seed, 0, 2**64 - 1)
        tell_share(dataset, self._seed, rank, world_size)  # Packed: counts its share's tokens, exchanges totals
        layout = Layout(dataset_length(dataset), world_size, batch_size, drop_last)
        self._verify_ranks = bool(verify_ranks)
        self._rank = rank
        self._shuffle = shuffle
        orders, dealt = _orders_and_deal(dataset, layout, self._seed, shuffle, order, shuffle_block, deal, buckets)
        self._identity = Identity(dataset_fingerprint, dataset, orders)
        self._position = LoaderPosition(layout, orders, dealt)
        self._keyed = check_keyed(transform, seed_per_sample)
        threads = threaded(dataset, decode_threads, seed_per_sample, transform)
        self._skipping, places = check_skipping(skip_bad_samples, torch_dataloader_kwargs, self._position), dataset
        dataset = served(dataset, self._seed, transform, seed_per_sample, torch_dataloader_kwargs)
        prefetch = self._announcer(dataset)
        dataset = threads(dataset)  # inside the skipping: a batch read in threads is caught as one read
        self._skip_excludes = self._skipping is not None and can_exclude(self._position)  # else replace only
        groups = replacement_groups(places, self._position.orders, layout.n) if self._skipping is not None else None
        self._skipper: SkippingDataset | None = served_skipping(dataset, places, self._seed, layout.n, self._skipping,
                                                                torch_dataloader_kwargs, groups)
        dataset = self._skipper or dataset
        sampler = _PassSampler(self._position, rank, self._keyed, prefetch)
        collate = torch_dataloader_kwargs.get("collate_fn") or torch.utils.data.default_collate
        torch_dataloader_kwargs["collate_fn"] = TimedCollate(collate)  # the data wait (wait.py): a batch's times
        super().__init__(
            dataset, batch_size=batch_size, sampler=sampler, drop_last=drop_last,
            num_workers=num_workers, **torch_dataloader_kwargs,
        )
        # torch's BatchSampler, counting what it hands the workers (the prefetch depth); set as set_batch_size does
        object.__setattr__(self, "batch_sampler", CountedBatches(sampler, batch_size, drop_last, num_workers > 0))
        self._wait = WaitMeter(rank, prefetch_limit(num_workers, torch_dataloader_kwargs.get("prefetch_factor")))

    def _announcer(self, dataset: Any) -> Callable[[np.ndarray, float], None] | None:
        """How the sampler tells the dataset as served its upcoming indices (``serving.announcer``). A loader whose
        batches are read in other processes on other nodes (``integrations.ray``) announces nothing here: this
        process would fetch shards it never reads."""
        return announcer(dataset)

    def __repr__(self) -> str:
        position = self._position
        return (f"shufflepoint.DataLoader({type(position.orders.dataset).__name__} of {position.layout.n} samples, "
                f"epoch={position.epoch}, step={position.step}, cursor={position.cursor}, "
                f"rank={self._rank}, world_size={position.layout.world_size}, batch_size={position.layout.batch_size}, "
                f"order={position.orders.name!r}, deal={position.deal.name!r}, seed={self._seed})")

    # -- position: the model answers (position.py) --------------------------------------------
    @property
    def epoch(self) -> int:
        """The epoch the next batch belongs to."""
        return self._position.epoch

    @property
    def step(self) -> int:
        """Batches each rank has received since the run began (epoch 0, batch 0): the step ``which`` takes."""
        return self._position.step

    @property
    def cursor(self) -> int:
        """Positions of this epoch's global stream that the training loop has received (all ranks)."""
        return self._position.cursor

    @property
    def deal(self) -> str:
        """``strided`` or ``spans``: who reads which positions of the epoch (see ``docs/shards.md``)."""
        return self._position.deal.name

    def samples_left(self) -> int:
        """Samples each rank still receives in the current epoch, tail padding included."""
        return self._position.samples_left()

    def batches_left(self) -> int:
        """Batches each rank still receives in the current epoch (the same on every rank)."""
        return self._position.batches_left()

    def real_samples_left(self, rank: int) -> int:
        """Of ``rank``'s samples still to come in this epoch, how many are not tail padding."""
        return self._position.real_samples_left(rank)

    def cursor_after(self, batches: int, *, from_epoch_start: bool = False) -> int:
        """The epoch's ``cursor`` once each rank has received ``batches`` more batches, from where the
        loader stands (or from an epoch's start). Arithmetic only: the loader does not move. It stops
        growing at the epoch's end. The Trainer integration turns a ``max_steps`` budget into this
        layout's steps with it."""
        return self._position.cursor_after(batches, from_epoch_start=from_epoch_start)

    @property
    def rank(self) -> int:
        """This process's rank among the ranks the loader shards over (``rank=``, else its group's)."""
        return self._rank

    @property
    def world_size(self) -> int:
        """How many ranks the loader shards over now (after a resume, the new run's, not the state's)."""
        return self._position.layout.world_size

    @property
    def seed(self) -> int:
        """The seed of the order (``seed=``; a resume refuses a state of another)."""
        return self._seed

    def set_epoch(self, epoch: int) -> None:
        """Jump to the first batch of ``epoch``. The current epoch again changes nothing."""
        self._position.set_epoch(epoch)

    def seek(self, epoch: int, batches: int = 0) -> None:
        """Go to ``epoch`` after its first ``batches`` batches per rank: O(1), no sample is read.

        What ``skip_first_batches`` does by replaying, done by arithmetic: e.g. the Hugging Face
        Trainer's ``divmod(global_step, len(loader))`` turned into a position. With the same world
        size and batch size as the run being continued, the next batch is exactly its next batch.
        """
        self._position.seek(epoch, batches)

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        live = self._position.begin_pass()  # before torch's iterator, whose workers ask the sampler at once
        dataset = self._position.orders.dataset
        tell_density(dataset, lambda: rank_density(live.cut, self._rank))  # before the workers copy it
        dispatched = self._dispatched()  # before torch's iterator, which hands its workers batches at once
        return self._count(self._batches(), live, dispatched)

    def _batches(self) -> Iterator[Any]:
        """torch's iterator, its workers started with the excluded set as it is now (``skip_bad_samples``)."""
        if self._skipper is not None:
            self._skipper.excluded = self._position.excluded.exclusion
        return super().__iter__()

    def _dispatched(self) -> int:
        counted = self.batch_sampler
        assert isinstance(counted, CountedBatches)
        return counted.dispatched

    def _count(self, batches: Iterator[Any], live: Pass, dispatched: int) -> Iterator[Any]:
        wait, clock, received = self._wait, time.perf_counter, 0
        wait.begin()
        while True:
            current = self._position.live
            if current is not live:
                follows = current
                while follows is not None and follows is not live:
                    follows = follows.follows
                if current is None or follows is None:
                    raise RuntimeError(
                        "this iterator was superseded by a newer iter(loader), set_epoch() or "
                        "load_state_dict(); iterate the newest one"
                    )
                live = current  # set_batch_size(), exclude(): batches prefetched under the old cut are dropped
                del batches
                dispatched, received = self._dispatched(), 0
                batches = self._batches()
            start, in_flight = clock(), self._dispatched() - dispatched - received  # the prefetch depth
            batch = next(batches, _END)
            if batch is _END:
                break
            received += 1
            batch = wait.received(start, clock(), in_flight, batch)  # the worker's times taken off the batch
            if self._skipping is None:
                live.received += 1
                yield batch
                continue
            batch, skips = self._agreed(batch)
            live.received += 1
            if skips:
                self._skipped(skips)
            yield batch
        if self._position.live is live:  # the pass is exhausted: the epoch is over
            self._position.end_pass(live)

    def _agreed(self, batch: Any) -> tuple[Any, list[Any]]:
        """The batch, and the skips every rank made reading this step's batches (the same list on every rank);
        every rank raises the same error where a slot could not be filled."""
        skips, gave_up = ([], None) if not isinstance(batch, (WithSkips, GaveUp)) else \
            ((batch.skips, None) if isinstance(batch, WithSkips) else ([], batch))
        agreed, gave = agree_on_skips(skips, gave_up, self.world_size, self._rank, self._groups)
        if gave:
            raise RuntimeError(stop_text(gave, self._skipping))  # type: ignore[arg-type]
        step = self._position.step
        return (batch.batch if isinstance(batch, WithSkips) else batch,
                [dataclasses.replace(skip, step=step) for skip in agreed])

    def _skipped(self, skips: list[Any]) -> None:
        """Exclude the skipped samples from the next batch on (where the loader can) and keep them in the record;
        stop past the limit."""
        self._position.skip(skips, exclude=self._skip_excludes)
        stop = over_limit(self._position.skipped, skips[0].step, self._skipping)  # type: ignore[arg-type]
        if stop is not None:
            raise RuntimeError(stop)

    def data_wait(self, window: str | None = None) -> DataWait:
        """This rank's data wait since the loader was built: batches received, seconds waited in ``next()`` and
        their share of the loop's time, the prefetch depth, each worker's read, transform and collate seconds.
        ``window="name"``: since the last call with that name (a logger's interval; ``later - earlier`` also is
        one). O(workers); see docs/data-wait.md."""
        return self._wait.reading(window)

    def __len__(self) -> int:
        """Batches per epoch on this rank (a whole epoch, whatever the cursor; excluded samples taken out)."""
        return self._position.epoch_layout().batches_per_rank(0)

    # -- state -------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """What the training loop has received, as a small dict of JSON values, same on all ranks."""
        return self._position.state(kind="loader", seed=self._seed, shuffle=self._shuffle,
                                    dataset_fingerprint=self._identity.fingerprint)

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
        position = self._position
        validate = functools.partial(
            validate_everywhere, strict=strict, rank=self._rank, world_size=position.layout.world_size,
            verify_ranks=self._verify_ranks if verify_ranks is None else verify_ranks, groups=self._groups,
        )
        expected = functools.partial(expected_state, "loader", self._seed, self._shuffle, self._identity,
                                     position.layout)
        position.load(state, expected, validate)
        self._identity = self._identity.for_orders(position.orders)

    @overload
    def which(self, step: int, *, locate: Literal[False] = False) -> dict[int, list[int]]: ...

    @overload
    def which(self, step: int, *, locate: Literal[True]) -> dict[int, list[dict[str, Any]]]: ...

    def which(self, step: int, *, locate: bool = False) -> dict[int, list[int]] | dict[int, list[dict[str, Any]]]:
        """For each rank of the world that read ``step`` (see ``step``), the dataset indices of its batch,
        by arithmetic from the run's layout history in the state (``docs/state-format.md#which``): load
        any state saved at or after ``step``, on any rank and world size. Later steps: this loader's layout.
        With samples excluded: the steps before the first ``exclude()`` and from the latest on (docs/exclusion.md);
        with ``skip_bad_samples``, every step while the state's record holds every skip.

        ``locate=True``: where each sample lives instead of its index, the dataset's ``locate(index)`` (a
        ``Shards`` corpus: shard, row, bytes; ``Packed``: its documents' token spans), ``{"index": i}`` for a
        dataset that cannot say more."""
        found = self._position.which(step)
        slots = slot_replacements(self._position.skipped, step)  # a skipped sample's slot held its replacement
        if slots:
            found = {rank: [slots.get(i, i) for i in indices] for rank, indices in found.items()}
        if not locate:
            return found
        dataset = self._position.orders.dataset
        return {rank: [dataset.locate(i) if isinstance(dataset, Locatable) else {"index": i} for i in indices]
                for rank, indices in found.items()}

    def batches_this_epoch(self) -> int | None:
        """Batches each rank has received of the current epoch, whatever changed inside it (an ``exclude``,
        a ``set_batch_size``): the steps since the one the epoch began at, found in the run's history (binary
        search; O(log steps) placements). None where the history cannot tell (its first legs were dropped, or
        steps between two exclusions lie in this epoch)."""
        return self._position.batches_this_epoch()

    def set_batch_size(self, batch_size: int) -> None:
        """Read on in batches of ``batch_size`` per rank from the next batch, recorded in the run's history.

        Between two batches of a live iterator, that iterator drops what its workers prefetched at
        the old size and goes on at the new one from exactly the position received (docs/state-format.md).
        """
        self._position.set_batch_size(batch_size)
        batch_size = self._position.layout.batch_size
        object.__setattr__(self, "batch_size", batch_size)  # torch refuses a plain assignment after __init__
        self.batch_sampler.batch_size = batch_size  # type: ignore[union-attr]

    def set_weights(self, weights: Any) -> None:
        """Read a scheduled ``Mixture`` by ``weights`` from the next global batch on: one weight >= 0 per source
        (a list, or a dict naming every source by its number), not all 0.

        Call it between two batches with the same weights on every rank (checked like ``exclude``). It is a
        phase appended to the schedule at the run position reached, kept in the state with its weights: a resume
        on the same world continues exactly, another world serves every row once, ``which`` answers steps before
        and after it. Under ``spans`` (the default deal) too: the rest of the epoch's rows of each source are laid
        anew from the change, those laid before it kept, so each source's passes stay whole. Refused with
        nothing changed: another dataset, a Mixture without ``schedule=`` or with ``max_repeats``, bad weights,
        a later phase already scheduled. See docs/shards.md#weights-changed-while-training.
        """
        dataset = self._position.orders.dataset
        if is_scheduled(dataset):
            agree_on_weights(weights, self._rank, self.world_size, self._verify_ranks, self._groups)
        self._position.set_weights(weights)

    @property
    def excluded(self) -> Exclusion:
        """The dataset indices this run never serves again (``exclude``), as sorted ranges."""
        return self._position.excluded.exclusion

    def exclude(self, indices: Any) -> None:
        """Never serve these dataset indices again: from the next batch on, in this epoch and every later one.

        Every other sample is still served once per epoch. Call it with the same indices (ints, a
        range, a numpy or torch integer array) on every rank: checked like ``load_state_dict``. The
        state keeps them as sorted ranges: a resume on the same world continues exactly this run's
        stream, another world deals the rest of the epoch, each remaining sample once. Refused with
        nothing changed: bad indices, over 131,072 ranges, orders without an inverse (``Mixture``,
        ``Packed``). Under ``spans`` it re-deals what is left of the epoch (``_core/spanskips.py``).
        See docs/exclusion.md.
        """
        added, merged = self._position.exclusion_with(indices)
        agree_on_exclusion(added, self._rank, self.world_size, self._verify_ranks, self._groups)
        self._position.exclude(merged)
