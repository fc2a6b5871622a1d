"""The judge: pure functions from recorded streams to a verdict. No processes, no torch.

Words: docs/glossary.md (verdict, global batch, tail, world size, elastic).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from shufflepoint._tools.audit.config import SavePoint
from shufflepoint._tools.audit.verdicts import (
    DIVERGED,
    DROPPED,
    DUPLICATED,
    ERROR,
    EXACT,
    EXACTLY_ONCE,
    ORDER_LOST,
    SAME_GLOBAL_BATCHES,
    Batch,
    Pass,
    SampleId,
    worst,
)


@dataclass
class Difference:
    """The first batch where the resumed stream leaves the uninterrupted one, on one rank."""

    rank: int
    epoch: int
    batch: int  # index within the epoch
    expected: Batch | None  # None: the uninterrupted stream had no such batch
    got: Batch | None  # None: the resumed stream had no such batch


@dataclass
class RankResult:
    rank: int
    verdict: str
    batches_expected: int
    batches_resumed: int
    detail: str
    first_difference: Difference | None = None


@dataclass
class EpochResult:
    """One epoch's samples over the union of ranks: what was served before and after the resume."""

    epoch: int
    dataset_length: int
    before_save: int  # samples served before the save point (old ranks)
    after_resume: int  # samples served after the resume (new ranks)
    distinct: int
    duplicates: int  # occurrences beyond the first
    missing: int  # of dataset_length, never served
    allowed_padding: int
    allowed_dropped: int
    padding_outside_tail: int  # duplicates not in a rank's last batch of the epoch
    verdict: str
    detail: str


