"""Bad samples skipped: the replacement arithmetic, the run's record of skips, and the limit that ends a run.

A sample that fails to read or decode (``ShardError``, ``SampleError``, any exception of the dataset's
``__getitem__``, of a corpus's ``transform`` or of the loader's ``transform`` but a programming error:
``is_bad_sample``) ends the run by default. With ``DataLoader(..., skip_bad_samples=True)`` the worker
that read it serves a *replacement* in its slot instead, so that the batch stays full, and the loader
excludes the failed index from the next batch on, agreed on every rank (``_loading/skipping.py``).
A loader that cannot exclude (a ``Mixture``, ``Packed``, ``buckets=``: orders without an inverse) *only replaces*:
the failed index stays in the order, and each time it comes up (every epoch) it fails again and meets the same
replacement, agreed and recorded again. There the replacement comes from the failed sample's *group*, so that a
batch stays one bucket and a mixture keeps its shares: its bucket, or its mixture source (``replacement``'s
``own``).

What fills the slot is arithmetic, never the order workers happened to fail in: the replacement of dataset
index ``i`` is ``replacement(seed, i, attempt, n)``, the first of ``attempt = 0, 1, ...`` that is neither ``i``
nor excluded and reads. It depends on nothing but the seed, the index and the dataset's length, so any worker,
rank, ``num_workers`` or resume fills the slot with the same sample. Worked (pinned by
``tests/loading/test_skip_bad_samples.py``)::

    >>> [replacement(0, 7, attempt, 100) for attempt in range(3)]
    [93, 81, 67]

A replacement is a sample served twice in that epoch (in its own slot and in the failed one): a skip costs
one duplicate, never a short batch.

The record (``skipped`` in the state, written only once a sample was skipped) keeps the latest
``KEPT`` skips, each ``[step, index, replacement, shard, row, error]``: the step whose batch held the
replacement, the failed dataset index, the index served in its place, the shard's name or URL and the row in
it (``None`` for a dataset that is not a corpus of shards), and the error's text (at most ``ERROR_CHARS``).
Every skipped index is also in the state's ``excluded`` set, which keeps all of them.

Words: docs/glossary.md (skip, replacement, exclusion, bad sample, replace only).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from shufflepoint._errors import DAMAGED, Plain, field_error, refusal

KEPT = 64  # skips kept in the state's record (the excluded set keeps every skipped index)
ERROR_CHARS = 240  # of an error's text kept per skip
_MASK = 2**64 - 1


def _mix(value: int) -> int:
    """splitmix64's finaliser: a bijection of 64-bit ints whose bits depend on every input bit."""
    value = (value + 0x9E3779B97F4A7C15) & _MASK
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & _MASK
    return value ^ (value >> 31)


def replacement(seed: int, index: int, attempt: int, n: int, own: int | None = None) -> int:
    """The dataset index that fills failed ``index``'s slot at ``attempt`` (0, 1, ...): a keyed hash into
    ``[0, n)``, never ``index`` itself. The caller skips an excluded one, or one that fails too, with the next
    attempt. ``n >= 2``.

    ``own``: the failed sample's place in a *group* of ``n`` (a bucket, a mixture's source) that the replacement
    must come from: the draw, still keyed by ``index``, is then a place in the group other than ``own``."""
    own = index if own is None else own
    drawn = _mix(_mix(_mix(seed & _MASK) ^ index) ^ (attempt + 1)) % (n - 1)
    return drawn if drawn < own else drawn + 1  # [0, n) without own


# A programming error, not a bad sample: the code that reads or decodes is wrong, so every sample would fail
# alike. Raised at once, as without skip_bad_samples. (RecursionError is a RuntimeError; the rest of RuntimeError,
# which decoders such as torchvision's raise for corrupt bytes, is a bad sample. SyntaxError is one too: PIL raises
# it for a broken PNG chunk, and a real one is raised at import, not per sample.)
PROGRAMMING_ERRORS: tuple[type[BaseException], ...] = (
    TypeError, AttributeError, NameError, ImportError, AssertionError, NotImplementedError, RecursionError,
    MemoryError,
)


def is_bad_sample(error: BaseException) -> bool:
    """Whether ``error``, raised reading or decoding one sample, makes it a bad sample that ``skip_bad_samples``
    replaces: any ``Exception`` (``ShardError``, ``SampleError``, ``OSError`` such as PIL's
    ``UnidentifiedImageError``, ``ValueError`` and ``UnicodeDecodeError``, ``KeyError`` for a missing field,
    ``EOFError``, a decoder's ``RuntimeError``, ...) but a programming error (``PROGRAMMING_ERRORS``: ``TypeError``,
    ``AttributeError``, ``NameError``, ...), which ends the run at once. A bug that raises one of the others fails
    every sample alike, and ``max_in_a_row`` failed reads for one slot end the run naming them.

    >>> is_bad_sample(OSError("cannot identify image file")), is_bad_sample(KeyError("jpg"))
    (True, True)
    >>> is_bad_sample(AttributeError("'NoneType' has no attribute 'convert'")), is_bad_sample(KeyboardInterrupt())
    (False, False)
    """
    return isinstance(error, Exception) and not isinstance(error, PROGRAMMING_ERRORS)


