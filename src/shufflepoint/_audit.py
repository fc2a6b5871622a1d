"""The audit: run a user's loader in real processes, interrupt it, resume it in new ones, judge.

Three layers, each testable alone:

- **Identity** (``sample_ids``): what a batch *is*, as a list of sample ids (ints or short hash
  strings). Integer tensors and lists count by value; a tuple, list or dict counts by its first
  tensor; anything else by a stable hash of each sample.
- **Judge** (``judge``): pure functions from recorded streams to a verdict, one of ``VERDICTS``.
  No processes, no torch: hypothesis and unit tests drive it directly.
- **Runner** (``run_audit``): the phases, each a launch of fresh processes on Gloo
  (``shufflepoint._launch.launch``) running ``shufflepoint._audit_worker``.

The vocabulary, worked on the seed (64 samples, batch 4, 2 ranks, saved after 3 batches of epoch 1)::

    uninterrupted rank 0, epoch 1 : [39 18 10 13] [63 27 2 62] [25 6 37 50] | [55 16 59 0] [22 46 17 57] ...
    resumed rank 0                :                                          | [15 41 52 61] [5 50 18 14] ...
    -> ORDER_LOST: right position (5 batches of 4 follow), wrong order: epoch 0's order replayed.

``EXACT``: every rank's resumed stream equals its uninterrupted one, batch for batch.
``EXACTLY_ONCE``: the world size changed; per epoch, the union over old and new ranks is the
epoch's samples, each once (tail padding or dropping only as the sizes allow).
``ORDER_LOST``: the right number of batches of the right sizes, other samples (position right,
order wrong). ``DUPLICATED`` / ``DROPPED``: more / fewer samples than the uninterrupted run.
``DIVERGED``: the resumed epoch was right, a later one differs; or the pipeline is not
reproducible between two fresh runs. ``ERROR``: a process failed.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

SCHEMA_VERSION = 1

EXACT, EXACTLY_ONCE, ORDER_LOST = "EXACT", "EXACTLY_ONCE", "ORDER_LOST"
DUPLICATED, DROPPED, DIVERGED, ERROR = "DUPLICATED", "DROPPED", "DIVERGED", "ERROR"
VERDICTS = (EXACT, EXACTLY_ONCE, ORDER_LOST, DUPLICATED, DROPPED, DIVERGED, ERROR)
PASSING = (EXACT, EXACTLY_ONCE)
# The overall verdict is the most severe one found, in this order.
_SEVERITY = (ERROR, ORDER_LOST, DUPLICATED, DROPPED, DIVERGED, EXACTLY_ONCE, EXACT)

SampleId = Hashable  # int or str in practice: JSON round-trips them
Batch = list  # of sample ids
Pass = list  # of batches: one run of iter(loader)


class UsageError(ValueError):
    """A command line or TARGET the audit cannot run; the CLI exits 2 with this message."""


def exit_code(verdict: str) -> int:
    """0 for a passing verdict, 1 for any other; the CLI's contract."""
    return 0 if verdict in PASSING else 1


def worst(verdicts: Sequence[str]) -> str:
    """The most severe verdict of several (EXACT for none)."""
    return min(verdicts, key=_SEVERITY.index) if verdicts else EXACT


# ----------------------------------------------------------------------------------------------
# Arguments
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SavePoint:
    """Save after ``step`` batches of epoch ``epoch`` have been received (step 0: before its first)."""

    epoch: int
    step: int

    def __str__(self) -> str:
        return f"{self.epoch}:{self.step}"


def parse_save_at(text: str) -> SavePoint:
    """``"1:3"`` -> SavePoint(epoch=1, step=3)."""
    parts = text.split(":")
    if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
        raise UsageError(f"--save-at: found {text!r}, expected EPOCH:STEP with two integers >= 0, e.g. 1:3")
    return SavePoint(int(parts[0]), int(parts[1]))


