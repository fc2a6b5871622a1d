"""What torch's machinery reads for a ``shufflepoint.DataLoader``: the dataset as served (columns for a
corpus that reads a batch at once, a wrapper for keyed randomness, a batch's samples read in threads) and
index chunks announced ahead."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch.utils.data

from shufflepoint._core.capabilities import DecodesInBatches, PrefetchesDealt, Prefetching, ReadsBatches, ReadsColumns
from shufflepoint._core.cut import Cut
from shufflepoint._errors import Plain, refusal
from shufflepoint._loading.capabilities import reads_ahead
from shufflepoint._loading.keyed import KeyedCollate, KeyedDataset, Transform
from shufflepoint._loading.threads import SamplePool
from shufflepoint._order import check_int
from shufflepoint._shards.corpora.shards.batch import Columnar
from shufflepoint._shards.corpora.shards.batch import collate as columnar_collate

Chunk = tuple[np.ndarray, np.ndarray]  # (epoch positions, dataset indices)
Announce = Callable[[np.ndarray, float], None]  # (indices, density)


def announcer(dataset: Any) -> Announce | None:
    """How to tell ``dataset`` its upcoming indices: with this rank's density (``PrefetchesDealt``), the
    indices alone (``Prefetching``), or not at all (also where it has nothing to fetch ahead, a local
    corpus: then the sampler does not work out the next chunk before serving the first)."""
    if not reads_ahead(dataset):
        return None
    if isinstance(dataset, PrefetchesDealt):
        return dataset.prefetch_dealt
    if isinstance(dataset, Prefetching):
        prefetch = dataset.prefetch
        return lambda indices, density: prefetch(indices)
    return None


def density(positions: np.ndarray) -> float:
    """This rank's epoch positions over the span they cover: 1.0 for a stretch of its own."""
    if positions.size < 2:
        return 1.0
    return float(positions.size / (int(positions.max()) - int(positions.min()) + 1))


def rank_density(cut: Cut, rank: int) -> float:
    """``density`` of this rank's first positions of a pass (up to 4,096), what a ``ReadsAtDensity`` dataset is
    told before the pass's workers start: about 1 under ``spans``, 1/k where k ranks split each global batch."""
    return density(cut.rank_positions(rank, 0, min(cut.samples_per_rank(), _DENSITY_POSITIONS)))


_DENSITY_POSITIONS = 4096


def announced(chunks: Iterator[Chunk], prefetch: Announce) -> Iterator[Chunk]:
    """Tell the dataset (``Shards``) each chunk of upcoming indices one chunk before it is served,
    so that its shards are downloading while the current chunk is read. The first chunk, read at once,
    too, with the rank's own density: a rank reading densely fetches its rows in few GETs, not a GET per
    row (``Shards`` fetches a pass's first chunk narrowly and reads ahead of the next ones once it is held:
    ``_shards/storage/ranged_ahead``)."""
    current = next(chunks, None)
    if current is not None:
        prefetch(current[1], density(current[0]))
    while current is not None:
        upcoming = next(chunks, None)
        if upcoming is not None:
            prefetch(upcoming[1], density(upcoming[0]))
        yield current
        current = upcoming


def check_arguments(shuffle: bool, torch_kwargs: dict[str, Any]) -> None:
    """``shuffle`` is a bool, and torch's own ``sampler``/``batch_sampler`` are not passed: the order is ours."""
    taken = sorted({"sampler", "batch_sampler"} & torch_kwargs.keys())
    if taken:
        raise TypeError(refusal(", ".join(taken), Plain("a torch " + " and a ".join(taken)), "none: "
                                "shufflepoint.DataLoader builds its own order and sharding", "use seed=, shuffle=, "
                                "order= instead, or "
                                "shufflepoint.ResumableSampler with a plain torch DataLoader"))
    if not isinstance(shuffle, bool):
        raise TypeError(refusal("shuffle", shuffle, "a bool", "pass shuffle=True or False"))


def check_keyed(transform: Transform | None, seed_per_sample: bool) -> bool:
    """Whether samples draw keyed randomness (the loader then wraps the dataset, see ``keyed``)."""
    if transform is not None and not callable(transform):
        raise TypeError(refusal("transform", transform, "a callable fn(sample, rng) or None",
                                "pass a function of (sample, rng)"))
    if not isinstance(seed_per_sample, bool):
        raise TypeError(refusal("seed_per_sample", seed_per_sample, "a bool", "pass seed_per_sample=True or False"))
    return transform is not None or seed_per_sample


def served(dataset: Any, seed: int, transform: Transform | None, seed_per_sample: bool,
            torch_kwargs: dict[str, Any]) -> Any:
    """The dataset torch's machinery reads, and its collate (set in ``torch_kwargs``): a corpus that reads a
    batch at once (Shards, Mixture) hands it over as columns, which ``collate`` turns into default_collate's
    very result without an object per row; any other ``ReadsBatches`` dataset without a ``__getitems__`` of its
    own is read a batch a ``read_batch`` call (``BatchReads``); keyed randomness wraps the dataset (``keyed``)."""
    keyed = transform is not None or seed_per_sample
    if torch_kwargs.get("collate_fn") is None and not keyed and isinstance(dataset, ReadsColumns):
        dataset = dataset.columnar()
        torch_kwargs["collate_fn"] = columnar_collate
    elif not keyed and isinstance(dataset, ReadsBatches) and not callable(getattr(dataset, "__getitems__", None)):
        dataset = BatchReads(dataset)  # a user's ReadsBatches: a batch is one read_batch call
    if keyed:
        dataset = KeyedDataset(dataset, seed, transform, seed_per_sample)
        if seed_per_sample:
            collate = torch_kwargs.get("collate_fn") or torch.utils.data.default_collate
            torch_kwargs["collate_fn"] = KeyedCollate(collate, seed)
    return dataset


