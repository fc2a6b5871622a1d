"""What a dataset or a shard reader may offer beyond ``__getitem__``/``__len__``, declared once.

The loader, the compositions (``Mixture``, ``Packed``) and the tools ask for a capability with
``isinstance(dataset, Capability)``, never by probing attribute names. Each capability is a small
``typing.Protocol``: a dataset offers it by having its members, no base class needed. They come in
four groups:

- **order**: ``OwnOrder`` (the dataset deals its own seekable order: ``Mixture``, ``Packed``, or
  yours), ``ShardedCorpus`` (rows grouped in shards, read in the ``blocks`` order: ``Shards``),
  ``KeepsShardsOpen``, ``FitsDecodeBudget``, ``Scheduled`` (a ``Mixture`` with a schedule).
- **identity**: ``Identified`` (a fingerprint string that joins the state), ``ExplainsFingerprint``,
  ``LegacyIdentified`` (the fingerprint shufflepoint 0.2 wrote), ``ExplainsOrderVersion``.
- **reading**: ``ReadsBatches`` (a whole batch at once), ``ReadsColumns`` (``columnar()``),
  ``ReadsIds``, ``ReadsIdsAscending``, ``ReadsIdSpansAscending`` (a token column as arrays),
  ``Prefetching`` (upcoming indices announced ahead), ``PrefetchesDealt`` (and how densely this rank
  reads there), ``ReadsAtDensity``, ``ReadsAhead``, ``Locatable`` (where an index lives).
- **readers** (one format's shards): ``CountsRowsFromSize``, ``CountsRowsFromMetadata``,
  ``MeasuresDecodedRows``, ``TakesIds``, ``KeepsDecodedIds``, ``JoinsLayout``, ``LocatesRows``,
  ``OpensRanged``, ``TilesShards``.

A capability's absence is never an error by itself: the caller then does without (no prefetch, a
row at a time, ...). ``tests/test_capabilities.py`` checks which built-in class offers which.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

_OFFERED: dict[tuple[type, type], bool] = {}


def offered(instance: object, capability: type) -> bool:
    """``isinstance(instance, capability)`` asked once per class: a runtime Protocol's check walks its members
    (~10 µs), and a resume's first batch opens ~110 token shards, a window of ``Packed`` several Parquet ones."""
    key = (type(instance), capability)
    found = _OFFERED.get(key)
    if found is None:
        found = _OFFERED[key] = isinstance(instance, capability)
    return found

# -- order -------------------------------------------------------------------------------------


@runtime_checkable
class OwnOrder(Protocol):
    """A dataset that deals its own seekable order (``order=None`` picks it; no other order applies)."""

    order_name: str  # the order's name in the state
    order_version: int  # bumped whenever the same seed would give another order

    def epoch_order(self, seed: int, epoch: int, shuffle_block: int) -> Any:
        """The epoch's order (an ``_order.Order``: ``take(positions) -> indices``); a ``Scheduled`` dataset
        also takes ``grid=``, the global batch its schedule follows."""


@runtime_checkable
class CountsShare(Protocol):
    """A dataset that takes part of its setup by share (``Packed``: the token counts of the shards this
    process reads, exchanged with the other processes): the loader says its seed, rank and world size first."""

    def _count_share(self, seed: int, rank: int, world_size: int) -> None: ...


@runtime_checkable
class ShardedCorpus(Protocol):
    """Rows grouped in shards (``Shards``): read in the ``blocks`` order, a shuffled run of shards at a time."""

    @property
    def shard_rows(self) -> np.ndarray:
        """Rows of each shard, in shard order (int64)."""


@runtime_checkable
class KeepsShardsOpen(Protocol):
    """A corpus that can keep the shards of one block open while the block is read."""

    def _keep_open_for(self, shuffle_block: int) -> None: ...


@runtime_checkable
class FitsDecodeBudget(Protocol):
    """A corpus that sizes the default ``shuffle_block`` to the process's decode budget."""

    def _fitting_shuffle_block(self) -> int: ...


@runtime_checkable
class LaysOnStretches(Protocol):
    """A dataset whose own order is laid along the ``spans`` deal's stretches under that deal, each rank reading
    its own share of every source (``shufflepoint.Mixture``): ``epoch_order`` takes ``stretches``, and the order
    has its own version there."""

    @property
    def _stretched_version(self) -> int:
        """The version of the order laid along the stretches (a state records it under ``spans``)."""

    def epoch_order(self, seed: int, epoch: int, shuffle_block: int, grid: int | None = None,
                    stretches: int | None = None) -> Any:
        """The order of one epoch, laid along ``stretches`` (the ``spans`` deal's first world size) when given."""