@dataclass(frozen=True)
class Target:
    """``path/to/file.py:factory`` or ``package.module:factory``, resolved."""

    text: str
    module: str  # a module name, or an absolute file path
    attribute: str
    is_file: bool


def parse_target(text: str, what: str = "TARGET") -> Target:
    """Split and check a TARGET; a file path is made absolute (workers may run elsewhere)."""
    location, sep, attribute = text.rpartition(":")
    if not sep or not location or not attribute.isidentifier():
        raise UsageError(
            f"{what}: found {text!r}, expected path/to/file.py:factory or package.module:factory "
            "(a factory that takes no arguments and returns the loader)"
        )
    if location.endswith(".py") or os.sep in location:
        path = os.path.abspath(location)
        if not os.path.isfile(path):
            raise UsageError(f"{what}: file {location!r} not found (from {os.getcwd()})")
        return Target(text, path, attribute, True)
    import importlib.util

    try:
        found = importlib.util.find_spec(location)
    except (ImportError, ValueError):
        found = None  # a parent package is missing
    if found is None:
        raise UsageError(
            f"{what}: module {location!r} not found on sys.path (from {os.getcwd()}); give a file path "
            "(path/to/file.py:factory) or install the package"
        )
    return Target(text, location, attribute, False)


def load_target(target: Target) -> Callable[[], Any]:
    """Import TARGET and return its factory (in a worker: may import torch, accelerate, ...)."""
    import importlib
    import importlib.util

    if target.is_file:
        name = "_shufflepoint_target_" + hashlib.blake2b(target.module.encode(), digest_size=6).hexdigest()
        sys.path.insert(0, os.path.dirname(target.module))
        spec = importlib.util.spec_from_file_location(name, target.module)
        if spec is None or spec.loader is None:
            raise UsageError(f"TARGET: cannot import {target.module!r} as a Python file")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(target.module)
    factory = getattr(module, target.attribute, None)
    if factory is None:
        public = sorted(n for n in vars(module) if not n.startswith("_") and callable(vars(module)[n]))
        raise UsageError(
            f"TARGET {target.text!r}: {target.module!r} has no attribute {target.attribute!r}; "
            f"its callables: {', '.join(public[:12]) or 'none'}"
        )
    if not callable(factory):
        raise UsageError(f"TARGET {target.text!r}: {target.attribute!r} is a {type(factory).__name__}, not callable")
    return factory


# ----------------------------------------------------------------------------------------------
# Identity: a batch -> its sample ids
# ----------------------------------------------------------------------------------------------


def _hash_bytes(data: bytes) -> str:
    return "h:" + hashlib.blake2b(data, digest_size=8).hexdigest()


def _tensor_ids(tensor: Any) -> list[SampleId]:
    import torch

    tensor = tensor.detach().cpu()
    integer = not (tensor.is_floating_point() or tensor.is_complex()) and tensor.dtype != torch.bool
    if tensor.dim() == 0:
        return [int(tensor.item())] if integer else [_hash_bytes(_tensor_bytes(tensor))]
    if tensor.dim() == 1 and integer:
        return [int(v) for v in tensor.tolist()]
    return [_hash_bytes(_tensor_bytes(row)) for row in tensor]


def _tensor_bytes(tensor: Any) -> bytes:
    header = f"{tensor.dtype}{tuple(tensor.shape)}".encode()
    return header + tensor.contiguous().numpy().tobytes()


def _object_id(sample: Any) -> SampleId:
    import torch

    if isinstance(sample, bool):
        return _hash_bytes(repr(sample).encode())
    if isinstance(sample, int):
        return sample
    if isinstance(sample, torch.Tensor):
        return _hash_bytes(_tensor_bytes(sample.detach().cpu()))
    return _hash_bytes(repr(sample).encode())


