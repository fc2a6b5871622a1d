"""The loaders under test, built the same way for every section, and what each one's resume needs.

Every loader reads ``Ids(n)`` (item i is i; the default collate makes an int64 tensor per batch), with
batch size 32, shuffled, built right after ``torch.manual_seed(SEED)`` as a seeded script would.
"Rank 0 of 2" loaders are what rank 0 of a two-process job holds; they are built without a process
group (explicit rank/world size), so no collective runs.

Per loader this module knows how to
- build it (``build``),
- write a state "as if" k batches had been received (``synthetic_state``): the real state of a
  loader after 3 batches with its progress counters set to k, the method the peer baseline used,
- compute the batch a resume at k must yield, in closed form (``expected_batch``),
- take a real state by iterating k batches (``real_state``), to check the synthetic one.
"""

from __future__ import annotations

import copy
import itertools
import json
import pickle
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler

warnings.filterwarnings("ignore", message=".*set_vital.*")

SEED = 1234
BATCH = 32
WORLD = 2  # for the "rank 0 of 2" loaders


class Ids(Dataset):
    """A map-style dataset of n items whose item i is the int i: no data cost at all."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> int:
        return index


@dataclass(frozen=True)
class Impl:
    key: str
    label: str
    world: int  # 1: a single-process loader; 2: rank 0 of a two-process job
    resumable: bool
    state_format: str  # "json" or "pickle": how the state travels to the resumed process


IMPLS: dict[str, Impl] = {
    impl.key: impl
    for impl in (
        Impl("shufflepoint", "shufflepoint.DataLoader (rank 0 of 2)", 2, True, "json"),
        Impl("sp_sampler", "shufflepoint.ResumableSampler + torch DataLoader (rank 0 of 2)", 2, True, "json"),
        Impl("torch_ds", "torch DataLoader + DistributedSampler (rank 0 of 2)", 2, False, "-"),
        Impl("torch", "torch DataLoader (shuffle=True)", 1, False, "-"),
        Impl("torchdata", "torchdata StatefulDataLoader", 1, True, "pickle"),
        Impl("accelerate", "Accelerate prepared, stateful (rank 0 of 2)", 2, True, "pickle"),
    )
}


def build(key: str, n: int, num_workers: int = 0) -> Any:
    torch.manual_seed(SEED)
    dataset = Ids(n)
    if key == "shufflepoint":
        import shufflepoint

        return shufflepoint.DataLoader(
            dataset, batch_size=BATCH, seed=SEED, world_size=WORLD, rank=0, num_workers=num_workers
        )
    if key == "sp_sampler":
        import shufflepoint

        sampler = shufflepoint.ResumableSampler(dataset, num_replicas=WORLD, rank=0, seed=SEED)
        return DataLoader(dataset, batch_size=BATCH, sampler=sampler, num_workers=num_workers)
    if key == "torch_ds":
        sampler = DistributedSampler(dataset, num_replicas=WORLD, rank=0, shuffle=True, seed=SEED)
        return DataLoader(dataset, batch_size=BATCH, sampler=sampler, num_workers=num_workers)
    if key == "torch":
        return DataLoader(dataset, batch_size=BATCH, shuffle=True, num_workers=num_workers)
    if key == "torchdata":
        from torchdata.stateful_dataloader import StatefulDataLoader

        return StatefulDataLoader(dataset, batch_size=BATCH, shuffle=True, num_workers=num_workers)
    if key == "accelerate":
        from accelerate.data_loader import prepare_data_loader

        inner = DataLoader(dataset, batch_size=BATCH, shuffle=True, num_workers=num_workers)
        return prepare_data_loader(
            inner, num_processes=WORLD, process_index=0, put_on_device=False, use_stateful_dataloader=True
        )
    raise KeyError(key)


def batches_per_epoch(key: str, n: int) -> int:
    per_rank = -(-n // IMPLS[key].world)
    return -(-per_rank // BATCH)


def real_state(key: str, n: int, k: int) -> dict[str, Any]:
    """The state after iterating k batches for real."""
    loader = build(key, n)
    iterator = iter(loader)
    for _ in itertools.islice(iterator, k):
        pass
    return state_of(key, loader)


def synthetic_state(key: str, n: int, k: int) -> dict[str, Any]:
    """The state after k batches, written without iterating them."""
    if key in ("shufflepoint", "sp_sampler"):
        state = state_of(key, build(key, n))
        state["cursor"] = min(k * BATCH * WORLD, n)
        state["steps"] = -(-state["cursor"] // (state["world_size"] * state["batch_size"]))  # batches per rank
        return state
    state = real_state(key, n, 3)
    state["_sampler_iter_yielded"] = k
    state["_num_yielded"] = k
    if key == "torchdata":
        # The generator state is the one *before* the epoch's permutation: it does not move with k.
        state["_sampler_iter_state"]["samples_yielded"] = k * BATCH
        state["_sampler_iter_state"]["sampler_iter_state"]["yielded"] = k * BATCH
    return state


def states_equal(a: Any, b: Any) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(states_equal(a[key], b[key]) for key in a)
    if torch.is_tensor(a) or torch.is_tensor(b):
        return torch.is_tensor(a) and torch.is_tensor(b) and torch.equal(a, b)
    return type(a) is type(b) and a == b


def round_trip(key: str, state: dict[str, Any]) -> dict[str, Any]:
    """The state as a resumed process reads it back from a checkpoint."""
    if IMPLS[key].state_format == "json":
        return json.loads(json.dumps(state))
    return pickle.loads(pickle.dumps(state))


class Reference:
    """The true next batch after k batches, in closed form (not by running the loader)."""

    def __init__(self, key: str, n: int) -> None:
        self.key, self.n = key, n
        if key in ("shufflepoint", "sp_sampler"):
            from shufflepoint import permutation

            self._permutation = permutation(n, SEED, 0)
        else:
            # torch.manual_seed(SEED), then the sampler draws its generator's seed from the global
            # generator (torch RandomSampler, torchdata RandomSampler, and Accelerate's prepare all
            # do this once) and shuffles with torch.randperm.
            torch.manual_seed(SEED)
            seed = int(torch.empty((), dtype=torch.int64).random_().item())
            generator = torch.Generator().manual_seed(seed)
            self._perm = torch.randperm(n, generator=generator)

    def batch(self, k: int) -> list[int]:
        if self.key in ("shufflepoint", "sp_sampler"):
            positions = k * BATCH * WORLD + np.arange(BATCH, dtype=np.int64) * WORLD
            positions = positions[positions < self.n]
            return self._permutation.take(positions).tolist()
        world = IMPLS[self.key].world
        start = k * BATCH * world  # rank 0 takes global batches 0, W, 2W, ...
        return self._perm[start : start + BATCH].tolist()


def resume(key: str, loader: Any, state: dict[str, Any] | None) -> list[int]:
    """load_state_dict (when a state is given), iter(), next(): the timed part of a resume."""
    if state is not None:
        load(key, loader, state)
    return next(iter(loader))


def load(key: str, loader: Any, state: dict[str, Any]) -> None:
    if key == "sp_sampler":
        loader.sampler.load_state_dict(state)
    else:
        loader.load_state_dict(state)


def state_of(key: str, loader: Any) -> dict[str, Any]:
    return loader.sampler.state_dict() if key == "sp_sampler" else loader.state_dict()


def copy_state(state: dict[str, Any]) -> dict[str, Any]:
    return copy.deepcopy(state)
