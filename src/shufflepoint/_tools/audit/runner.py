"""The runner: the audit's phases, each a launch of fresh processes on Gloo running the worker."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from typing import Any

from shufflepoint._tools.audit.config import AuditConfig
from shufflepoint._tools.audit.content import ContentResult, apply_content, check_content_reproducible, judge_content
from shufflepoint._tools.audit.exclusion import apply_exclusion, served_excluded
from shufflepoint._tools.audit.judge import Judgement, check_reproducible, judge
from shufflepoint._tools.audit.report import report_dict
from shufflepoint._tools.audit.verdicts import DIVERGED, DUPLICATED, ERROR, PASSING, UsageError


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


Record = dict[str, Any]
Failure = tuple[str, str]  # (kind, message): kind "usage" or "error"


class _Phases:
    """Launches the worker for one phase at a time: fresh processes, timed, reported as they go."""

    def __init__(self, config: AuditConfig, directory: str, progress: Callable[[str], None]) -> None:
        self.config, self.directory, self.progress = config, directory, progress
        self.started = time.monotonic()
        self.timings: dict[str, float] = {}
        target = config.target
        self.common = ["--target", target.module + ":" + target.attribute,
                       "--file-target" if target.is_file else "--module-target",
                       "--out", directory, "--epochs", str(config.epochs), "--save-at", str(config.save_at)]
        if config.sample_id:
            self.common += ["--sample-id", config.sample_id]
        if config.exclude:
            self.common += ["--exclude", str(config.exclude)]

    def run(self, name: str, nproc: int, label: str, kill: bool = False) -> tuple[list[Record | None], Failure | None]:
        """Launch PHASE ``name`` on ``nproc`` processes; its records, and what went wrong if anything."""
        from shufflepoint._tools.launch import launch

        begin = time.monotonic()
        self.progress(f"[{begin - self.started:5.1f}s] {label}: starting {nproc} processes ...")
        kill_when = os.path.join(self.directory, "interrupt.saved") if kill else None
        result = launch(["-m", "shufflepoint._tools.audit.worker", name, *self.common], nproc,
                        timeout=self.config.timeout, kill_when=kill_when)
        self.timings[name] = time.monotonic() - begin
        how = "SIGKILLed after the save" if result.killed else f"exit code {result.returncode}"
        self.progress(f"[{time.monotonic() - self.started:5.1f}s] {label}: {nproc} processes, {how}")
        records = _read_records(self.directory, name, nproc)
        failure = _phase_failure(name, records, result)
        if failure is None and kill and not result.killed:
            failure = ("error", f"{name}: the run ended before it was killed")
        return records, failure


def run_audit(config: AuditConfig, progress: Callable[[str], None] = lambda _: None,
              workdir: str | None = None) -> dict[str, Any]:
    """Run the phases and judge; returns the report dict. Raises UsageError for a TARGET that
    cannot be loaded or a save point the loader never reaches."""
    directory = workdir or tempfile.mkdtemp(prefix="shufflepoint-audit-")
    phases = _Phases(config, directory, progress)
    try:
        facts: dict[str, Any] = {}
        reference_phase = "reference" if config.kill else "record"
        records, failure = phases.run(reference_phase, config.nproc,
                                      "uninterrupted run" + ("" if config.kill else ", state saved on the way"))
        interrupted: list[Record | None] = []
        if failure is None and config.kill:
            interrupted, failure = phases.run("interrupt", config.nproc, "interrupted run", kill=True)
        resumed: list[Record | None] = []
        if failure is None:
            saved = interrupted if config.kill else records
            facts = {k: _record(records, 0).get(k) for k in ("loader", "dataset_length")}
            facts["state_keys"] = _record(saved, 0).get("state_keys")
            resumed, failure = phases.run("resume", config.resume_nproc, "resumed in new processes")
        phases.timings["total"] = time.monotonic() - phases.started
        if failure is not None:
            kind, message = failure
            if kind == "usage":
                raise UsageError(message)
            judgement = Judgement(ERROR, message.splitlines()[0], config.resume_nproc != config.nproc)
            return report_dict(config, judgement, facts, phases.timings, error=message)
        judgement = _judge_records(config, facts, records, interrupted, resumed)
        return report_dict(config, judgement, facts, phases.timings)
    finally:
        if workdir is None:
            shutil.rmtree(directory, ignore_errors=True)


def _record(records: list[Record | None], rank: int) -> Record:
    """A rank's record, once ``_phase_failure`` has found every rank's."""
    found = records[rank]
    assert found is not None, "_phase_failure lets no phase with a missing record through"
    return found


def _judge_records(config: AuditConfig, facts: dict[str, Any], records: list[Record | None],
                   interrupted: list[Record | None], resumed: list[Record | None]) -> Judgement:
    """The judge over the phases' records, plus the reproducibility check of a --kill audit."""
    reference = [_record(records, r)["epochs"] for r in range(len(records))]
    new = [_record(resumed, r) for r in range(len(resumed))]
    # with --exclude an epoch's samples are those the uninterrupted run served, read off it
    length = None if config.exclude else facts.get("dataset_length")
    judgement = judge(reference, [r["passes"] for r in new], config.save_at,
                      dataset_length=length, drop_last=_record(records, 0).get("drop_last"),
                      resume_batch_size=new[0].get("batch_size"))
    apply_content(judgement, _judge_content(config, reference, records, interrupted, new))
    if config.exclude:
        served = served_excluded(_record(records, 0)["excluded_ids"], reference, [r["passes"] for r in new],
                                 config.save_at)
        apply_exclusion(judgement, config.exclude, served)
    if config.kill:
        before = [_record(interrupted, r)["epochs"] for r in range(len(interrupted))]
        reason = check_reproducible(reference, before, config.save_at)
        if reason is not None:
            judgement.verdict, judgement.summary = DIVERGED, reason
    replayed = {r["rank"]: r["replayed"] for r in new if r.get("replayed")}
    if replayed:  # a resumed Trainer counted its first epoch as one before the save point's
        total = sum(n for by_epoch in replayed.values() for n in by_epoch.values())
        epochs = sorted({int(e) for by_epoch in replayed.values() for e in by_epoch})
        judgement.notes.append(f"the resumed Trainer counted its first epoch as epoch {epochs[0]}, before the "
                               f"save point's epoch {config.save_at.epoch}, and trained {total} samples there again")
        if judgement.verdict in PASSING:
            judgement.verdict = DUPLICATED
            judgement.summary = f"{total} samples of finished epochs {epochs} trained again after the resume"
    if judgement.elastic:
        loaded = sorted({r["loaded_state_of_rank"] for r in new})
        judgement.notes.append(f"new ranks loaded the state saved by old rank(s) {loaded}")
    return judgement


def _digests(records: list[Record], key: str) -> list[Any] | None:
    """Every rank's content digests, or None when a rank recorded none (a worker of another version)."""
    return [r[key] for r in records] if all(key in r for r in records) else None


def _judge_content(config: AuditConfig, reference: list[Any], records: list[Record | None],
                   interrupted: list[Record | None], new: list[Record]) -> ContentResult:
    """The content check over the phases' records (``content``), with --kill's reproducibility check."""
    old = [_record(records, r) for r in range(len(records))]
    reference_digests = _digests(old, "content")
    content = judge_content(reference, reference_digests, [r["passes"] for r in new], _digests(new, "content_passes"),
                            config.save_at)
    before = _digests([_record(interrupted, r) for r in range(len(interrupted))], "content")
    if config.kill and reference_digests is not None and before is not None:
        content.unreproducible = check_content_reproducible(reference_digests, before, config.save_at)
    return content