class BatchReads(torch.utils.data.Dataset[Any]):
    """A ``ReadsBatches`` dataset as torch's machinery reads it: a batch is one ``read_batch(indices)`` (torch's
    ``__getitems__``, in the process that reads the batch), its samples in the order asked. Everything else is
    the dataset's (its ``prefetch``, ``locate``...)."""

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: Any) -> Any:
        return self.dataset[index]

    def __getitems__(self, indices: list[Any]) -> list[Any]:
        found = list(self.dataset.read_batch(indices))
        if len(found) != len(indices):
            raise ValueError(refusal("read_batch", Plain(f"{len(found)} samples for {len(indices)} indices"),
                                     "one sample per index, in the order asked",
                                     f"return [dataset[i] for i in indices] from {type(self.dataset).__name__}"
                                     ".read_batch, read at once"))
        return found

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "dataset":
            raise AttributeError(name)  # not set yet (unpickling): never recurse into the dataset
        return getattr(self.dataset, name)


class ThreadedSamples(torch.utils.data.Dataset[Any]):
    """The dataset as served, a batch's samples read in a worker's threads (``pool``), kept in order.

    A batch then takes about its slowest sample's time instead of the sum of its samples' (a decoder that
    releases the GIL: PyAV, PIL, torchcodec, a download). The order is untouched: the same samples, in the
    same places of the same batches (``threads.py``)."""

    def __init__(self, dataset: Any, pool: SamplePool) -> None:
        self.dataset, self.pool = dataset, pool

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: Any) -> Any:
        return self.dataset[index]

    def __getitems__(self, indices: list[Any]) -> list[Any]:
        return self.pool.map(self.dataset.__getitem__, indices)


class DecodedInThreads(torch.utils.data.Dataset[Any]):
    """A ``DecodesInBatches`` dataset served as itself (a ``collate_fn`` of the user's): a batch read in one call,
    its samples' own ``transform`` mapped in the worker's threads (``pool``), in order."""

    def __init__(self, dataset: Any, pool: SamplePool) -> None:
        self.dataset, self.pool = dataset, pool

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: Any) -> Any:
        return self.dataset[index]

    def __getitems__(self, indices: list[Any]) -> list[Any]:
        batch = self.dataset.read_mapped(indices, self.pool.map)
        return list(batch.samples() if callable(getattr(batch, "samples", None)) else batch)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("dataset", "pool"):
            raise AttributeError(name)  # not set yet (unpickling): never recurse into the dataset
        return getattr(self.dataset, name)


def threaded(dataset: Any, threads: object, seed_per_sample: bool, transform: Transform | None = None
             ) -> Callable[[Any], Any]:
    """How the dataset as served is wrapped for ``decode_threads``: its per-sample work in ``threads`` threads
    of each worker, or left as it is for 0. Checked before anything is built. The work threaded is what is done
    one sample at a time: reading a sample (a map-style dataset); or, for a dataset that reads a batch in one
    call (``ReadsBatches``: ``Shards``, ``Mixture``), the loader's ``transform`` over the batch read, or the
    dataset's own (``DecodesInBatches``: ``Shards(..., transform=)``)."""
    threads = check_int("decode_threads", threads, 0, 1024)
    if not threads:
        return lambda served: served
    if seed_per_sample:
        raise ValueError(refusal("decode_threads", threads, "0 with seed_per_sample=True", "pass decode_threads=0, "
                                 "or draw randomness from transform's rng instead of seed_per_sample",
                                 why="seed_per_sample seeds the process's global generators around each sample, "
                                 "which threads of one process share"))
    pool = SamplePool(threads)
    batched = isinstance(dataset, ReadsBatches) and callable(getattr(dataset, "__getitems__", None))
    if not isinstance(dataset, ReadsBatches) or (transform is not None and not batched):
        return lambda served: ThreadedSamples(served, pool)  # a sample read (and transformed) at a time
    if transform is not None:
        return lambda served: _transforms_in(served, pool)
    if isinstance(dataset, DecodesInBatches) and dataset.decodes_samples():
        return lambda served: (Columnar(served.dataset, pool.map) if isinstance(served, Columnar)
                               else DecodedInThreads(served, pool))
    raise ValueError(refusal("decode_threads", threads, f"0 for a {type(dataset).__name__} without a transform",
                             "pass transform= (decoded in the threads, each batch still read in one call), or "
                             "decode_threads=0",
                             why="it reads a whole batch in one call and has nothing to do per sample"))


def _transforms_in(served: Any, pool: SamplePool) -> Any:
    """The keyed dataset (``served`` with a ``transform``) mapping its transforms over each batch in ``pool``."""
    if not isinstance(served, KeyedDataset):
        raise TypeError(f"decode_threads: expected the keyed dataset a transform= serves, found {type(served)}")
    served.pool = pool
    return served