@runtime_checkable
class Scheduled(Protocol):
    """A dataset whose order follows a schedule (``shufflepoint.Mixture(..., schedule=...)``)."""

    schedule: Any  # the schedule, or None when this instance has none

    @property
    def _required_deal(self) -> str | None:
        """The only deal the dataset can be read under, or None for any."""

    def _check_global_batch(self, global_batch: int, grid: int) -> None:
        """Warn when global batches of ``global_batch`` rows are not whole windows of the run's ``grid``
        (the global batch the schedule follows)."""

    @property
    def phases(self) -> tuple[tuple[int, str], ...]:
        """The schedule's phases as ``(start, hash)`` pairs (the state's ``phases``), ``()`` without one."""

    def _phase_changed(self, saved: list[list[Any]], epoch: int, cursor: int, grid: int | None,
                      shuffle_block: int, laid: bool = False) -> int | None:
        """The first of a state's ``saved`` phases the schedule changed before the position (epoch, cursor)
        had reached (``laid``: read in its order laid along the ``spans`` stretches, which fixes a whole epoch),
        or None where it only appended phases after it."""


# -- identity ----------------------------------------------------------------------------------


@runtime_checkable
class Identified(Protocol):
    """A dataset that names its own content: the string joins the state's ``dataset_fingerprint``."""

    @property
    def fingerprint(self) -> str: ...


@runtime_checkable
class ExplainsFingerprint(Protocol):
    """A dataset that says what changed when a state's fingerprint is not its own (``Shards``: the shards)."""

    def _explain_fingerprint(self, saved: str) -> str: ...


@runtime_checkable
class LegacyIdentified(Protocol):
    """A dataset with the fingerprint shufflepoint 0.2 wrote for it (a state of 0.2 still loads)."""

    @property
    def _legacy_fingerprint(self) -> str: ...


@runtime_checkable
class ExplainsOrderVersion(Protocol):
    """A dataset that says why a state's order version is not its own (which release wrote it)."""

    def _explain_order_version(self, found: object) -> str: ...


# -- reading -----------------------------------------------------------------------------------


@runtime_checkable
class ReadsBatches(Protocol):
    """A dataset that reads a whole batch of indices at once (a ``Batch`` of rows or columns)."""

    def read_batch(self, indices: Sequence[int] | np.ndarray) -> Any: ...


@runtime_checkable
class ReadsColumns(Protocol):
    """A dataset that hands torch's machinery its batches as read (``columnar()``), for ``collate``."""

    def columnar(self) -> Any: ...


@runtime_checkable
class ReadsIds(Protocol):
    """A corpus that reads a token column as one array per index, no Python int per token."""

    def _read_ids(self, indices: Sequence[int] | np.ndarray, column: str) -> list[np.ndarray] | None: ...


@runtime_checkable
class ReadsIdsAscending(Protocol):
    """A corpus that reads a token column for ascending indices in one pass (``Packed``'s token windows)."""

    def _read_ids_ascending(self, indices: Sequence[int] | np.ndarray, column: str) -> list[np.ndarray] | None: ...


@runtime_checkable
class ReadsIdSpansAscending(Protocol):
    """A ``ReadsIdsAscending`` corpus that also gives the ids as spans of a few flat arrays, no array per
    index (``Shards``: a decoded group's values): a window of thousands of documents in a few numpy calls."""

    def _read_id_spans_ascending(self, indices: Sequence[int] | np.ndarray, column: str) -> Any: ...


@runtime_checkable
class Prefetching(Protocol):
    """A dataset told its upcoming indices ahead (its shards download while the current ones are read)."""

    def prefetch(self, indices: Sequence[int] | np.ndarray) -> None: ...


@runtime_checkable
class PrefetchesDealt(Protocol):
    """A ``Prefetching`` dataset also told how densely this rank reads the order where the indices lie:
    ``density``, its positions over the span of positions they cover (1.0 under ``spans``: it reads the
    rest of those blocks next; ~1/k when k ranks split every global batch; 1/world under ``strided``).
    A shard read by byte range is then fetched in wide spans (dense) or row by row (sparse: the rows in
    between are other ranks'), see ``_shards/ranged_ahead``."""

    def prefetch_dealt(self, indices: Sequence[int] | np.ndarray, density: float) -> None: ...


