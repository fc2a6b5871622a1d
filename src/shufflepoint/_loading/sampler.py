"""``shufflepoint.ResumableSampler``: a ``DistributedSampler`` drop-in driving the same position model as
the loader (``position.py``), in samples instead of batches, and resuming through the same ``load``.

Words: docs/glossary.md (rank, world size, state, resume).
"""

from __future__ import annotations

import copy
import functools
import itertools
from collections.abc import Iterator
from typing import Any

from torch.utils.data.distributed import DistributedSampler

from shufflepoint._core.cut import Cut
from shufflepoint._core.history import MAX_EPOCH
from shufflepoint._core.plan import Layout
from shufflepoint._errors import refusal
from shufflepoint._loading.agreement import validate_everywhere
from shufflepoint._loading.capabilities import dataset_length
from shufflepoint._loading.deal import deal_of, rank_index_chunks, warn_if_blocks_exceed_the_share
from shufflepoint._loading.mesh import sampler_world
from shufflepoint._loading.orders import Identity, OrderCache
from shufflepoint._loading.position import LoaderPosition, expected_state
from shufflepoint._loading.progress import Progress
from shufflepoint._order import check_int


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

    Args:
        dataset: a map-style dataset (``__len__``); only its length and, for a corpus, its order are used.
        num_replicas: the number of data-parallel ranks. Default: the process group's, else 1.
        rank: this process's data-parallel rank. Default: the process group's, else 0.
        shuffle: False reads the epoch in index order. Default True.
        seed: an int in [0, 2**64): with the epoch, it fixes the whole order. Default 0.
        drop_last: drop the epoch's tail instead of padding it, as ``DistributedSampler`` does. Default False.
        order: the permutation (``"radix-feistel"``, ``"feistel"``, ``"torch"``, ``"identity"``,
            ``"blocks"``); ``None``: the default for the dataset (see ``shufflepoint.DataLoader``).
        shuffle_block: rows shuffled together by a corpus order (``blocks`` or a dataset's own).
        deal: ``"strided"`` or ``"spans"``; ``None``: ``spans`` for a corpus order, else ``strided``.
        dataset_fingerprint: the dataset's identity, checked on load (your string, ``"auto"`` or ``None``).
        verify_ranks: check on load that every rank holds the same state (one small collective). Default True.
        mesh: a ``DeviceMesh`` of data-parallel dimensions: rank and world size come from it.
        process_group: the data-parallel ``ProcessGroup``: rank and world size come from it.
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
            raise TypeError(refusal("shuffle", shuffle, "a bool", "pass shuffle=True or False"))
        super().__init__(dataset, num_replicas=world_size, rank=rank, shuffle=shuffle, seed=seed,
                         drop_last=drop_last)
        orders = OrderCache(order if shuffle else "identity", n, seed, dataset=dataset,
                            shuffle_block=shuffle_block if shuffle else None)
        dealt = deal_of(deal, orders)
        warn_if_blocks_exceed_the_share(orders, dealt, n, world_size)
        self._identity = Identity(dataset_fingerprint, dataset, orders)
        self._verify_ranks = bool(verify_ranks)
        self._position = LoaderPosition(Layout(n, world_size, 1, drop_last), orders, dealt)
        self._pending: Cut | None = None  # from load_state_dict, for the next __iter__
        self._active: Progress | None = None

    def __repr__(self) -> str:
        view = self._view()
        return (f"shufflepoint.ResumableSampler({type(view.orders.dataset).__name__} of {view.layout.n} samples, "
                f"epoch={view.epoch}, cursor={view.cursor}, rank={self.rank}, num_replicas={view.layout.world_size}, "
                f"order={view.orders.name!r}, deal={view.deal.name!r}, seed={self.seed})")

    @property
    def deal(self) -> str:
        """``strided`` or ``spans``: who reads which positions of the epoch."""
        return self._position.deal.name

    def _start(self) -> Cut:
        if self._pending is not None:
            return self._pending
        position = self._position
        return position.cut(self.epoch, 0, (), parts=position.history.parts())

    def _sync(self) -> None:
        """The live pass counts what this sampler's current iterator has yielded (one sample a step)."""
        live, active = self._position.live, self._active
        if live is not None and active is not None:
            live.received = active.yielded

    def __iter__(self) -> Iterator[int]:
        start, self._pending = self._start(), None
        position = self._position
        chunks = rank_index_chunks(position.orders.get(self.epoch, start), start, self.rank)
        self._sync()
        position.jump(self.epoch, start)
        position.start_pass(self.epoch, start, position.step)
        self._active = Progress(self.epoch, start)
        return itertools.chain.from_iterable(self._active.track(chunks))

    def __len__(self) -> int:
        return self._position.layout.samples_per_rank(0)

    def set_epoch(self, epoch: int) -> None:
        """Start ``epoch`` at its first sample; the current epoch again keeps a restored position."""
        check_int("epoch", epoch, 0, MAX_EPOCH)
        if epoch != self.epoch:
            self._sync()
            self._position.jump(epoch, self._position.deal.cut(self._position.layout, 0))
            self.epoch, self._pending, self._active = int(epoch), None, None

    def _view(self) -> LoaderPosition:
        """The position as this sampler stands: its ``epoch`` is DistributedSampler's attribute, which a
        caller may set directly (then the run reads that epoch from its start, on a copy: nothing moves)."""
        self._sync()
        position = self._position
        if position.epoch == self.epoch:
            return position
        view = copy.copy(position)
        view.jump(self.epoch, self._start())
        return view

    @property
    def cursor(self) -> int:
        """Positions of this epoch's global stream handed out, over all ranks."""
        return self._view().cursor

    def state_dict(self) -> dict[str, Any]:
        """The sampler's position as a few JSON values, the same on every rank (``STATE_FIELDS``; kind
        ``"sampler"``): save it with the model, give it to ``load_state_dict`` in the new processes."""
        return self._view().state(kind="sampler", seed=self.seed, shuffle=self.shuffle,
                                  dataset_fingerprint=self._identity.fingerprint)

    def load_state_dict(
        self, state: dict[str, Any], *, strict: bool = True, verify_ranks: bool | None = None,
    ) -> None:
        """Make the next ``iter()`` continue where the state's run was. Refused loads change nothing.

        The state's epoch wins over the sampler's, except that a state of a *finished* epoch never
        moves the sampler back from a later epoch already chosen with ``set_epoch``. Rank agreement
        and ``strict`` work as in ``shufflepoint.DataLoader.load_state_dict``; so does the rest: the position
        model's ``load`` places it (a state's block adopted where this sampler reads the default one).
        """
        position = self._position
        validate = functools.partial(
            validate_everywhere, strict=strict, rank=self.rank, world_size=position.layout.world_size,
            verify_ranks=self._verify_ranks if verify_ranks is None else verify_ranks, groups=self._groups,
        )
        expected = functools.partial(expected_state, "sampler", self.seed, self.shuffle, self._identity,
                                     position.layout)
        position.load(state, expected, validate)
        self._identity = self._identity.for_orders(position.orders)
        self._active = None
        start, _ = position.rest()
        if start.samples_per_rank() == 0 and self.epoch > position.epoch:
            # A finished epoch says nothing about a later epoch the loop already chose with
            # set_epoch (torchdata applies a loaded state lazily, after the loop's set_epoch).
            self._pending = None
            position.jump(self.epoch, position.deal.cut(position.layout, 0))
            return
        self.epoch, self._pending = position.epoch, start


__all__ = ["ResumableSampler"]