@dataclass(frozen=True)
class SkipBadSamples:
    """The limits of ``DataLoader(skip_bad_samples=...)``: ``True`` takes these defaults, a dict sets some of them.

    The failed sample's slot is filled by a replacement that arithmetic chooses (``replacement``), the
    sample is excluded from the next batch on on every rank, and the skip is kept in the state's record
    (``shufflepoint inspect`` shows it). The run still stops, with one error naming every shard and row, when

    - ``max_in_a_row`` reads in a row fail for one slot (the failed sample and the replacements tried after
      it: storage that is down, not one bad record), or
    - more than ``max_skips`` samples were skipped, all ranks together, in the last ``window`` steps.

    Example::

        loader = shufflepoint.DataLoader(corpus, batch_size=32, skip_bad_samples={"max_skips": 8, "window": 1000})
    """

    max_in_a_row: int = 4
    max_skips: int = 16
    window: int = 1000

    def __post_init__(self) -> None:
        for name, low, high in (("max_in_a_row", 1, 64), ("max_skips", 0, KEPT - 1), ("window", 1, 2**62)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise ValueError(refusal(f"skip_bad_samples[{name!r}]", value, f"an int in [{low}, {high}]",
                                         f"pass {name}={getattr(type(self), name)} (the default) or another int in "
                                         "that range", why="the state's record keeps the latest "
                                         f"{KEPT} skips, so the window's count must fit in it"
                                         if name == "max_skips" else None))


@dataclass(frozen=True)
class Skip:
    """One skipped sample, as the state's record keeps it."""

    step: int
    index: int
    replacement: int
    shard: str | None
    row: int | None
    error: str

    def to_state(self) -> list[Any]:
        return [self.step, self.index, self.replacement, self.shard, self.row, self.error]

    def where(self) -> str:
        """``shard s3://b/x.parquet row 17 (index 4211)``, or ``dataset index 4211``."""
        if self.shard is None:
            return f"dataset index {self.index}"
        return f"shard {self.shard} row {self.row} (index {self.index})"


def slot_replacements(record: Sequence[Skip], step: int) -> dict[int, int]:
    """The failed index -> the replacement served in its slot, for the slots of ``step``. A slot whose
    replacements failed too is kept as a run of skips with one replacement, the slot's own index first
    (``[a -> c, b -> c]``: ``b`` was tried for ``a``'s slot): only the first of a run names a slot.

    >>> slot_replacements([Skip(3, 5, 9, None, None, "e"), Skip(3, 7, 9, None, None, "e")], 3)
    {5: 9}
    """
    found: dict[int, int] = {}
    previous: Skip | None = None
    for skip in record:
        if skip.step == step and (previous is None or previous.step != step
                                  or previous.replacement != skip.replacement):
            found.setdefault(skip.index, skip.replacement)
        previous = skip
    return found


def kept(record: Sequence[Skip], new: Sequence[Skip]) -> tuple[Skip, ...]:
    """The record with ``new`` appended, the latest ``KEPT`` kept."""
    return tuple([*record, *new][-KEPT:])


# Orders whose dataset indices carry a pass or an epoch above the dataset's length (``Packed``: epoch * rows + row;
# a ``Mixture``: pass * rows + offset + row): their skipped indices are bounded by int64, not by ``n``.
UNBOUNDED_INDICES = ("packed", "mixture")


def check_record(value: object, n: int) -> tuple[Skip, ...]:
    """The state's ``skipped`` field, checked (indices in ``[0, n)``; ``n`` 2**63 for an order in
    ``UNBOUNDED_INDICES``): ``StateError`` naming the element otherwise."""
    if not isinstance(value, list) or len(value) > KEPT:
        raise field_error("skipped", value, f"a list of at most {KEPT} skips", DAMAGED)
    record: list[Skip] = []
    for k, entry in enumerate(value):
        ok = (isinstance(entry, list) and len(entry) == 6
              and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in entry[:3])
              and entry[1] < n and entry[2] < n
              and (entry[3] is None or isinstance(entry[3], str))
              and (entry[4] is None or (isinstance(entry[4], int) and not isinstance(entry[4], bool) and entry[4] >= 0))
              and isinstance(entry[5], str) and len(entry[5]) <= ERROR_CHARS)
        if not ok or (record and entry[0] < record[-1].step):
            raise field_error(f"skipped[{k}]", entry, f"[step, index, replacement, shard or null, row or null, "
                              f"error] with indices in [0, {n}), steps ascending", DAMAGED)
        record.append(Skip(*entry))
    return tuple(record)


def over_limit(record: Sequence[Skip], step: int, policy: SkipBadSamples) -> str | None:
    """The run's stop, when more than ``policy.max_skips`` skips lie in the ``policy.window`` steps up to
    ``step``: the error's text, naming each skip; None while within the limit."""
    recent = [skip for skip in record if skip.step > step - policy.window]
    if len(recent) <= policy.max_skips:
        return None
    return refusal("skip_bad_samples", Plain(f"{len(recent)} samples skipped in the last {policy.window} steps "
                                             f"(up to step {step})"),
                   f"at most max_skips={policy.max_skips} in a window of {policy.window} steps",
                   "replace the shards named (or fix the transform), then resume from a checkpoint; or raise "
                   "max_skips if this many bad samples is expected",
                   why="; ".join(f"step {skip.step}: {skip.where()}: {skip.error}" for skip in recent))


def in_a_row_error(failures: Sequence[tuple[int, str | None, int | None, str]], policy: SkipBadSamples) -> str:
    """The run's stop when ``policy.max_in_a_row`` reads in a row failed for one slot (``failures``: each
    ``(index, shard, row, error)`` tried)."""
    named = "; ".join(Skip(0, index, index, shard, row, error).where() + f": {error}"
                      for index, shard, row, error in failures)
    return refusal("skip_bad_samples", Plain(f"{len(failures)} reads in a row failed for one slot"),
                   f"fewer than max_in_a_row={policy.max_in_a_row}",
                   "check that the storage answers and the shards named are readable, then resume from a checkpoint",
                   why=named)
