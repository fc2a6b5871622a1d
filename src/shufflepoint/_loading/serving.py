"""What torch's machinery reads for a ``shufflepoint.DataLoader``: the dataset as served (columns for a
corpus that reads a batch at once, a wrapper for keyed randomness) and index chunks announced ahead."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch.utils.data

from shufflepoint._core.capabilities import ReadsColumns
from shufflepoint._core.errors import Plain, refusal
from shufflepoint._loading.keyed import KeyedCollate, KeyedDataset, Transform
from shufflepoint._shards.batch import collate as columnar_collate

Chunk = tuple[np.ndarray, np.ndarray]  # (epoch positions, dataset indices)


def announced(chunks: Iterator[Chunk], prefetch: Callable[[np.ndarray], None]) -> Iterator[Chunk]:
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
    very result without an object per row; keyed randomness wraps the dataset (see ``keyed``)."""
    keyed = transform is not None or seed_per_sample
    if torch_kwargs.get("collate_fn") is None and not keyed and isinstance(dataset, ReadsColumns):
        dataset = dataset.columnar()
        torch_kwargs["collate_fn"] = columnar_collate
    if keyed:
        dataset = KeyedDataset(dataset, seed, transform, seed_per_sample)
        if seed_per_sample:
            collate = torch_kwargs.get("collate_fn") or torch.utils.data.default_collate
            torch_kwargs["collate_fn"] = KeyedCollate(collate, seed)
    return dataset
