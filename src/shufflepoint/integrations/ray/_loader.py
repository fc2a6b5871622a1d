"""``RayDataLoader``: a ``shufflepoint.DataLoader`` whose batches are read, transformed and collated by Ray actors.

Where it cuts in: torch's ``DataLoader.__iter__`` asks ``_get_iterator()`` for a pass's batches (touch point 4,
``_touch.py``). Everything above that seam is the loader's own: the position model picks the pass, its sampler
yields each batch's keys, ``_count`` counts what the loop received, and the state, a resize of the world or of
the batch, ``exclude`` and ``which`` all work as they do in process. Below it, instead of torch's fetcher in this
process or a worker, a ``DecodePool`` of actors computes the batch from its keys, and ``RayBatches`` hands the
results back in the order the keys were drawn, ``window`` in flight.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator
from typing import Any

from shufflepoint._errors import refusal
from shufflepoint._loading.loader import DataLoader
from shufflepoint.integrations.ray._pool import DecodePool, Ticket
from shufflepoint.integrations.ray._touch import pin

_IN_THE_ACTORS = {
    "num_workers": "the actors are the workers: pass decode_actors=",
    "persistent_workers": "the actors persist across passes already",
    "worker_init_fn": "set up in the dataset's own __setstate__, or in the transform, which run in the actor",
    "prefetch_factor": "pass window= (batches in flight over the whole pool)",
    "skip_bad_samples": "leave it unset with RayDataLoader (the actors hold the excluded set they started with, and "
                        "could fill a slot with a sample excluded since); a bad sample ends the run",
}


class RayBatches(Iterator[Any]):
    """One pass's batches, in order: the keys of the next ``window`` batches are sent ahead; ``__next__`` takes
    the oldest. A superseded iterator (``set_batch_size``, ``exclude``) tells the pool its tickets are dropped."""

    def __init__(self, keys: Iterator[list[Any]], pool: DecodePool, pin_memory: bool) -> None:
        self._keys, self._pool, self._pin = keys, pool, pin_memory
        self._pending: collections.deque[Ticket] = collections.deque()
        self._exhausted = False

    def _fill(self) -> None:
        while not self._exhausted and len(self._pending) < self._pool.window:
            keys = next(self._keys, None)
            if keys is None:
                self._exhausted = True
                return
            ticket = Ticket(list(keys))
            self._pool.send(ticket)
            self._pending.append(ticket)

    def __next__(self) -> Any:
        self._fill()
        if not self._pending:
            raise StopIteration
        ticket = self._pending.popleft()
        batch = self._pool.take(ticket)
        self._fill()  # the next ones are computed while the loop trains on this one
        return pin(batch) if self._pin else batch

    def __del__(self) -> None:
        pending, self._pending = getattr(self, "_pending", ()), collections.deque()
        if pending:
            self._pool.forget(list(pending))


class RayDataLoader(DataLoader):
    """A ``shufflepoint.DataLoader`` whose batches are read, transformed and collated by a pool of Ray actors.

    The same arguments as ``shufflepoint.DataLoader`` (dataset, order, deal, ``transform``, ``collate_fn``,
    ``buckets``, ``decode_threads``...), the same batches, bit for bit, and the same state: it counts what the
    loop received, so ``state_dict``/``load_state_dict`` resume it (or an in-process loader) exactly, on any
    world size. Each rank's loader starts its own actors at its first batch, on whichever nodes Ray places them
    (``actor_options={"resources": {"decode": 1}}`` for CPU-only nodes started with that resource)::

        ray.init(address="auto")          # torchrun beside a cluster; inside Ray Train, Ray is connected
        loader = RayDataLoader(corpus, batch_size=32, seed=1234, transform=shufflepoint.DecodeImage(224),
                               decode_actors=8, decode_cpus=1)
        for batch in loader:              # in order; a dead actor's batches are computed again elsewhere
            ...
        loader.pool.resize(12)            # more actors from the next batch on; the order does not move

    Args:
        dataset: as ``shufflepoint.DataLoader``.
        batch_size: as ``shufflepoint.DataLoader``.
        decode_actors: how many actors this rank's pool keeps. Default 2.
        decode_cpus: CPUs each actor reserves (``num_cpus``). Default 1.
        window: batches in flight at most, the memory the pool may hold ahead of the loop. Default twice
            the pool's size.
        actor_options: more Ray actor options (``resources``, ``scheduling_strategy``, ``runtime_env``...).
        retries: how many actors a batch may lose before the loader gives up on it. Default 3.
        start_timeout: seconds to wait for the actors to be placed before refusing. Default 120.
        **loader_kwargs: as ``shufflepoint.DataLoader``; ``num_workers``, ``persistent_workers``,
            ``worker_init_fn`` and ``prefetch_factor`` are refused (the actors work).
    """

    def __init__(self, dataset: Any, batch_size: int, *, decode_actors: int = 2, decode_cpus: float = 1.0,
                 window: int | None = None, actor_options: dict[str, Any] | None = None, retries: int = 3,
                 start_timeout: float = 120.0, **loader_kwargs: Any) -> None:
        for name, fix in _IN_THE_ACTORS.items():
            if loader_kwargs.get(name) not in (None, 0, False):
                raise ValueError(refusal(name, loader_kwargs[name], "not set with RayDataLoader", fix))
            loader_kwargs.pop(name, None)
        pool = DecodePool(decode_actors, decode_cpus, window, actor_options, retries, start_timeout)
        super().__init__(dataset, batch_size, num_workers=0, **loader_kwargs)
        self._pool = pool

    def _announcer(self, dataset: Any) -> None:
        return None  # the actors read the shards, on their nodes: this process fetches nothing ahead

    @property
    def pool(self) -> DecodePool:
        """This rank's actors: ``resize(n)``, ``close()``, ``stats``."""
        return self._pool

    def _get_iterator(self) -> Any:  # touch point 4: the pass's batches come from the actors
        self._pool.start(self.dataset, self.collate_fn)
        return RayBatches(iter(self.batch_sampler), self._pool, self.pin_memory)  # type: ignore[arg-type]