@dataclass
class Judgement:
    verdict: str
    summary: str
    elastic: bool
    ranks: list[RankResult] = field(default_factory=list)
    epochs: list[EpochResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    content: dict[str, Any] | None = None  # the content check (``content.ContentResult.as_dict``), once run


def _lengths(passes: Sequence[Sequence[Sequence[SampleId]]]) -> list[list[int]]:
    return [[len(batch) for batch in one] for one in passes]


def _flat(batches: Sequence[Sequence[SampleId]]) -> list[SampleId]:
    return [sample for batch in batches for sample in batch]


def _epoch_start(save: SavePoint, epoch: int) -> int:
    return save.step if epoch == save.epoch else 0


def _first_difference(rank: int, save: SavePoint, expected: list[Pass], got: list[Pass]) -> Difference | None:
    for offset in range(max(len(expected), len(got))):
        epoch = save.epoch + offset
        want = expected[offset] if offset < len(expected) else []
        have = got[offset] if offset < len(got) else []
        for index in range(max(len(want), len(have))):
            a = want[index] if index < len(want) else None
            b = have[index] if index < len(have) else None
            if a != b:
                return Difference(rank, epoch, _epoch_start(save, epoch) + index, a, b)
    return None


def _replayed_epoch(reference: list[Pass], epoch: int, start: int, got: Pass) -> int | None:
    """The other epoch whose order, read from the same position, is what the resume served."""
    for other in range(len(reference)):
        if other != epoch and reference[other][start:] == got:
            return other
    for other in range(len(reference)):  # partly the same: the first batches match
        rest = reference[other][start:]
        if other != epoch and got and rest and rest[: min(2, len(got))] == got[: min(2, len(rest))]:
            return other
    return None


def judge_rank(rank: int, reference: list[Pass], resumed: list[Pass], save: SavePoint) -> RankResult:
    """Same world size: this rank's resumed passes against its uninterrupted epochs."""
    expected = [reference[save.epoch][save.step:]] + [list(e) for e in reference[save.epoch + 1:]]
    n_expected, n_got = sum(map(len, expected)), sum(map(len, resumed))
    difference = _first_difference(rank, save, expected, resumed)
    if difference is None:
        return RankResult(rank, EXACT, n_expected, n_got, "every batch equal to the uninterrupted run")
    offset = difference.epoch - save.epoch
    start = _epoch_start(save, difference.epoch)
    want = expected[offset] if offset < len(expected) else []
    have = resumed[offset] if offset < len(resumed) else []
    where = f"epoch {difference.epoch}"
    if _lengths([want]) == _lengths([have]):
        replayed = _replayed_epoch(reference, difference.epoch, start, have)
        if replayed is not None and replayed < difference.epoch:
            detail = (f"{where}: position right, order wrong: it replays epoch {replayed}'s order "
                      f"from batch {start}")
            return RankResult(rank, ORDER_LOST, n_expected, n_got, detail, difference)
        if offset == 0:
            same = Counter(_flat(want)) == Counter(_flat(have))
            detail = f"{where}: position right, order wrong" + (
                " (the same samples, shuffled differently)" if same else " (other samples than the uninterrupted run)")
            return RankResult(rank, ORDER_LOST, n_expected, n_got, detail, difference)
        return RankResult(rank, DIVERGED, n_expected, n_got,
                          f"the resumed epoch was exact; {where} differs from the uninterrupted run", difference)
    served, wanted = len(_flat(have)), len(_flat(want))
    if served > wanted:
        detail = f"{where}: {served} samples served after the resume, {wanted} expected"
        restart = next((j for j in range(start) if reference[difference.epoch][j:] == have), None)
        if restart is not None:
            detail += f" (it restarted at batch {restart} instead of {start}: {start - restart} batches twice)"
        return RankResult(rank, DUPLICATED, n_expected, n_got, detail, difference)
    if served < wanted:
        detail = f"{where}: {served} samples served after the resume, {wanted} expected"
        if not have:
            detail += " (the epoch was skipped)"
        return RankResult(rank, DROPPED, n_expected, n_got, detail, difference)
    return RankResult(rank, DIVERGED, n_expected, n_got,
                      f"{where}: the same number of samples in differently sized batches", difference)


def tail_allowance(remaining: int, world_size: int, batch_size: int, drop_last: bool) -> tuple[int, int]:
    """(padding, dropped) a loader may add or leave out when dealing ``remaining`` samples.

    A global batch takes world_size * batch_size samples. The last, partial one is either
    dropped (drop_last: at most its size is never served) or completed by repeating samples
    (DistributedSampler pads to a multiple of the world size, Accelerate's even_batches to whole
    batches; both are at most the gap to the next full step).

    >>> tail_allowance(43, world_size=3, batch_size=4, drop_last=False)   # 43 = 3*12 + 7: pad <= 5
    (5, 0)
    >>> tail_allowance(43, world_size=3, batch_size=4, drop_last=True)
    (0, 7)
    """
    step = max(1, world_size * batch_size)
    if drop_last:
        return 0, remaining % step
    return (-remaining) % step, 0


def judge_epoch(
    epoch: int,
    before: Sequence[Sequence[Sequence[SampleId]]],
    after: Sequence[Sequence[Sequence[SampleId]]],
    *,
    dataset_length: int,
    world_size: int,
    batch_size: int,
    drop_last: bool,
) -> EpochResult:
    """One epoch over the union of ranks: ``before`` (old ranks' batches before the save) plus
    ``after`` (new ranks' batches after the resume) must be each sample once, up to the tail.

    Duplicates are allowed only as padding: at most what the sizes allow, and only in a rank's
    last batch of the epoch.
    """
    earlier = _flat([b for rank in before for b in rank])
    later = _flat([b for rank in after for b in rank])
    everything = earlier + later
    counts = Counter(everything)
    distinct = len(counts)
    duplicates = len(everything) - distinct
    body = earlier + _flat([b for rank in after for b in rank[:-1]])
    padding_outside_tail = len(body) - len(set(body))
    missing = max(0, dataset_length - distinct)
    allowed_padding, allowed_dropped = tail_allowance(dataset_length - len(set(earlier)), world_size,
                                                      batch_size, drop_last)
    if padding_outside_tail or duplicates > allowed_padding:
        verdict = DUPLICATED
        detail = f"{duplicates} samples served twice" + (f" and {missing} never" if missing else "")
        if not padding_outside_tail:  # only the tail repeats, but more than padding can explain
            detail += f" (tail padding explains at most {allowed_padding})"
    elif missing > allowed_dropped:
        verdict = DROPPED
        detail = f"{missing} samples never served (the tail allows {allowed_dropped} dropped)"
    else:
        verdict = EXACTLY_ONCE
        detail = "every sample once"
        if duplicates:
            detail += f", plus {duplicates} of tail padding"
        if missing:
            detail += f", {missing} dropped at the tail"
    return EpochResult(epoch, dataset_length, len(earlier), len(later), distinct, duplicates, missing,
                       allowed_padding, allowed_dropped, padding_outside_tail, verdict, detail)


def _infer_drop_last(reference: list[list[Pass]], epoch: int, dataset_length: int, reported: bool | None) -> bool:
    served = sum(len(b) for rank in reference for b in rank[epoch])
    if served < dataset_length:
        return True
    if served > dataset_length:
        return False
    return bool(reported)


def judge(
    reference: list[list[Pass]],
    resumed: list[list[Pass]],
    save: SavePoint,
    *,
    dataset_length: int | None = None,
    drop_last: bool | None = None,
    resume_batch_size: int | None = None,
) -> Judgement:
    """The verdict for one audit.

    ``reference[r][e]``: old rank r's batches of epoch e, uninterrupted (each batch a list of ids).
    ``resumed[r][p]``: new rank r's batches of pass p after the resume; pass 0 is the rest of
    epoch ``save.epoch``, pass p is epoch ``save.epoch + p``. Same number of ranks: judged rank by
    rank (EXACT or the first difference). Another number: judged epoch by epoch over the union of
    ranks (EXACTLY_ONCE or what went wrong). ``dataset_length``, ``drop_last`` and the resumed
    loader's per-rank ``resume_batch_size`` size the allowed tail; unknown, they are read off the
    streams.
    """
    if not reference or not resumed:
        return Judgement(ERROR, "no streams were recorded", False)
    epochs = len(reference[0])
    if any(len(r) != epochs for r in reference) or not 0 <= save.epoch < epochs:
        return Judgement(ERROR, "the uninterrupted streams do not cover the save point", False)
    elastic = len(reference) != len(resumed)
    result = Judgement(EXACT, "", elastic)
    for epoch in range(save.epoch, epochs):
        ids = {s for rank in reference for b in rank[epoch] for s in b}
        n = dataset_length if dataset_length is not None else len(ids)
        offset = epoch - save.epoch
        before = [rank[epoch][: save.step] for rank in reference] if offset == 0 else []
        after = [rank[offset] if offset < len(rank) else [] for rank in resumed]
        batch_size = resume_batch_size or max((len(b) for rank in resumed for p in rank for b in p), default=0) or max(
            (len(b) for rank in reference for b in rank[epoch]), default=1)
        result.epochs.append(judge_epoch(
            epoch, before, after, dataset_length=n, world_size=len(resumed), batch_size=batch_size,
            drop_last=_infer_drop_last(reference, epoch, n, drop_last)))
    if not elastic:
        return _judge_same_world(result, reference, resumed, save)
    return _judge_elastic(result, reference, resumed, save, resume_batch_size)


def _judge_same_world(result: Judgement, reference: list[list[Pass]], resumed: list[list[Pass]],
                      save: SavePoint) -> Judgement:
    """Same number of ranks: rank by rank, EXACT or the first difference; the epoch checks as notes."""
    result.ranks = [judge_rank(r, reference[r], resumed[r], save) for r in range(len(reference))]
    result.verdict = worst([r.verdict for r in result.ranks])
    exact = sum(r.verdict == EXACT for r in result.ranks)
    if result.verdict == EXACT:
        result.summary = (f"every rank's resumed stream equals the uninterrupted one "
                          f"({sum(r.batches_expected for r in result.ranks)} batches compared)")
    else:
        first = next(r for r in result.ranks if r.verdict == result.verdict)
        result.summary = f"rank {first.rank}: {first.detail}" + (
            f"; {exact} of {len(result.ranks)} ranks exact" if len(result.ranks) > 1 else "")
        broken = [e for e in result.epochs if e.verdict != EXACTLY_ONCE]
        if broken:
            result.notes.append("over all ranks: " + "; ".join(f"epoch {e.epoch}: {e.detail}" for e in broken))
    return result


def _judge_elastic(result: Judgement, reference: list[list[Pass]], resumed: list[list[Pass]],
                   save: SavePoint, batch_size: int | None) -> Judgement:
    """Another number of ranks: epoch by epoch over the union of ranks."""
    epochs = len(reference[0])
    for rank, passes in enumerate(resumed):
        served = sum(len(b) for p in passes for b in p)
        result.ranks.append(RankResult(rank, "-", 0, sum(map(len, passes)), f"{served} samples in "
                                       f"{sum(map(len, passes))} batches over {len(passes)} passes"))
    if any(len(p) != epochs - save.epoch for p in resumed):
        result.verdict = DIVERGED
        result.summary = (f"the resumed ranks ran {sorted({len(p) for p in resumed})} passes, "
                          f"expected {epochs - save.epoch}")
        return result
    result.verdict = worst([e.verdict for e in result.epochs])
    kept = global_batches_kept(reference, resumed, save, batch_size) if result.verdict == EXACTLY_ONCE else None
    if kept is not None and kept[0] == kept[1]:
        result.verdict = SAME_GLOBAL_BATCHES
        result.summary = (f"world size {len(reference)} -> {len(resumed)} at a fixed global batch: each of the "
                          f"{kept[1]} global batches from epoch {save.epoch} on holds the uninterrupted run's samples")
    elif result.verdict == EXACTLY_ONCE:
        result.summary = (f"world size {len(reference)} -> {len(resumed)}: every epoch from {save.epoch} on "
                          f"serves each sample once over all ranks (a different cut of the same data)")
        if kept is not None:
            result.notes.append(f"the global batch is the same before and after, but only {kept[0]} of the "
                                f"{kept[1]} global batches after the resume hold the uninterrupted run's samples "
                                f"(first difference: {kept[2]})")
    else:
        first = next(e for e in result.epochs if e.verdict == result.verdict)
        result.summary = f"world size {len(reference)} -> {len(resumed)}, epoch {first.epoch}: {first.detail}"
    return result


def _global_batch(passes: Sequence[Sequence[Pass]], batch_size: int | None = None) -> int:
    """Ranks x batch size (the largest batch seen when not given): the global batch of one world."""
    largest = max((len(b) for rank in passes for one in rank for b in one), default=0)
    return len(passes) * (batch_size or largest)


def _new_per_step(passes: Sequence[Sequence[Batch]], seen: set[SampleId]) -> list[frozenset[SampleId]]:
    """Each step's samples over all ranks, less those served earlier in the epoch (tail padding)."""
    found = []
    for k in range(max((len(p) for p in passes), default=0)):
        step = {s for p in passes if k < len(p) for s in p[k]} - seen
        seen |= step
        found.append(frozenset(step))
    return found


def global_batches_kept(reference: list[list[Pass]], resumed: list[list[Pass]], save: SavePoint,
                        resume_batch_size: int | None = None) -> tuple[int, int, str] | None:
    """(global batches after the resume that hold the uninterrupted run's samples, of how many, where the
    first other one is) when world size x batch size is the same before and after; else None.

    Compared as sets of the samples each step serves first in its epoch, so tail padding (a repeat)
    does not count.
    """
    epochs = len(reference[0])
    if _global_batch(reference) != _global_batch(resumed, resume_batch_size) or not _global_batch(reference):
        return None
    kept, total, first = 0, 0, ""
    for epoch in range(save.epoch, epochs):
        offset = epoch - save.epoch
        start = save.step if offset == 0 else 0
        whole = _new_per_step([rank[epoch] for rank in reference], set())[start:]
        seen = {s for rank in reference for b in rank[epoch][:start] for s in b}
        got = _new_per_step([rank[offset] if offset < len(rank) else [] for rank in resumed], seen)
        for step in range(max(len(whole), len(got))):
            same = step < len(whole) and step < len(got) and whole[step] == got[step]
            kept, total = kept + same, total + 1
            first = first or ("" if same else f"epoch {epoch}, batch {start + step}")
    return kept, total, first


def check_reproducible(reference: list[list[Pass]], interrupted: list[list[Pass]], save: SavePoint) -> str | None:
    """With --kill the reference and the interrupted run are two fresh runs: before the save point
    they must agree, or the comparison means nothing. Returns a reason when they do not."""
    for rank, (ref, run) in enumerate(zip(reference, interrupted, strict=True)):
        want = [list(e) for e in ref[: save.epoch]] + [ref[save.epoch][: save.step]]
        if run != want:
            return (f"rank {rank}: two uninterrupted runs from a fresh start served different batches "
                    "before the save point; the pipeline is not reproducible (an unseeded shuffle?), "
                    "so no resume can match it")
    return None
