"""``skip_bad_samples=``: a sample that fails to read or decode replaced in its slot, then excluded on every rank.

Three places, one per process boundary:

- in whichever process reads the batch (a worker, or the main process), ``SkippingDataset`` reads each sample;
  one that raises a bad sample's error (``is_bad_sample``, ``_core/skips.py``: any exception of the dataset, of a
  corpus's ``transform`` or of the loader's ``transform``, but a programming error such as ``TypeError``, and but
  storage that does not answer, ``NoAnswer``, which still ends the run) is replaced by the first readable, not
  excluded ``replacement(seed, index, attempt, n)`` drawn from its group (``Groups``: the dataset, a bucket, a
  mixture's source), and the sample travels as ``Replaced``;
- ``SkipCollate`` (the batch's collate) takes the replaced samples out and hands the main process the batch
  with its skips (``WithSkips``), or, when ``max_in_a_row`` reads in a row failed, the failures (``GaveUp``);
- the main process (``DataLoader._count``) agrees on the skips of this step across the ranks
  (``agree_on_skips``: one all_reduce of one int64 a batch, a gather only when a rank skipped), then every rank
  excludes the same indices from the next batch on and keeps them in the state's record
  (``LoaderPosition.skip``), or every rank raises the same error past the limit. A loader that cannot exclude
  (``Mixture``, ``Packed``, ``buckets=``) only replaces: the skips are recorded, nothing is excluded, and the bad
  sample meets the same replacement each time it comes up (``can_exclude``).

So the batch that held a bad sample is full, its replacement is the same whichever worker, rank or
``num_workers`` read it, and the step at which the exclusion takes effect is the same on every rank.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch.utils.data

from shufflepoint._core.exclusion import Exclusion
from shufflepoint._core.skips import ERROR_CHARS, Skip, SkipBadSamples, in_a_row_error, is_bad_sample, replacement
from shufflepoint._errors import Plain, ShardError, refusal
from shufflepoint._loading.keyed import KeyedDataset, _Samples
from shufflepoint._shards.corpora.shards.locate import WHERE, below
from shufflepoint._shards.storage.faults import NoAnswer

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


def _bad(error: BaseException) -> bool:
    """A bad sample's error (``is_bad_sample``), storage that does not answer excepted: skipping would read on
    without it."""
    return is_bad_sample(error) and not isinstance(error, NoAnswer)


class Groups:
    """Where the replacement of a failed index comes from: the index's *group*, so that a batch of one bucket stays
    one bucket and a mixture keeps its shares. An index is ``key * period + starts[g] + row`` (``key``: a
    ``Packed`` epoch or a ``Mixture`` pass, 0 for the others; ``g``: the group; ``row`` its place in it), read
    through ``members`` (a bucket's samples, ``BucketTable.members``) where given. The replacement keeps ``key``
    and ``g``: ``replacement(seed, index, attempt, size of g, own=row)``."""

    def __init__(self, period: int, starts: Any, members: np.ndarray | None = None) -> None:
        self.period, self.starts = period, np.asarray(starts, dtype=np.int64)
        self.members = members
        self._place: np.ndarray | None = None  # members' inverse, built at the first failure (O(n) once)

    def draw(self, seed: int, index: int, attempt: int) -> int | None:
        """The replacement at ``attempt``; None when the group holds no other sample."""
        key, local = divmod(index, self.period)
        if self.members is not None:
            if self._place is None:
                self._place = np.empty(self.members.size, dtype=np.int64)
                self._place[self.members] = np.arange(self.members.size, dtype=np.int64)
            local = int(self._place[local])
        group = int(np.searchsorted(self.starts, local, side="right")) - 1
        start, size = int(self.starts[group]), int(self.starts[group + 1] - self.starts[group])
        if size < 2:
            return None
        local = start + replacement(seed, index, attempt, size, own=local - start)
        return key * self.period + (int(self.members[local]) if self.members is not None else local)


def replacement_groups(dataset: Any, orders: Any, n: int) -> Groups:
    """The groups a replacement is drawn from (``Groups``): a loader's buckets, a ``Mixture``'s sources, a
    ``Packed``'s epochs, else the whole dataset."""
    table = getattr(orders, "table", None)
    if table is not None and hasattr(table, "members"):  # buckets= (bucketed.BucketOrders)
        return Groups(table.n, table.starts, table.members)
    lengths = getattr(dataset, "lengths", None)
    if hasattr(dataset, "source_of") and isinstance(lengths, list):  # a Mixture: pass * rows + offset + row
        starts = np.concatenate([[0], np.cumsum(lengths)])
        return Groups(int(starts[-1]), starts)
    period = getattr(dataset, "rows_per_epoch", n)  # Packed: epoch * rows + row
    return Groups(period, [0, period])


_ADDRESS = re.compile(r" (?:object )?at 0x[0-9a-fA-F]+")  # PIL: "<_io.BytesIO object at 0x7f...>"


def _error_text(error: Exception) -> str:
    """The error as the record keeps it: one line, no memory addresses (the same text in every process), cut."""
    text = _ADDRESS.sub("", f"{type(error).__name__}: {error}".replace("\n", " "))
    return text if len(text) <= ERROR_CHARS else text[: ERROR_CHARS - 3] + "..."


class SkippingDataset(torch.utils.data.Dataset[Any]):
    """The dataset as served, a failed sample replaced by arithmetic (see the module's docstring). ``excluded`` is
    set by the loader before each iterator starts its workers, so that a replacement is never an excluded sample."""

    def __init__(self, dataset: Any, places: Any, seed: int, n: int, policy: SkipBadSamples,
                 groups: Groups | None = None) -> None:
        self.dataset, self.seed, self.n, self.policy = dataset, seed, n, policy
        self.places = places  # the user's dataset: where a failed index lives (shard and row)
        self.groups = groups or Groups(n, [0, n])
        self.excluded = Exclusion.empty(n)

    def __len__(self) -> int:
        return len(self.dataset)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("dataset", "places", "seed", "n", "policy", "excluded", "groups"):
            raise AttributeError(name)  # not set yet (unpickling): never recurse into the dataset
        return getattr(self.dataset, name)

    def __getitem__(self, key: Any) -> Any:
        try:
            return self.dataset[key]
        except Exception as error:
            if not _bad(error):
                raise
            return self._replaced(key, error)

    def __getitems__(self, keys: list[Any]) -> list[Any]:
        fetch = getattr(self.dataset, "__getitems__", None)
        if callable(fetch):
            try:
                found = fetch(keys)
            except Exception as error:
                if not _bad(error):
                    raise
                found = None  # one of them failed: read them one at a time, each failure replaced
            if found is not None:
                return found if isinstance(found, list) else list(found)
        samples = _Samples(self[key] for key in keys)
        if keys and isinstance(keys[0], tuple):  # keyed: the batch's key, as KeyedDataset gives it
            samples.batch_key = (keys[0][0], keys[0][1])
        return samples

    def _where(self, index: int, error: Exception) -> tuple[str | None, int | None]:
        """(shard, row) of a failed index: as a corpus's transform marked its error, by arithmetic for a ``Shards``
        corpus, else from the dataset's
        ``locate`` (a ``Mixture``, ``Packed``: the document in the shard that failed, if named); (None, None)
        for a dataset that cannot say."""
        said = getattr(error, WHERE, None)  # a corpus's transform raised it: its shard and row (say_where)
        if said is not None:
            return said[0], said[1]
        named = error.shard if isinstance(error, ShardError) else None
        if isinstance(self.places, PlacesRows):
            shard, row = self.places.shard_of(index)
            index_of = getattr(self.places, "index", None)
            return (named or (index_of.url(shard) if index_of is not None else str(shard))), row
        try:
            found = _file_row(below(self.places, index), named)
        except Exception:  # locating opens the shard, which may be what failed
            found = None
        return found if found is not None else (named, None)

    def _replaced(self, key: Any, error: Exception) -> Replaced | GaveUp:
        index = key[2] if isinstance(key, tuple) else int(key)
        failures = [(index, *self._where(index, error), _error_text(error))]
        for attempt in range(_DRAWS):
            if len(failures) >= self.policy.max_in_a_row:
                break
            candidate = self.groups.draw(self.seed, index, attempt)
            if candidate is None:  # a group of one sample (a bucket): nothing can stand in for it
                failures.append((index, None, None, "no other sample in its group (bucket or source) to replace it"))
                break
            if self.excluded.contains(np.array([candidate]))[0] or candidate in (f[0] for f in failures):
                continue
            replacing = (key[0], key[1], candidate) if isinstance(key, tuple) else candidate
            try:
                sample = self.dataset[replacing]
            except Exception as failed:
                if not _bad(failed):
                    raise
                failures.append((candidate, *self._where(candidate, failed), _error_text(failed)))
                continue
            return Replaced(sample, [Skip(-1, failed_index, candidate, shard, row, text)
                                     for failed_index, shard, row, text in failures])
        return GaveUp(failures)


def _file_row(where: dict[str, Any] | None, shard: str | None) -> tuple[str | None, int | None] | None:
    """The first (url, row) a nested ``locate`` answer names (the one in ``shard`` when given), else None."""
    if not isinstance(where, dict):
        return None
    if "url" in where and "row" in where and (shard is None or where["url"] == shard):
        return str(where["url"]), int(where["row"])
    found = None
    for value in [where.get("where"), *where.get("documents", [])]:
        found = _file_row(value, shard)
        if found is not None:
            return found
    return None if shard is None else _file_row(where, None)


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


def can_exclude(position: Any) -> bool:
    """Whether the loader's position (``LoaderPosition``) can exclude a skipped sample; a loader that cannot
    (``Mixture``, ``Packed``, ``buckets=``: orders without an inverse) only replaces it."""
    try:
        position.exclusion_with([])
    except ValueError:
        return False
    return True


def check_skipping(value: object, torch_kwargs: dict[str, Any], position: Any) -> SkipBadSamples | None:
    """``skip_bad_samples`` as a policy: False (None), True (the default limits) or a dict of limits
    (``max_in_a_row``, ``max_skips``, ``window``); where the loader excludes a skipped sample (``can_exclude``),
    without persistent workers (whose copy of the excluded set would go stale). Its samples are then read one by
    one (a collate of samples, not a corpus's columns), so that the one that failed is found."""
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
    if torch_kwargs.get("persistent_workers") and can_exclude(position):
        raise ValueError(refusal("skip_bad_samples", Plain("with persistent_workers=True"),
                                 "persistent_workers=False", "pass persistent_workers=False",
                                 why="a persistent worker keeps the excluded set it started with, and could fill a "
                                 "slot with a sample excluded since"))
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
                    torch_kwargs: dict[str, Any], groups: Groups | None = None) -> SkippingDataset | None:
    """The dataset as served, wrapped to replace failed samples (a transform's exceptions then count as bad
    samples); its collate (set in ``torch_kwargs``) hands on the skips. None without a policy."""
    if policy is None:
        return None
    keyed = _keyed_inside(dataset)
    if keyed is not None:
        keyed.skips_errors = True
    collate = torch_kwargs.get("collate_fn") or torch.utils.data.default_collate
    torch_kwargs["collate_fn"] = SkipCollate(collate)
    return SkippingDataset(dataset, places, seed, n, policy, groups)


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
