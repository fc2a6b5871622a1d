"""The live loader's worker processes: torch's own ``DataLoader`` reads, in order, the shares of the steps the live
loader predicts, and the loader takes a result only if it is exactly the share it deals now.

A live step's share depends on a quorum that is known only when the step starts, so no sampler can list the
epoch's batches up front. Here the sampler is endless and asks the loader for each next key as torch's iterator
has room for it (``num_workers x prefetch_factor`` in flight): the loader answers with the next step's share under
the quorum it expects (the last one it saw, every step committing). Each key carries a serial number. When a step
starts:

- its share is among the keys in flight: the results before it are dropped (read under a quorum that did not
  hold, or for a step that did not commit), counted, and its own is handed out;
- it is not: the loader restarts its predictions at this step under this quorum, and every result in flight is
  dropped before it.

Either way the loader first raises the *drop floor*, a serial number in shared memory that every worker reads: a
worker skips a key below the floor without reading it, and stops a share it is reading before its next sample once
the floor passes it. torch hands results out in order, so the step's own share still comes after the dropped ones,
but it waits only for the sample each worker was reading when the floor rose, not for the dropped shares' whole
reads: a membership change costs the step's own read (what ``num_workers=0`` pays), never more than what was
prefetched.

What is handed out is ``collate([transform(dataset[i], rng_i) for i in share])`` with the sample's own generator
(``randomness.sample_rng``), wherever it was read: the batches are those of ``num_workers=0``, batch for batch.

Words: docs/glossary.md (participant, membership change, commit, step, drop floor).
"""

from __future__ import annotations

import weakref
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
import torch.utils.data

from shufflepoint._loading.randomness import sample_rng

Share = tuple[int, tuple[int, ...]]  # (epoch, dataset indices of this rank's share of a step)
Read = tuple[int, Share | None]  # (serial, share or None: nothing to read)
Result = tuple[int, bool, Any]  # (serial, read: False where the key was below the floor, the batch or None)


class Dropped(Exception):
    """A share's read stopped: the loader no longer wants it (its serial fell below the floor)."""


def read_share(dataset: Any, epoch: int, indices: Sequence[int], seed: int,
               transform: Callable[[Any, Any], Any] | None, collate: Callable[[list[Any]], Any],
               wanted: Callable[[], bool] | None = None) -> Any:
    """The batch of ``indices``: each sample read, transformed with its own generator (seed, epoch, index), collated.
    ``wanted()``, asked before each sample, stops the read (``Dropped``) when it turns False."""
    samples = []
    for i in indices:
        if wanted is not None and not wanted():
            raise Dropped
        sample = dataset[int(i)]
        samples.append(sample if transform is None else transform(sample, sample_rng(seed, epoch, int(i))))
    return collate(samples)


class Shares(torch.utils.data.Dataset[Any]):
    """``self[(serial, share)]`` is ``(serial, True, the share's batch)``, read in whichever worker torch sends it
    to, or ``(serial, False, None)`` where the serial is below the floor (module docstring)."""

    def __init__(self, dataset: Any, seed: int, transform: Callable[[Any, Any], Any] | None,
                 collate: Callable[[list[Any]], Any]) -> None:
        self.dataset, self.seed, self.transform, self.collate = dataset, seed, transform, collate
        self.floor = torch.zeros(1, dtype=torch.int64)  # the drop floor: the lowest serial still wanted
        self.floor.share_memory_()  # type: ignore[no-untyped-call]  # torch leaves it untyped
        self._floor_view: Any = None  # a numpy view of it, made in the worker (a few ns a look, not a tensor's us)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_floor_view": None}  # the view is remade where it is read (spawn)

    def _wanted(self, serial: int) -> bool:
        if self._floor_view is None:
            self._floor_view = self.floor.numpy()
        return serial >= int(self._floor_view[0])

    def __getitem__(self, key: Read) -> Result:
        serial, share = key
        if share is None:
            return serial, True, None
        try:
            return serial, True, read_share(self.dataset, share[0], share[1], self.seed, self.transform,
                                            self.collate, lambda: self._wanted(serial))
        except Dropped:
            return serial, False, None

    def __len__(self) -> int:
        return len(self.dataset)