def sample_ids(batch: Any) -> list[SampleId]:
    """The ids of a batch's samples, in order.

    >>> import torch
    >>> sample_ids(torch.tensor([7, 3]))                        # integer tensor: by value
    [7, 3]
    >>> sample_ids((torch.tensor([7, 3]), torch.zeros(2, 4)))  # tuple: its first tensor
    [7, 3]
    >>> sample_ids({"input_ids": torch.tensor([[1, 2], [3, 4]])})[0][:2]   # 2-D: a hash per row
    'h:'
    """
    import torch

    if isinstance(batch, torch.Tensor):
        return _tensor_ids(batch)
    if isinstance(batch, Mapping):
        values = list(batch.values())
    elif isinstance(batch, (list, tuple)):
        if batch and all(isinstance(v, int) and not isinstance(v, bool) for v in batch):
            return list(batch)
        values = list(batch)
    else:
        return [_object_id(batch)]
    for value in values:
        if isinstance(value, torch.Tensor):
            return _tensor_ids(value)
    if isinstance(batch, Mapping):
        for value in values:  # a dict of lists (a datasets-style batch without tensors)
            if isinstance(value, (list, tuple)):
                return [_object_id(v) for v in value]
        return [_object_id(batch)]
    return [_object_id(v) for v in values]


# ----------------------------------------------------------------------------------------------
# Judge
# ----------------------------------------------------------------------------------------------


@dataclass
class Difference:
    """The first batch where the resumed stream leaves the uninterrupted one, on one rank."""

    rank: int
    epoch: int
    batch: int  # index within the epoch
    expected: list | None  # None: the uninterrupted stream had no such batch
    got: list | None  # None: the resumed stream had no such batch


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

    A global step takes world_size * batch_size samples. The last, partial step is either
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
    if result.verdict == EXACTLY_ONCE:
        result.summary = (f"world size {len(reference)} -> {len(resumed)}: every epoch from {save.epoch} on "
                          f"serves each sample once over all ranks (a different cut of the same data)")
    else:
        first = next(e for e in result.epochs if e.verdict == result.verdict)
        result.summary = f"world size {len(reference)} -> {len(resumed)}, epoch {first.epoch}: {first.detail}"
    return result


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


# ----------------------------------------------------------------------------------------------
# Report
# ----------------------------------------------------------------------------------------------


def _versions() -> dict[str, str | None]:
    import importlib.metadata

    found: dict[str, str | None] = {"python": sys.version.split()[0]}
    for name in ("shufflepoint", "torch", "accelerate", "torchdata"):
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = None
    return found


def report_dict(config: AuditConfig, judgement: Judgement, facts: dict[str, Any], timings: dict[str, float],
                error: str | None = None) -> dict[str, Any]:
    """The JSON report. A compatibility surface: fields are added, never renamed."""
    return {
        "schema_version": SCHEMA_VERSION,
        "verdict": judgement.verdict,
        "exit_code": exit_code(judgement.verdict),
        "summary": judgement.summary,
        "target": config.target.text,
        "nproc": config.nproc,
        "resume_nproc": config.resume_nproc,
        "epochs": config.epochs,
        "save_at": {"epoch": config.save_at.epoch, "step": config.save_at.step},
        "kill": config.kill,
        "sample_id": config.sample_id,
        "elastic": judgement.elastic,
        "loader": facts.get("loader"),
        "dataset_length": facts.get("dataset_length"),
        "state_keys": facts.get("state_keys"),
        "ranks": [asdict(r) for r in judgement.ranks],
        "epoch_checks": [asdict(e) for e in judgement.epochs],
        "notes": judgement.notes,
        "error": error,
        "versions": _versions(),
        "timings_s": {k: round(v, 2) for k, v in timings.items()},
    }


def _short(batch: list | None, width: int) -> str:
    if batch is None:
        return "(none)"
    text = "[" + " ".join(str(s) for s in batch) + "]"
    return text if len(text) <= width else text[: width - 4] + " ...]"


