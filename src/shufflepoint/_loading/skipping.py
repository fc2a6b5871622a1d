"""``skip_bad_samples=``: a sample that fails to read or decode replaced in its slot, then excluded on every rank.

Three places, one per process boundary:

- in whichever process reads the batch (a worker, or the main process), ``SkippingDataset`` reads each sample;
  one that raises ``ShardError`` (but storage that does not answer, ``NoAnswer``, which still ends the run) or
  ``SampleError`` (the loader's ``transform`` raising anything is re-said as a
  ``SampleError`` in this mode, ``keyed.py``) is replaced by the first readable, not excluded
  ``replacement(seed, index, attempt, n)`` (``_core/skips.py``), and the sample travels as ``Replaced``;
- ``SkipCollate`` (the batch's collate) takes the replaced samples out and hands the main process the batch
  with its skips (``WithSkips``), or, when ``max_in_a_row`` reads in a row failed, the failures (``GaveUp``);
- the main process (``DataLoader._count``) agrees on the skips of this step across the ranks
  (``agree_on_skips``: one all_reduce of one int64 a batch, a gather only when a rank skipped), then every rank
  excludes the same indices from the next batch on and keeps them in the state's record
  (``LoaderPosition.skip``), or every rank raises the same error past the limit.

So the batch that held a bad sample is full, its replacement is the same whichever worker, rank or
``num_workers`` read it, and the step at which the exclusion takes effect is the same on every rank.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch.utils.data

from shufflepoint._core.exclusion import Exclusion
from shufflepoint._core.skips import ERROR_CHARS, Skip, SkipBadSamples, in_a_row_error, replacement
from shufflepoint._errors import Plain, SampleError, ShardError, refusal
from shufflepoint._loading.keyed import KeyedDataset, _Samples
from shufflepoint._shards.storage.faults import NoAnswer

CAUGHT = (ShardError, SampleError)
_DRAWS = 4096  # replacements drawn for one slot before giving up on finding one not excluded


@runtime_checkable
class PlacesRows(Protocol):
    """A corpus of shards that says which shard and row a dataset index is, by arithmetic (``Shards``)."""

    def shard_of(self, index: int) -> tuple[int, int]: ...


class Replaced:
    """A sample served in place of a failed one, with the skips it stands for (``step`` not known yet: -1)."""

    def __init__(self, sample: Any, skips: list[Skip]) -> None:
        self.sample, self.skips = sample, skips


class GaveUp:
    """``max_in_a_row`` reads in a row failed for one slot: the failures, ``(index, shard, row, error)``."""

    def __init__(self, failures: list[tuple[int, str | None, int | None, str]]) -> None:
        self.failures = failures


class WithSkips:
    """A collated batch and the skips made while reading it, as the main process receives it."""

    def __init__(self, batch: Any, skips: list[Skip]) -> None:
        self.batch, self.skips = batch, skips

    def pin_memory(self) -> WithSkips:  # torch's pin-memory thread calls it
        from torch.utils.data._utils.pin_memory import pin_memory  # private: torch's own pinning of any batch

        return WithSkips(pin_memory(self.batch), self.skips)  # type: ignore[no-untyped-call]


def _error_text(error: Exception) -> str:
    text = f"{type(error).__name__}: {error}".replace("\n", " ")
    return text if len(text) <= ERROR_CHARS else text[: ERROR_CHARS - 3] + "..."


class SkippingDataset(torch.utils.data.Dataset[Any]):
    """The dataset as served, a failed sample replaced by arithmetic (see the module's docstring). ``excluded`` is
    set by the loader before each iterator starts its workers, so that a replacement is never an excluded sample."""

    def __init__(self, dataset: Any, places: Any, seed: int, n: int, policy: SkipBadSamples) -> None:
        self.dataset, self.seed, self.n, self.policy = dataset, seed, n, policy
        self.places = places if isinstance(places, PlacesRows) else None
        self.excluded = Exclusion.empty(n)

    def __len__(self) -> int:
        return len(self.dataset)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("dataset", "places", "seed", "n", "policy", "excluded"):
            raise AttributeError(name)  # not set yet (unpickling): never recurse into the dataset
        return getattr(self.dataset, name)

    def __getitem__(self, key: Any) -> Any:
        try:
            return self.dataset[key]
        except NoAnswer:
            raise  # storage that does not answer is no bad sample: skipping would read on without it
        except CAUGHT as error:
            return self._replaced(key, error)

    def __getitems__(self, keys: list[Any]) -> list[Any]:
        fetch = getattr(self.dataset, "__getitems__", None)
        if callable(fetch):
            try:
                found = fetch(keys)
            except NoAnswer:
                raise
            except CAUGHT:
                found = None  # one of them failed: read them one at a time, each failure replaced
            if found is not None:
                return found if isinstance(found, list) else list(found)
        samples = _Samples(self[key] for key in keys)
        if keys and isinstance(keys[0], tuple):  # keyed: the batch's key, as KeyedDataset gives it
            samples.batch_key = (keys[0][0], keys[0][1])
        return samples

    def _where(self, index: int, error: Exception) -> tuple[str | None, int | None]:
        if not isinstance(error, ShardError):
            return None, None
        row = self.places.shard_of(index)[1] if self.places is not None else None
        return error.shard, row

    def _replaced(self, key: Any, error: Exception) -> Replaced | GaveUp:
        index = key[2] if isinstance(key, tuple) else int(key)
        failures = [(index, *self._where(index, error), _error_text(error))]
        for attempt in range(_DRAWS):
            if len(failures) >= self.policy.max_in_a_row:
                break
            candidate = replacement(self.seed, index, attempt, self.n)
            if self.excluded.contains(np.array([candidate]))[0] or candidate in (f[0] for f in failures):
                continue
            replacing = (key[0], key[1], candidate) if isinstance(key, tuple) else candidate
            try:
                sample = self.dataset[replacing]
            except NoAnswer:
                raise
            except CAUGHT as failed:
                failures.append((candidate, *self._where(candidate, failed), _error_text(failed)))
                continue
            return Replaced(sample, [Skip(-1, failed_index, candidate, shard, row, text)
                                     for failed_index, shard, row, text in failures])
        return GaveUp(failures)


class SkipCollate:
    """The batch's collate: replaced samples taken out of their markers, the skips handed on (``WithSkips``);
    a slot that could not be filled ends the batch as ``GaveUp``."""

    def __init__(self, collate_fn: Callable[[list[Any]], Any]) -> None:
        self.collate_fn = collate_fn

    def __call__(self, samples: list[Any]) -> Any:
        skips: list[Skip] = []
        for k, sample in enumerate(samples):
            if isinstance(sample, GaveUp):
                return sample
            if isinstance(sample, Replaced):
                skips.extend(sample.skips)
                samples[k] = sample.sample  # in place: a keyed batch keeps its batch_key
        batch = self.collate_fn(samples)
        return WithSkips(batch, skips) if skips else batch


def check_skipping(value: object, torch_kwargs: dict[str, Any], position: Any) -> SkipBadSamples | None:
    """``skip_bad_samples`` as a policy: False (None), True (the default limits) or a dict of limits
    (``max_in_a_row``, ``max_skips``, ``window``), for a dataset whose samples can be excluded, and without
    persistent workers (whose copy of the excluded set would go stale): ``position`` (the loader's
    ``LoaderPosition``) is asked whether it can exclude. Its samples are then read one by one (a
    collate of samples, not a corpus's columns), so that the one that failed is found."""
    if value is False or value is None:
        return None
    limits = ", ".join(f.name for f in dataclasses.fields(SkipBadSamples))
    if value is True:
        policy = SkipBadSamples()
    elif isinstance(value, Mapping) and set(value) <= {f.name for f in dataclasses.fields(SkipBadSamples)}:
        policy = SkipBadSamples(**value)
    else:
        raise TypeError(refusal("skip_bad_samples", value, f"True, False, or a dict of limits ({limits})",
                                "pass skip_bad_samples=True, or e.g. {'max_skips': 8, 'window': 1000}"))
    if torch_kwargs.get("persistent_workers"):
        raise ValueError(refusal("skip_bad_samples", Plain("with persistent_workers=True"),
                                 "persistent_workers=False", "pass persistent_workers=False",
                                 why="a persistent worker keeps the excluded set it started with, and could fill a "
                                 "slot with a sample excluded since"))
    try:
        position.exclusion_with([])
    except ValueError as error:
        raise ValueError(refusal("skip_bad_samples", value, "a dataset whose samples can be excluded",
                                 "leave skip_bad_samples unset (a bad sample then ends the run)",
                                 why=f"a skipped sample is excluded, and this loader refuses exclude(): "
                                 f"{str(error).splitlines()[0]}")) from error
    torch_kwargs["collate_fn"] = torch_kwargs.get("collate_fn") or torch.utils.data.default_collate
    return policy


def _keyed_inside(dataset: Any) -> KeyedDataset | None:
    """The keyed dataset (the loader's ``transform``) the served dataset is, or wraps for ``decode_threads``."""
    for _ in range(3):
        if isinstance(dataset, KeyedDataset):
            return dataset
        dataset = vars(dataset).get("dataset") if hasattr(dataset, "__dict__") else None
        if dataset is None:
            return None
    return None


def served_skipping(dataset: Any, places: Any, seed: int, n: int, policy: SkipBadSamples | None,
                    torch_kwargs: dict[str, Any]) -> SkippingDataset | None:
    """The dataset as served, wrapped to replace failed samples (a transform's exceptions then count as bad
    samples); its collate (set in ``torch_kwargs``) hands on the skips. None without a policy."""
    if policy is None:
        return None
    keyed = _keyed_inside(dataset)
    if keyed is not None:
        keyed.skips_errors = True
    collate = torch_kwargs.get("collate_fn") or torch.utils.data.default_collate
    torch_kwargs["collate_fn"] = SkipCollate(collate)
    return SkippingDataset(dataset, places, seed, n, policy)


def agree_on_skips(skips: list[Skip], gave_up: GaveUp | None, world_size: int, rank: int,
                   groups: tuple[Any, ...] | None) -> tuple[list[Skip], list[GaveUp]]:
    """Every rank's skips and give-ups of this step, in rank order, the same on every rank: one all_reduce(MAX)
    of one int64 a step along the loader's ranks (its mesh's groups, or the default group), then, only when
    some rank skipped, one all_gather of the records (``agreement.gather_from_all``)."""
    mine = (skips, [gave_up] if gave_up is not None else [])
    if world_size == 1:
        return mine
    import torch.distributed as dist

    from shufflepoint._loading.agreement import checked_along, gather_from_all, watch_gloo_exit

    along = checked_along(True, rank, world_size, groups)
    if along is None:
        raise RuntimeError(refusal("skip_bad_samples", Plain(f"{world_size} ranks without a process group"),
                                   "an initialised process group over the loader's ranks (or mesh=/process_group=)",
                                   "call torch.distributed.init_process_group before iterating",
                                   why="a skipped sample is agreed on by every rank at the step it was read"))
    on_gpu = dist.get_backend(along[0]) == "nccl"  # NCCL reduces device tensors only
    device = torch.device("cuda", torch.cuda.current_device()) if on_gpu else torch.device("cpu")
    flag = torch.tensor([int(bool(skips) or gave_up is not None)], dtype=torch.int64, device=device)
    for group in along:
        dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=group)
    if not on_gpu:
        watch_gloo_exit()
    if not int(flag.item()):
        return [], []
    gathered = gather_from_all(mine, along)
    return ([skip for rank_skips, _ in gathered for skip in rank_skips],
            [given for _, rank_gave_up in gathered for given in rank_gave_up])


def stop_text(gave_up: list[GaveUp], policy: SkipBadSamples) -> str:
    """One error for every rank's give-ups of a step."""
    return "\n".join(in_a_row_error(given.failures, policy) for given in gave_up)