def _as_read(item: Any) -> Any:
    """The collate of torch's loader: the worker's result as it is (``Shares`` collated already)."""
    return item


class _Feed:
    """torch's sampler: endless; each key is the loader's next prediction, numbered and remembered in order."""

    def __init__(self, workers: Workers) -> None:
        self._workers = weakref.ref(workers)  # no cycle: the workers shut down as soon as the loader is dropped

    def __iter__(self) -> Iterator[Read]:
        return self

    def __next__(self) -> Read:
        workers = self._workers()
        if workers is None:
            raise StopIteration
        return workers.sent_next()


class Workers:
    """torch's worker processes reading the predicted shares (module docstring)."""

    def __init__(self, shares: Shares, predict: Any, num_workers: int,
                 prefetch_factor: int | None, pin_memory: bool) -> None:
        self._predict = weakref.WeakMethod(predict)  # the loader's: no cycle through it either
        self._shares = shares
        self._loader = torch.utils.data.DataLoader(
            shares, batch_size=None, sampler=_Feed(self), num_workers=num_workers, prefetch_factor=prefetch_factor,
            pin_memory=pin_memory, collate_fn=_as_read)
        self._iterator: Iterator[Any] | None = None
        self._serial = 0
        self.in_flight: deque[Read] = deque()  # sent to the workers, not yet received, in order

    def sent_next(self) -> Read:
        predict = self._predict()
        share = predict() if predict is not None else None
        self._serial += 1
        key = (self._serial, share)
        self.in_flight.append(key)
        return key

    def take(self, share: Share, restart: Callable[[], None]) -> tuple[Any, int]:
        """(the batch of ``share``, the results dropped before it). ``restart()`` makes the loader's next
        prediction ``share``; it is called when ``share`` is not in flight. The floor is raised to ``share``'s
        serial first, so the workers skip or stop what is dropped (module docstring)."""
        serial = next((sent[0] for sent in self.in_flight if sent[1] == share), None)
        if serial is None:
            restart()
            serial = self._serial + 1  # the next key sent: ``share``, under the restarted predictions
        self._shares.floor[0] = serial
        if self._iterator is None:
            self._iterator = iter(self._loader)
        dropped = 0
        while True:
            got, read, batch = next(self._iterator)
            sent = self.in_flight.popleft()
            if got != sent[0]:
                raise RuntimeError(f"shufflepoint: worker result {got} arrived where {sent[0]} was expected")
            if sent[1] == share:
                if not read:  # its serial is the floor, so a worker never skips it
                    raise RuntimeError(f"shufflepoint: worker skipped result {got}, the step's own share")
                return batch, dropped
            dropped += sent[1] is not None and len(sent[1][1]) > 0


def pinned(batch: Any) -> Any:
    """``batch`` with its tensors in pinned memory (``num_workers=0`` with ``pin_memory``; torch's loader pins for
    workers), by torch's own pinning of any batch; unchanged where no accelerator can use pinned memory."""
    if not torch.cuda.is_available():
        return batch
    from torch.utils.data._utils.pin_memory import pin_memory  # private: torch's own pinning of any batch

    return pin_memory(batch)  # type: ignore[no-untyped-call]
    if isinstance(batch, torch.Tensor):
        return batch.pin_memory()
    if isinstance(batch, dict):
        return {key: pinned(value) for key, value in batch.items()}
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # private: a namedtuple's documented marker
        return type(batch)(*(pinned(value) for value in batch))
    if isinstance(batch, (list, tuple)):
        return type(batch)(pinned(value) for value in batch)
    return batch