def render(report: dict[str, Any]) -> str:
    """The terminal view of a report: a per-rank table, the first difference side by side."""
    lines = [
        f"shufflepoint audit {report['target']}",
        f"  loader {report['loader']}  |  {report['nproc']} -> {report['resume_nproc']} processes  |  "
        f"{report['epochs']} epochs  |  saved at epoch {report['save_at']['epoch']} after "
        f"{report['save_at']['step']} batches{'  |  SIGKILL' if report['kill'] else ''}",
        "",
    ]
    if report["ranks"]:
        if report["elastic"]:
            lines.append(f"  {'new rank':<9} resumed")
            for rank in report["ranks"]:
                lines.append(f"  {rank['rank']:<9} {rank['detail']}")
        else:
            lines.append(f"  {'rank':<5} {'verdict':<13} {'batches':>9}  detail")
            for rank in report["ranks"]:
                count = f"{rank['batches_resumed']}/{rank['batches_expected']}"
                lines.append(f"  {rank['rank']:<5} {rank['verdict']:<13} {count:>9}  {rank['detail']}")
        lines.append("")
    if report["elastic"] and report["epoch_checks"]:
        lines.append(f"  {'epoch':<6} {'verdict':<13} {'before':>7} {'after':>6} {'n':>6}  detail")
        for e in report["epoch_checks"]:
            lines.append(f"  {e['epoch']:<6} {e['verdict']:<13} {e['before_save']:>7} {e['after_resume']:>6} "
                         f"{e['dataset_length']:>6}  {e['detail']}")
        lines.append("")
    difference = next((r["first_difference"] for r in report["ranks"] if r["first_difference"]), None)
    if difference:
        width = 60
        lines.append(f"  first difference: rank {difference['rank']}, epoch {difference['epoch']}, "
                     f"batch {difference['batch']}")
        lines.append(f"    {'uninterrupted':<{width}}  resumed")
        lines.append(f"    {_short(difference['expected'], width):<{width}}  {_short(difference['got'], width)}")
        lines.append("")
    for note in report["notes"]:
        lines.append(f"  note: {note}")
    if report["error"]:
        lines.append("  error: " + report["error"].rstrip().replace("\n", "\n    "))
    lines.append(f"verdict: {report['verdict']} - {report['summary']}")
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------
# Runner
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AuditConfig:
    target: Target
    nproc: int
    resume_nproc: int
    epochs: int = 2
    save_at: SavePoint = SavePoint(1, 3)
    kill: bool = False
    sample_id: str | None = None
    timeout: float = 600.0

    def __post_init__(self) -> None:
        for name in ("nproc", "resume_nproc", "epochs"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise UsageError(f"--{name.replace('_', '-')}: found {value!r}, expected an integer >= 1")
        if self.save_at.epoch >= self.epochs:
            raise UsageError(
                f"--save-at {self.save_at}: epoch {self.save_at.epoch} is not run with --epochs {self.epochs} "
                f"(epochs 0..{self.epochs - 1}); save in an earlier epoch or run more epochs"
            )
        if self.sample_id is not None:
            parse_target(self.sample_id, "--sample-id")


def _read_records(directory: str, phase: str, world_size: int) -> list[dict[str, Any] | None]:
    records: list[dict[str, Any] | None] = []
    for rank in range(world_size):
        path = os.path.join(directory, f"{phase}_r{rank}.json")
        if os.path.exists(path):
            with open(path) as f:
                records.append(json.load(f))
        else:
            records.append(None)
    return records


def _phase_failure(phase: str, records: list[dict[str, Any] | None], launch_result: Any) -> tuple[str, str] | None:
    """(kind, message) when a phase did not produce every rank's record: kind "usage" or "error"."""
    for record in records:
        if record is not None and record.get("error"):
            return record["error"]["kind"], f"{phase}, rank {record['rank']}: {record['error']['message']}"
    if any(r is None for r in records):
        missing = [rank for rank, r in enumerate(records) if r is None]
        tail = "\n".join(launch_result.stderr.strip().splitlines()[-25:]) if launch_result is not None else ""
        return "error", (f"{phase}: ranks {missing} wrote no record (exit code "
                         f"{getattr(launch_result, 'returncode', '?')}){':' if tail else ''}\n{tail}")
    return None


def run_audit(config: AuditConfig, progress: Callable[[str], None] = lambda _: None,
              workdir: str | None = None) -> dict[str, Any]:
    """Run the phases and judge; returns the report dict. Raises UsageError for a TARGET that
    cannot be loaded or a save point the loader never reaches."""
    from shufflepoint._launch import launch

    started = time.monotonic()
    own_dir = workdir is None
    directory = workdir or tempfile.mkdtemp(prefix="shufflepoint-audit-")
    timings: dict[str, float] = {}
    common = ["--target", config.target.module + ":" + config.target.attribute,
              "--file-target" if config.target.is_file else "--module-target",
              "--out", directory, "--epochs", str(config.epochs), "--save-at", str(config.save_at)]
    if config.sample_id:
        common += ["--sample-id", config.sample_id]
    worker = ["-m", "shufflepoint._audit_worker"]

    def phase(name: str, nproc: int, label: str, kill: bool = False) -> Any:
        begin = time.monotonic()
        progress(f"[{begin - started:5.1f}s] {label}: starting {nproc} processes ...")
        kill_when = os.path.join(directory, "interrupt.saved") if kill else None
        result = launch([*worker, name, *common], nproc, timeout=config.timeout, kill_when=kill_when)
        timings[name] = time.monotonic() - begin
        how = "SIGKILLed after the save" if result.killed else f"exit code {result.returncode}"
        progress(f"[{time.monotonic() - started:5.1f}s] {label}: {nproc} processes, {how}")
        return result

    try:
        facts: dict[str, Any] = {}
        reference_phase = "reference" if config.kill else "record"
        result = phase(reference_phase, config.nproc,
                       "uninterrupted run" + ("" if config.kill else ", state saved on the way"))
        records = _read_records(directory, reference_phase, config.nproc)
        failure = _phase_failure(reference_phase, records, result)
        if failure is None and config.kill:
            result = phase("interrupt", config.nproc, "interrupted run", kill=True)
            interrupted = _read_records(directory, "interrupt", config.nproc)
            failure = _phase_failure("interrupt", interrupted, result)
            if failure is None and not result.killed:
                failure = ("error", "interrupt: the run ended before it was killed")
        if failure is None:
            saved = interrupted if config.kill else records
            facts = {k: records[0].get(k) for k in ("loader", "dataset_length")}  # type: ignore[union-attr]
            facts["state_keys"] = saved[0].get("state_keys")  # type: ignore[union-attr]
            result = phase("resume", config.resume_nproc, "resumed in new processes")
            resumed = _read_records(directory, "resume", config.resume_nproc)
            failure = _phase_failure("resume", resumed, result)
        timings["total"] = time.monotonic() - started
        if failure is not None:
            kind, message = failure
            if kind == "usage":
                raise UsageError(message)
            judgement = Judgement(ERROR, message.splitlines()[0], config.resume_nproc != config.nproc)
            return report_dict(config, judgement, facts, timings, error=message)
        reference = [r["epochs"] for r in records]  # type: ignore[index]
        judgement = judge(reference, [r["passes"] for r in resumed],  # type: ignore[index]
                          config.save_at, dataset_length=facts.get("dataset_length"),
                          drop_last=records[0].get("drop_last"),  # type: ignore[union-attr]
                          resume_batch_size=resumed[0].get("batch_size"))  # type: ignore[union-attr]
        if config.kill:
            reason = check_reproducible(reference, [r["epochs"] for r in interrupted], config.save_at)  # type: ignore[index]
            if reason is not None:
                judgement.verdict, judgement.summary = DIVERGED, reason
        loaded = sorted({r["loaded_state_of_rank"] for r in resumed if r})  # type: ignore[index]
        if judgement.elastic:
            judgement.notes.append(f"new ranks loaded the state saved by old rank(s) {loaded}")
        return report_dict(config, judgement, facts, timings)
    finally:
        if own_dir:
            shutil.rmtree(directory, ignore_errors=True)