@runtime_checkable
class ReadsAtDensity(Protocol):
    """A dataset told, before each pass's DataLoader workers start, how densely this rank reads the order
    (``PrefetchesDealt``'s density, of its first positions): ``Shards`` then fetches the ranges a read needs
    joined across the gaps between them where a rank reads densely (a stretch of its own: it reads them
    next), and only its own rows where it reads sparsely (a global batch split among ranks after a resize,
    ``strided``: the rows between are other ranks'); in every DataLoader worker (``_shards/ranged``)."""

    def _read_at_density(self, density: float) -> None: ...


@runtime_checkable
class ReadsAhead(Protocol):
    """A ``Prefetching`` dataset that says whether it has anything to fetch ahead (False: local files)."""

    @property
    def _reads_ahead(self) -> bool: ...


@runtime_checkable
class Locatable(Protocol):
    """A dataset that says where its index ``index`` lives, as a dict of JSON values (``index`` among
    them), nesting the answer of the dataset below it when that one is ``Locatable`` too."""

    def locate(self, index: int) -> dict[str, Any]: ...


# -- readers -----------------------------------------------------------------------------------

ReadBytes = Callable[[int, int], bytes]  # (offset, length) -> bytes of one shard


@runtime_checkable
class CountsRowsFromSize(Protocol):
    """A format whose row count follows from the file size (fixed-width token shards)."""

    def rows_from_size(self, shard: str, size: int) -> int | None: ...


@runtime_checkable
class CountsRowsFromMetadata(Protocol):
    """A format whose row count is in a footer or header (Parquet, token shards with a header)."""

    def rows_from_metadata(self, read: ReadBytes, size: int, shard: str) -> int | None: ...


@runtime_checkable
class MeasuresDecodedRows(Protocol):
    """A format that knows a decoded row's size from its metadata (the decode budget's block)."""

    def decoded_row_bytes(self, read: ReadBytes, size: int, shard: str) -> int | None: ...


@runtime_checkable
class TakesIds(Protocol):
    """An opened shard that reads a token column's rows as arrays (Parquet): ``take_ids_ascending`` for
    rows already sorted, in one pass; ``take_id_spans_ascending`` as (values, starts, stops) of its decoded
    groups, no array per row."""

    def take_ids(self, rows: Sequence[int], column: str) -> list[np.ndarray] | None: ...

    def take_ids_ascending(self, rows: np.ndarray, column: str) -> list[np.ndarray] | None: ...

    def take_id_spans_ascending(self, rows: np.ndarray, column: str) -> list[Any] | None: ...


@runtime_checkable
class KeepsDecodedIds(Protocol):
    """An opened shard that keeps its decoded token ids where it is told (Parquet: in the node's cache
    folder, ``_shards/kept_ids``), so a later open maps them instead of decoding again."""

    def keep_ids_in(self, kept: Any) -> None: ...


@runtime_checkable
class JoinsLayout(Protocol):
    """An opened shard that lays its decoded columns out beside its neighbours' in one arena per process
    (Parquet, ``readers/_flat.Layout``), so a batch across files is one gather per column."""

    def _join_layout(self, layout: Any, shard: int) -> None: ...


@runtime_checkable
class OpensRanged(Protocol):
    """A reader that opens a remote shard read by byte range (Parquet: its footer, then the row
    groups it decodes; a ``.bin``: the windows it reads), given a file object and a hook that fetches
    ranges ahead (``_shards/ranged``); ``ranged_for(shard)``: whether this shard can be (not a ``.npy``);
    ``ranged_plan(ranged, shard)``: a function of rows giving the byte ranges their read will need, so
    read-ahead fetches them before the loader asks (Parquet reads the footer for it)."""

    def ranged_for(self, shard: str) -> bool: ...

    def open_ranged(self, ranged: Any, shard: str) -> Any: ...

    def ranged_plan(self, ranged: Any, shard: str) -> Any: ...


@runtime_checkable
class TilesShards(Protocol):
    """An ``OpensRanged`` reader whose rows' byte ranges tile its shards (token windows, nothing else in the
    file): the bytes between two rows a rank reading densely reads are rows it reads next, so read-ahead
    joins gaps up to ``dense_gap()`` bytes (what a GET's round trip costs in transfer), not Parquet's
    64 KiB (whose gaps may be columns no read asks for)."""

    def dense_gap(self) -> int: ...


@runtime_checkable
class LocatesRows(Protocol):
    """An opened shard that says where its row lives (byte offset, row group, member name, ...)."""

    def locate(self, row: int) -> dict[str, Any]: ...
