"""What a dataset may offer the loader beyond ``__getitem__``/``__len__``, declared once.

The loader, the compositions (``Mixture``, ``Packed``) and the tools ask for a capability with
``isinstance(dataset, Capability)``, never by probing attribute names. Each capability is a small
``typing.Protocol``: a dataset offers it by having its members, no base class needed.

**The extension surface** (public: ``shufflepoint.OwnOrder``, ...; ``docs/extending.md`` says what the
loader does with each, with a runnable example). A user's dataset may offer any of:

- ``OwnOrder``: it deals its own seekable order (``Mixture``, ``Packed``, or yours);
- ``Identified``: a fingerprint string that joins the state, so a resume on other data is refused;
- ``Locatable``: where an index lives (``loader.which(step, locate=True)``, ``shufflepoint which``);
- ``ReadsBatches``: a whole batch read in one call;
- ``Prefetching``: told its upcoming indices one chunk ahead of reading them.

**What shufflepoint's own corpora offer besides** is internal, and never a Protocol member named with an
underscore. Public-named members of the dataset itself, asked like the five: ``ShardedCorpus`` (rows grouped
in shards, read in the ``blocks`` order: ``Shards``), ``ReadsColumns`` (``columnar()``), ``PrefetchesDealt``
(``prefetch_dealt``: upcoming indices with how densely this rank reads there). Everything else goes behind
one object, the corpus's hooks (``Hooked``: ``dataset._loader_hooks()``, asked through ``hooks_of``), whose
members are public-named and asked with ``isinstance`` of the protocols below ``Hooked``:

- **order**: ``CountsShare`` (``Packed``'s token counts, by share), ``KeepsShardsOpen``, ``FitsDecodeBudget``
  (``Shards``), ``LaysOnStretches`` (an own order laid along the ``spans`` deal's stretches: ``Mixture``,
  ``Packed``), ``Scheduled`` (a ``Mixture`` built with a schedule, and only such a one);
- **identity**: ``ExplainsFingerprint``, ``LegacyIdentified`` (the fingerprint shufflepoint 0.2 wrote),
  ``ExplainsOrderVersion``;
- **reading**: ``ReadsIds``, ``ReadsIdsAscending``, ``ReadsIdSpansAscending`` (a token column as arrays: what
  ``Packed`` reads a ``Shards`` with), ``ReadsAtDensity``, ``ReadsAhead``.

An own order's two callers ask two names: ``OwnOrder.epoch_order(seed, epoch, shuffle_block)`` (any dataset),
``LaysOnStretches.stretched_order`` and ``Scheduled.scheduled_order`` (the hooks, with the deal's stretches or
the run's grid). None of these is exported (``shufflepoint.__all__``).

What one shard format offers (a reader, an opened shard) is declared beside the readers,
``_shards/readers/base.py``, and asked only inside ``_shards``.

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

# -- the extension surface: public, docs/extending.md --------------------------------------------


@runtime_checkable
class OwnOrder(Protocol):
    """A dataset that deals its own seekable order: ``order=None`` picks it, no other order applies.

    ``order_name`` names the order in the state; ``order_version`` is bumped whenever the same seed
    would give another order (a state of another version is refused). ``epoch_order`` returns the
    epoch's order: any object whose ``take(positions)`` maps an int64 array of epoch positions to dataset
    indices, a pure function of (seed, epoch, positions), so a resume is a seek. Here a document's two
    chunks stay together, the documents shuffled by ``shufflepoint.permutation``:

    >>> import numpy as np, shufflepoint
    >>> class Chunks:
    ...     order_name, order_version = "documents", 1
    ...     def __len__(self):
    ...         return 6  # 3 documents of 2 chunks
    ...     def __getitem__(self, index):
    ...         return index
    ...     def epoch_order(self, seed, epoch, shuffle_block):
    ...         documents = shufflepoint.permutation(3, seed, epoch)
    ...         class Order:
    ...             def take(self, positions):
    ...                 positions = np.asarray(positions, dtype=np.int64)
    ...                 return documents.take(positions // 2) * 2 + positions % 2
    ...         return Order()
    >>> loader = shufflepoint.DataLoader(Chunks(), batch_size=2, seed=1)
    >>> sorted(tuple(batch.tolist()) for batch in loader)
    [(0, 1), (2, 3), (4, 5)]
    >>> loader.state_dict()["order"]
    'documents'
    """

    order_name: str  # the order's name in the state
    order_version: int  # bumped whenever the same seed would give another order

    def epoch_order(self, seed: int, epoch: int, shuffle_block: int) -> Any:
        """The epoch's order: ``take(positions) -> indices`` (an ``_order.Order`` or any such object)."""


@runtime_checkable
class Identified(Protocol):
    """A dataset that names its own content: the string joins the state's ``dataset_fingerprint``, so a
    resume on other content is refused (``StateError``) instead of continuing in the wrong place.

    >>> import shufflepoint
    >>> class Squares:
    ...     fingerprint = "squares:v1"  # change it whenever the samples change
    ...     def __len__(self):
    ...         return 8
    ...     def __getitem__(self, index):
    ...         return index * index
    >>> shufflepoint.DataLoader(Squares(), batch_size=2).state_dict()["dataset_fingerprint"]
    'squares:v1'
    """

    @property
    def fingerprint(self) -> str:
        """A string that changes whenever the samples do (a version, a content hash)."""


@runtime_checkable
class Locatable(Protocol):
    """A dataset that says where its index ``index`` lives, as a dict of JSON values (``index`` among
    them), nesting the answer of the dataset below it when that one is ``Locatable`` too. The loader's
    ``which(step, locate=True)`` and ``shufflepoint which --locate`` answer with it.

    >>> import shufflepoint
    >>> class Lines:
    ...     def __len__(self):
    ...         return 4
    ...     def __getitem__(self, index):
    ...         return f"line {index}"
    ...     def locate(self, index):
    ...         return {"index": index, "file": "a.txt", "line": index + 1}
    >>> loader = shufflepoint.DataLoader(Lines(), batch_size=2, shuffle=False)
    >>> loader.which(1, locate=True)
    {0: [{'index': 2, 'file': 'a.txt', 'line': 3}, {'index': 3, 'file': 'a.txt', 'line': 4}]}
    """

    def locate(self, index: int) -> dict[str, Any]:
        """Where sample ``index`` lives, as JSON values, ``"index": index`` among them."""


@runtime_checkable
class ReadsBatches(Protocol):
    """A dataset that reads a whole batch of indices at once: ``read_batch(indices)`` returns a sequence whose
    item i is ``dataset[indices[i]]``. ``shufflepoint.DataLoader`` reads each batch with one call (in the
    process that reads it: a worker), a ``Mixture`` each source's part of a batch.

    >>> import shufflepoint
    >>> class Squares:
    ...     calls = 0
    ...     def __len__(self):
    ...         return 6
    ...     def __getitem__(self, index):
    ...         return index * index
    ...     def read_batch(self, indices):
    ...         Squares.calls += 1
    ...         return [int(i) * int(i) for i in indices]
    >>> [batch.tolist() for batch in shufflepoint.DataLoader(Squares(), batch_size=3, shuffle=False)]
    [[0, 1, 4], [9, 16, 25]]
    >>> Squares.calls
    2
    """

    def read_batch(self, indices: Sequence[int] | np.ndarray) -> Any:
        """The samples of ``indices``, in their order: item i is ``dataset[indices[i]]``."""


@runtime_checkable
class DecodesInBatches(Protocol):
    """A ``ReadsBatches`` dataset whose batch read ends with work per sample (its own ``transform``, a decode)
    that may run in threads: ``read_mapped(indices, map_samples)`` is ``read_batch(indices)`` with that work
    mapped by ``map_samples`` (``map``'s contract, in order: item i is still ``dataset[indices[i]]``);
    ``decodes_samples()`` says whether there is such work. ``DataLoader(decode_threads=k)`` hands it a
    worker's k threads (``Shards(..., transform=)``)."""

    def decodes_samples(self) -> bool: ...

    def read_mapped(self, indices: Sequence[int] | np.ndarray, map_samples: Any) -> Any: ...


@runtime_checkable
class Prefetching(Protocol):
    """A dataset told its upcoming indices ahead: the loader calls ``prefetch(indices)`` with each chunk of
    this rank's indices one chunk before its batches are read (the first chunk just before), in the process
    that runs the loader's loop, so it can start downloads that its reads (in the workers) find done.

    >>> import shufflepoint
    >>> class Remote:
    ...     told = []
    ...     def __len__(self):
    ...         return 6
    ...     def __getitem__(self, index):
    ...         return index
    ...     def prefetch(self, indices):
    ...         Remote.told.extend(int(i) for i in indices)
    >>> served = [int(i) for batch in shufflepoint.DataLoader(Remote(), batch_size=2, seed=1) for i in batch]
    >>> Remote.told == served
    True
    """

    def prefetch(self, indices: Sequence[int] | np.ndarray) -> None:
        """Start fetching what ``indices`` (this rank's next, in reading order) will read; return at once."""


# -- shufflepoint's own corpora: public-named members of the dataset, internal ------------------


@runtime_checkable
class ShardedCorpus(Protocol):
    """Rows grouped in shards (``Shards``): read in the ``blocks`` order, a shuffled run of shards at a time."""

    @property
    def shard_rows(self) -> np.ndarray:
        """Rows of each shard, in shard order (int64)."""


@runtime_checkable
class ReadsColumns(Protocol):
    """A dataset that hands torch's machinery its batches as read (``columnar()``), for ``collate``."""

    def columnar(self) -> Any: ...


@runtime_checkable
class PrefetchesDealt(Protocol):
    """A ``Prefetching`` dataset also told how densely this rank reads the order where the indices lie:
    ``density``, its positions over the span of positions they cover (1.0 under ``spans``: it reads the
    rest of those blocks next; ~1/k when k ranks split every global batch; 1/world under ``strided``).
    A shard read by byte range is then fetched in wide spans (dense) or row by row (sparse: the rows in
    between are other ranks'), see ``_shards/storage/ranged_ahead``."""

    def prefetch_dealt(self, indices: Sequence[int] | np.ndarray, density: float) -> None: ...


# -- shufflepoint's own corpora: the hooks, one object --------------------------------------------


@runtime_checkable
class Hooked(Protocol):
    """One of shufflepoint's own corpora (``Shards``, ``Packed``, ``Mixture``): what it offers the loader and
    the other corpora beyond its public surface, as one object whose members the protocols below declare.
    The one underscore name a capability declares: the entry to them, never a hook itself."""

    def _loader_hooks(self) -> object: ...


def hooks_of(dataset: object) -> object | None:
    """The hooks of one of shufflepoint's own corpora (or of a wrapper that hands on its attributes,
    ``Columnar``), else None: a user's dataset offers the public capabilities only."""
    return dataset._loader_hooks() if isinstance(dataset, Hooked) else None


@runtime_checkable
class CountsShare(Protocol):
    """A dataset that takes part of its setup by share (``Packed``: the token counts of the shards this
    process reads, exchanged with the other processes): the loader says its seed, rank and world size first."""

    def count_share(self, seed: int, rank: int, world_size: int) -> None: ...


@runtime_checkable
class KeepsShardsOpen(Protocol):
    """A corpus that can keep the shards of one block open while the block is read."""

    def keep_open_for(self, shuffle_block: int) -> None: ...


@runtime_checkable
class FitsDecodeBudget(Protocol):
    """A corpus that sizes the default ``shuffle_block`` to the process's decode budget."""

    def fitting_shuffle_block(self) -> int: ...


@runtime_checkable
class LaysOnStretches(Protocol):
    """A dataset whose own order is laid along the ``spans`` deal's stretches under that deal, each rank reading
    its own share of every source (``Mixture``, ``Packed``); the order has its own version there."""

    @property
    def stretched_version(self) -> int:
        """The version of the order laid along the stretches (a state records it under ``spans``)."""

    def stretched_order(self, seed: int, epoch: int, shuffle_block: int, stretches: int,
                        grid: int | None = None) -> Any:
        """The order of one epoch laid along ``stretches`` (the ``spans`` deal's first world size); ``grid``: the
        global batch a schedule follows, where the dataset has one."""


@runtime_checkable
class Scheduled(Protocol):
    """A dataset whose order follows a schedule (``shufflepoint.Mixture(..., schedule=...)``; a ``Mixture``
    built without one offers it too, its counts read as one phase: ``FixedOrder``)."""

    @property
    def required_deal(self) -> str | None:
        """The only deal the dataset can be read under, or None for any."""

    @property
    def phases(self) -> tuple[tuple[int, str], ...]:
        """The schedule's phases as ``(start, hash)`` pairs (the state's ``phases``)."""

    def check_global_batch(self, global_batch: int, grid: int) -> None:
        """Warn when global batches of ``global_batch`` rows are not whole windows of the run's ``grid``
        (the global batch the schedule follows)."""

    def phase_changed(self, saved: list[list[Any]], epoch: int, cursor: int, grid: int | None,
                      shuffle_block: int, laid: bool = False) -> int | None:
        """The first of a state's ``saved`` phases the schedule changed before the position (epoch, cursor)
        had reached (``laid``: read in its order laid along the ``spans`` stretches, which fixes a whole epoch),
        or None where it only appended phases after it."""

    def scheduled_order(self, seed: int, epoch: int, shuffle_block: int, grid: int) -> Any:
        """The order of one epoch, its phases on the edges of global batches of ``grid`` rows."""


@runtime_checkable
class LiveWeighted(Protocol):
    """A scheduled dataset whose weights may change while the run trains (``Mixture.set_weights``): a phase
    appended at a run position, kept in the state with its weights (``[start, hash, shares]``)."""

    def set_weights(self, weights: Any, at: int) -> None:
        """Read by ``weights`` from run position ``at`` (in the loader's positions) on; refused with nothing
        changed."""

    @property
    def has_live(self) -> bool:
        """Whether the schedule holds live phases now."""

    def adopt_phases(self, saved: Sequence[Sequence[Any]]) -> Callable[[], None]:
        """Read by a state's live phases in place of the schedule's own; returns what undoes it."""

    def laid_order(self, seed: int, epoch: int, shuffle_block: int, stretches: int, grid: int | None,
                   epoch_parts: Callable[[int], int | None]) -> Any:
        """``LaysOnStretches.stretched_order``, told each earlier epoch's first world (``epoch_parts``: the run's
        history), where a lay of that epoch maps this one's slots (a weight changed inside it)."""


@runtime_checkable
class FixedOrder(Protocol):
    """A scheduled dataset built with fixed weights (a ``Mixture`` without ``schedule=``): a loader reads it on its
    grid, as the schedule of its counts; a sampler, and a state written before 0.6, read its fixed order, whose
    versions and epochs these are (``mixture/fixed.py``)."""

    @property
    def fixed_versions(self) -> tuple[int, int]:
        """The fixed order's versions: (not laid, laid along the ``spans`` stretches)."""

    def fixed_order(self, seed: int, epoch: int, shuffle_block: int, stretches: int | None) -> Any:
        """The fixed order of one epoch, laid along ``stretches`` where given; refused where weights changed."""


@runtime_checkable
class EarlierLaidVersion(Protocol):
    """A dataset whose order laid along the stretches keeps an earlier version beside its own (``LaysOnStretches``):
    a state written in it reads on in it, and a loader whose reads need it asks for it by passing ``version=`` to
    ``stretched_order`` (and ``laid_order``), with ``lot=`` for parts of whole lots. A ``Mixture``'s 6 numbers
    every window's slots part after part, which the torchft loader's whole lots read as a prefix
    (``mixture/pass_edges.py``)."""

    @property
    def earlier_laid_version(self) -> int:
        """The earlier version of the order laid along the stretches."""


@runtime_checkable
class ExplainsFingerprint(Protocol):
    """A dataset that says what changed when a state's fingerprint is not its own (``Shards``: the shards)."""

    def explain_fingerprint(self, saved: str) -> str: ...


@runtime_checkable
class LegacyIdentified(Protocol):
    """A dataset with the fingerprint shufflepoint 0.2 wrote for it (a state of 0.2 still loads)."""

    @property
    def legacy_fingerprint(self) -> str: ...


@runtime_checkable
class ExplainsOrderVersion(Protocol):
    """A dataset that says why a state's order version is not its own (which release wrote it)."""

    def explain_order_version(self, found: int) -> str | None: ...


@runtime_checkable
class ReadsIds(Protocol):
    """A corpus that reads a token column as one array per index, no Python int per token."""

    def read_ids(self, indices: Sequence[int] | np.ndarray, column: str) -> list[np.ndarray] | None: ...


@runtime_checkable
class ReadsIdsAscending(Protocol):
    """A corpus that reads a token column for ascending indices in one pass (``Packed``'s token windows)."""

    def read_ids_ascending(self, indices: Sequence[int] | np.ndarray, column: str) -> list[np.ndarray] | None: ...


@runtime_checkable
class ReadsIdSpansAscending(Protocol):
    """A ``ReadsIdsAscending`` corpus that also gives the ids as spans of a few flat arrays, no array per
    index (``Shards``: a decoded group's values): a window of thousands of documents in a few numpy calls."""

    def read_id_spans_ascending(self, indices: Sequence[int] | np.ndarray, column: str) -> Any: ...


@runtime_checkable
class ReadsAtDensity(Protocol):
    """A dataset told, before each pass's DataLoader workers start, how densely this rank reads the order
    (``PrefetchesDealt``'s density, of its first positions): ``Shards`` then fetches the ranges a read needs
    joined across the gaps between them where a rank reads densely (a stretch of its own: it reads them
    next), and only its own rows where it reads sparsely (a global batch split among ranks after a resize,
    ``strided``: the rows between are other ranks'); in every DataLoader worker (``_shards/storage/ranged``)."""

    def read_at_density(self, density: float) -> None: ...


@runtime_checkable
class ReadsAhead(Protocol):
    """A ``Prefetching`` dataset that says whether it has anything to fetch ahead (False: local files)."""

    @property
    def reads_ahead(self) -> bool: ...
