"""``shufflepoint.DataLoader``: a torch DataLoader that shards, shuffles and resumes by arithmetic."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import torch.utils.data

from shufflepoint._core import state as _state
from shufflepoint._core.history import MAX_EPOCH, History, Place, place_after
from shufflepoint._core.plan import Layout
from shufflepoint._core.spanskips import Cut
from shufflepoint._loading.agreement import validate_everywhere
from shufflepoint._loading.block_choice import orders_for_state
from shufflepoint._loading.capabilities import check_grid, schedule_hooks
from shufflepoint._loading.excluded_steps import arrived
from shufflepoint._loading.excluding import Excluded, ExclusionMixin
from shufflepoint._loading.keyed import Transform, keyed_chunks
from shufflepoint._loading.mesh import resolve_data_parallel
from shufflepoint._loading.orders import OrderCache, explain_fingerprint, resolve_fingerprint, within_bounds
from shufflepoint._loading.sampler import Deal, dataset_length, rank_chunks, warn_if_blocks_exceed_the_share
from shufflepoint._loading.serving import announced, check_arguments, check_keyed, served
from shufflepoint._loading.steps import Lookup, Pass
from shufflepoint._order import check_int

_END = object()  # the end of torch's iterator


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
            chunks = announced(chunks, prefetch)
        if loader._keyed:
            return itertools.chain.from_iterable(keyed_chunks(chunks, live.epoch))
        return itertools.chain.from_iterable(indices.tolist() for _, indices in chunks)

    def __len__(self) -> int:
        return self._loader._excluded.epoch_layout(self._loader._layout).samples_per_rank(0)

    def set_epoch(self, epoch: int) -> None:
        """Frameworks call ``loader.sampler.set_epoch(e)`` each epoch (Lightning, HF Trainer): forward it.

        Lightning ends an epoch by counting ``len(loader)`` batches, never asking for one more, so
        the loader cannot see the end by itself; this call is how it learns the new epoch.
        """
        self._loader.set_epoch(epoch)


class DataLoader(torch.utils.data.DataLoader[Any], ExclusionMixin):
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
        **torch_dataloader_kwargs: Any,
    ) -> None:
        check_arguments(shuffle, torch_dataloader_kwargs)
        world_size, rank, self._groups = resolve_data_parallel(world_size, rank, mesh=mesh, process_group=process_group,
                                                               mesh_dims=mesh_dims)
        self._layout = Layout(dataset_length(dataset), world_size, batch_size, drop_last)
        self._verify_ranks = bool(verify_ranks)
        self._rank = rank
        self._seed = check_int("seed", seed, 0, 2**64 - 1)
        self._shuffle = shuffle
        self._orders = OrderCache(order if shuffle else "identity", self._layout.n, self._seed, dataset=dataset,
                                  shuffle_block=shuffle_block if shuffle else None, grid=world_size * batch_size)
        self._deal = Deal(deal, self._orders)
        warn_if_blocks_exceed_the_share(self._orders, self._deal, self._layout.n, world_size)
        self._fingerprint = resolve_fingerprint(dataset_fingerprint, dataset, self._layout.n, self._orders)
        self._legacy_fingerprint = resolve_fingerprint(dataset_fingerprint, dataset, self._layout.n, self._orders,
                                                       "legacy_fingerprint")
        self._explain = explain_fingerprint(dataset)
        self._fingerprint_arg = dataset_fingerprint
        self._compatible = schedule_hooks(dataset, self._orders.shuffle_block)
        self._epoch, self._steps = 0, 0
        self._excluded, self._which_excluded = Excluded(self._layout.n), Excluded(self._layout.n)
        self._excluded_at: tuple[int, ...] = ()  # the steps exclude() took effect at (_loading/excluded_steps.py)
        self._start: Cut = self._cut(0, 0, [])  # where the next pass starts
        self._pass: Pass | None = None
        self._history = History.begin(self._layout.n, self._deal.name, self._layout, Place(0, 0))
        self._lookup = Lookup()
        self._keyed = check_keyed(transform, seed_per_sample)
        dataset = served(dataset, self._seed, transform, seed_per_sample, torch_dataloader_kwargs)
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
        place = self._here()[1]
        return place.cursor, [list(pair) for pair in place.segments]

    def _here(self) -> tuple[int, Place]:
        """(step, place): batches received since the run began, and where the next one comes from."""
        live = self._pass
        if live is None:
            return self._steps, place_after(self._epoch, self._start, 0)
        return live.steps + live.received, place_after(live.epoch, live.cut, self._layout.batch_size * live.received)

    @property
    def step(self) -> int:
        """Batches each rank has received since the run began (epoch 0, batch 0): the step ``which`` takes."""
        return self._here()[0]

    def _jump(self, epoch: int, start: Cut) -> None:
        """Read from ``start`` of ``epoch`` next (no live pass), recorded in the run's history."""
        steps = self.step  # leaving an epoch whose exclusion re-dealt it (spans): a leg of its own, so later epochs
        self._history = self._history.record(steps, self._layout, place_after(epoch, start, 0),  # place without it
                                             self._history_cuts(), split=self._leaving_exclusion())
        self._pass, self._epoch, self._start, self._steps = None, int(epoch), start, steps

    @property
    def cursor(self) -> int:
        """Positions of this epoch's global stream that the training loop has received (all ranks)."""
        return self._position()[0]

    @property
    def deal(self) -> str:
        """``strided`` or ``spans``: who reads which positions of the epoch (see ``docs/shards.md``)."""
        return self._deal.name

    def _left(self) -> tuple[Cut, int]:
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

    def cursor_after(self, batches: int, *, from_epoch_start: bool = False) -> int:
        """The epoch's ``cursor`` once each rank has received ``batches`` more batches, from where the
        loader stands (or from an epoch's start). Arithmetic only: the loader does not move. It stops
        growing at the epoch's end. The Trainer integration turns a ``max_steps`` budget into this
        layout's steps with it."""
        check_int("batches", batches, 0, 2**62)
        start, done = (self._deal.cut(self._layout, 0, []), 0) if from_epoch_start else self._left()
        return start.after(done + batches * self._layout.batch_size)[0]

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
        if check_int("epoch", epoch, 0, MAX_EPOCH) != self.epoch:
            self.seek(epoch)

    def seek(self, epoch: int, batches: int = 0) -> None:
        """Go to ``epoch`` after its first ``batches`` batches per rank: O(1), no sample is read.

        What ``skip_first_batches`` does by replaying, done by arithmetic: e.g. the Hugging Face
        Trainer's ``divmod(global_step, len(loader))`` turned into a position. With the same world
        size and batch size as the run being continued, the next batch is exactly its next batch.
        """
        check_int("epoch", epoch, 0, MAX_EPOCH)
        check_int("batches", batches, 0, 2**62)
        parts = self._history.parts()
        fresh = self._cut(epoch, 0, [], parts=parts)
        cursor, segments = fresh.after(int(batches) * self._layout.batch_size)
        within_bounds(self._orders, epoch, fresh)
        self._jump(epoch, self._cut(epoch, cursor, segments, parts=parts))

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        live = self._pass
        if live is not None and live.received and self.batches_left() == 0:  # every batch received, the pass
            self._end_pass(live)  # not run out (zip(range(len(loader)), loader)): a new iter() reads the next epoch
        (steps, place), epoch = self._here(), self.epoch
        start = self._cut(epoch, place.cursor, [list(pair) for pair in place.segments], parts=self._history.parts(),
                          handed=self._handed())
        if epoch == MAX_EPOCH and start.samples_per_rank() == 0:
            raise ValueError(f"epoch: the loader has read epoch {MAX_EPOCH}, the last one the orders support; "
                             "call set_epoch(e) with an earlier epoch to read on")
        live = Pass(epoch, start, steps)
        self._pass, self._epoch, self._start, self._steps = live, epoch, start, steps
        return self._count(super().__iter__(), live)

    def _count(self, batches: Iterator[Any], live: Pass) -> Iterator[Any]:
        while True:
            if self._pass is not live:
                follows = self._pass
                while follows is not None and follows is not live:
                    follows = follows.follows
                if self._pass is None or follows is None:
                    raise RuntimeError(
                        "this iterator was superseded by a newer iter(loader), set_epoch() or "
                        "load_state_dict(); iterate the newest one"
                    )
                live = self._pass  # set_batch_size(), exclude(): batches prefetched under the old cut are dropped
                del batches
                batches = super().__iter__()
            batch = next(batches, _END)
            if batch is _END:
                break
            live.received += 1
            yield batch
        if self._pass is live:  # the pass is exhausted: the epoch is over
            self._end_pass(live)

    def _end_pass(self, live: Pass) -> None:
        """The epoch of ``live`` is over: read the next one from its start (the last epoch stays at its end)."""
        ended = live.epoch == MAX_EPOCH
        following = live.epoch if ended else live.epoch + 1
        where = live.cut.after(live.cut.samples_per_rank()) if ended else (0, [])
        self._jump(following, self._cut(following, *where, parts=self._history.parts()))

    def __len__(self) -> int:
        """Batches per epoch on this rank (a whole epoch, whatever the cursor; excluded samples taken out)."""
        return self._excluded.epoch_layout(self._layout).batches_per_rank(0)

    # -- state -------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """What the training loop has received, as a small dict of JSON values, same on all ranks."""
        cursor, segments = self._position()
        handed = self._handed()
        return _state.build(
            kind="loader", seed=self._seed, epoch=self.epoch, cursor=cursor, n=self._layout.n,
            shuffle=self._shuffle, order=self._orders.name, order_version=self._orders.version,
            world_size=self._layout.world_size, batch_size=self._layout.batch_size,
            drop_last=self._layout.drop_last, dataset_fingerprint=self._fingerprint,
            deal=self._deal.name, segments=segments, steps=self.step, history=self._history,
            excluded=self._excluded.exclusion.to_state(), handed=handed.to_state() if handed else [],
            excluded_at=list(self._excluded_at), parameters=self._orders.parameters,
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
                                                 shuffle_block=block, grid=self._orders.grid)
        orders = orders_for_state(self._orders, state, rebuild)
        deal = self._deal.for_state(state)
        position = validate_everywhere(
            state, self._expected(orders, deal), strict=strict, rank=self._rank, world_size=self._layout.world_size,
            verify_ranks=self._verify_ranks if verify_ranks is None else verify_ranks, groups=self._groups,
        )
        excluded = Excluded.for_state(position.excluded, deal, orders, self.dataset)
        start = excluded.start(deal, orders, self._layout, position)
        within_bounds(orders, position.epoch, start, field="state field 'epoch'")
        history = arrived(position, excluded, deal, orders, start, self._layout)
        start = excluded.cut(deal, orders, self._layout, position.epoch, position.cursor, position.segments,
                             history.parts(), position.handed)
        if orders.identity != self._orders.identity:  # a state's block or grid adopted: its fingerprint too
            self._fingerprint, self._legacy_fingerprint = self._fingerprint_of(orders)
            check_grid(self.dataset, orders.grid, self._layout.world_size * self._layout.batch_size)
        self._orders, self._deal, self._pass, self._epoch, self._start = orders, deal, None, position.epoch, start
        self._steps, self._history, self._excluded = position.steps, history, excluded
        self._excluded_at, self._which_excluded = position.excluded_at, Excluded(self._layout.n)

    def which(self, step: int) -> dict[int, list[int]]:
        """For each rank of the world that read ``step`` (see ``step``), the dataset indices of its batch,
        by arithmetic from the run's layout history in the state (``docs/state-format.md#which``): load
        any state saved at or after ``step``, on any rank and world size. Later steps: this loader's layout.
        With samples excluded: the steps before the first ``exclude()`` and from the latest on (docs/exclusion.md)."""
        return self._which(step)

    def set_batch_size(self, batch_size: int) -> None:
        """Read on in batches of ``batch_size`` per rank from the next batch, recorded in the run's history.

        Between two batches of a live iterator, that iterator drops what its workers prefetched at
        the old size and goes on at the new one from exactly the position received (docs/state-format.md).
        """
        batch_size = check_int("batch_size", batch_size, 1, 2**31)
        steps, place = self._here()
        layout = Layout(self._layout.n, self._layout.world_size, batch_size, self._layout.drop_last)
        check_grid(self.dataset, self._orders.grid, layout.world_size * batch_size)
        history = self._history.record(steps, layout, place, self._history_cuts())
        start = self._cut(place.epoch, place.cursor, [list(pair) for pair in place.segments], layout,
                          parts=history.parts(), handed=self._handed())
        self._read_on(place.epoch, start, steps)
        self._layout, self._history = layout, history
        object.__setattr__(self, "batch_size", batch_size)  # torch refuses a plain assignment after __init__
        self.batch_sampler.batch_size = batch_size  # type: ignore[union-attr]

    def _fingerprint_of(self, orders: OrderCache) -> tuple[str | None, str | None]:
        """(fingerprint, legacy fingerprint) of the dataset read in ``orders`` (its block joins a corpus's;
        a block adopted from a state is only ever a corpus's, whose wrappers pass ``fingerprint`` on)."""
        dataset = self.dataset
        return (resolve_fingerprint(self._fingerprint_arg, dataset, self._layout.n, orders),
                resolve_fingerprint(self._fingerprint_arg, dataset, self._layout.n, orders, "legacy_fingerprint"))

    def _expected(self, orders: OrderCache, deal: Deal) -> _state.Expected:
        fingerprint, legacy = ((self._fingerprint, self._legacy_fingerprint)
                               if orders.identity == self._orders.identity else self._fingerprint_of(orders))
        return _state.Expected(
            kind="loader", n=self._layout.n, seed=self._seed, shuffle=self._shuffle,
            order=orders.name, order_version=orders.version,
            dataset_fingerprint=fingerprint, explain_fingerprint=self._explain, deal=deal.name,
            legacy_fingerprint=legacy, layout=self._layout, parameters=orders.parameters,
            phases_changed=self._compatible,
            explain_order_version=getattr(self.dataset, "explain_order_version", None),
        )
