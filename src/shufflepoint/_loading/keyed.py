"""The dataset and collate wrappers that give each sample (and each batch) its keyed randomness.

Only a loader built with ``transform=`` or ``seed_per_sample=True`` uses them; the plain path is
untouched and pays nothing. The loader's sampler then yields keys ``(epoch, position, index)``
instead of bare indices: ``index`` picks the sample and keys its generator, ``position`` (where the
sample sits in the epoch's global stream, before tail wrapping) keys the batch it opens.
torch hands these keys to ``dataset.__getitems__`` inside whichever worker fetches the batch, so
nothing here depends on the worker, the rank or the process's own RNG.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch.utils.data

from shufflepoint._core.skips import is_bad_sample
from shufflepoint._errors import SampleError
from shufflepoint._loading.randomness import batch_rng, sample_rng, saved_globals, seed_globals, seeded_globals
from shufflepoint._loading.threads import SamplePool
from shufflepoint._loading.wait import transform_timer
from shufflepoint._shards.corpora.shards.locate import located_error

Key = tuple[int, int, int]  # (epoch, position in the epoch's global stream, dataset index)
Transform = Callable[[Any, np.random.Generator], Any]
_timed = transform_timer()


def keyed_chunks(chunks: Iterator[tuple[np.ndarray, np.ndarray]], epoch: int) -> Iterator[list[Key]]:
    """Attach to each index its epoch and epoch-stream position (chunks of (positions, indices))."""
    for positions, indices in chunks:
        yield [(epoch, position, index) for position, index in zip(positions.tolist(), indices.tolist(), strict=True)]


class _Samples(list):  # type: ignore[type-arg]
    """The fetched samples of one batch, carrying the key of the batch they form."""

    batch_key: tuple[int, int]


class KeyedDataset(torch.utils.data.Dataset[Any]):
    """The user's dataset behind keys: ``self[key]`` is ``transform(dataset[index], rng)`` with the
    sample's own generator, and with ``seed_per_sample`` the global RNGs (torch, numpy, random) are
    seeded from it around ``dataset[index]`` and the transform, then restored.

    Attributes it does not have are the wrapped dataset's (``len``, ``prefetch``, ``fingerprint``).
    ``skips_errors`` (set under ``skip_bad_samples=``, ``skipping.py``): an exception of the transform that
    ``is_bad_sample`` (any but a programming error) is re-said as a ``SampleError``, so that it is skipped like one.
    """

    skips_errors = False

    def __init__(self, dataset: Any, seed: int, transform: Transform | None, seed_per_sample: bool,
                 pool: SamplePool | None = None) -> None:
        self.dataset, self.seed = dataset, seed
        self.transform, self.seed_per_sample = transform, seed_per_sample
        self.pool = pool  # decode_threads: a batch read at once, its transforms mapped in threads, in order

    def __len__(self) -> int:
        return len(self.dataset)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("dataset", "seed", "transform", "seed_per_sample", "pool",
                                              "skips_errors"):
            raise AttributeError(name)  # not set yet (unpickling): never recurse into the dataset
        return getattr(self.dataset, name)

    def _sample(self, epoch: int, index: int) -> Any:
        """One sample; with ``seed_per_sample`` the caller holds ``saved_globals()``."""
        rng = sample_rng(self.seed, epoch, index)
        if self.seed_per_sample:
            seed_globals(rng)
        sample = self.dataset[index]
        return sample if self.transform is None else self._transformed(self.transform, sample, rng, index)

    def _transformed(self, transform: Transform, sample: Any, rng: np.random.Generator, index: int) -> Any:
        """``transform(sample, rng)``; a bad sample (``SampleError``) is re-raised naming its shard and row."""
        start = time.perf_counter()
        try:
            return transform(sample, rng)
        except SampleError as error:
            raise located_error(error, self.dataset, index) from error
        except Exception as error:
            if not self.skips_errors or not is_bad_sample(error):
                raise
            bad = SampleError(f"transform raised {type(error).__name__}: {error}")
            raise located_error(bad, self.dataset, index) from error
        finally:
            _timed(time.perf_counter() - start)  # the data wait's transform seconds (wait.py)

    def _keyed_transform(self, pair: tuple[Any, Key]) -> Any:
        """``transform(sample, rng)`` of a sample read in a batch, its generator keyed by (seed, epoch, index)."""
        sample, (epoch, _position, index) = pair
        assert self.transform is not None
        return self._transformed(self.transform, sample, sample_rng(self.seed, epoch, index), index)

    def __getitem__(self, key: Key) -> Any:
        epoch, _position, index = key
        if not self.seed_per_sample:
            return self._sample(epoch, index)
        with saved_globals():
            return self._sample(epoch, index)

    def __getitems__(self, keys: list[Key]) -> list[Any]:
        fetch = getattr(self.dataset, "__getitems__", None)
        if fetch is not None and not self.seed_per_sample:  # batched reads stay batched
            samples = fetch([index for _epoch, _position, index in keys])
            if self.transform is not None:
                pairs = zip(samples, keys, strict=True)
                samples = (self.pool.map(self._keyed_transform, pairs) if self.pool is not None
                           else [self._keyed_transform(pair) for pair in pairs])
        else:  # with seed_per_sample, the global states are saved once per batch (numpy's costs ~50 us)
            with saved_globals() if self.seed_per_sample else contextlib.nullcontext():
                samples = [self._sample(epoch, index) for epoch, _position, index in keys]
        found = _Samples(samples)
        if keys:
            found.batch_key = (keys[0][0], keys[0][1])
        return found


class KeyedCollate:
    """``collate_fn`` with the global RNGs seeded from the batch's own generator: keyed by (seed,
    epoch, the batch's first position in the epoch's global stream), so a collator that masks or
    noises (MLM) makes the same batch the same way in any worker and after any resume."""

    def __init__(self, collate_fn: Callable[[list[Any]], Any], seed: int) -> None:
        self.collate_fn, self.seed = collate_fn, seed

    def __call__(self, samples: list[Any]) -> Any:
        key = getattr(samples, "batch_key", None)
        if key is None:  # not fetched through KeyedDataset (an empty batch): nothing to key by
            return self.collate_fn(samples)
        with seeded_globals(batch_rng(self.seed, *key)):
            return self.collate_fn(list(samples))
