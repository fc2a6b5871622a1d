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
from shufflepoint._tools.audit.judge import Judgement, check_reproducible, judge
from shufflepoint._tools.audit.report import report_dict
from shufflepoint._tools.audit.verdicts import DIVERGED, ERROR, UsageError


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
    from shufflepoint._tools.launch import launch

    started = time.monotonic()
    own_dir = workdir is None
    directory = workdir or tempfile.mkdtemp(prefix="shufflepoint-audit-")
    timings: dict[str, float] = {}
    common = ["--target", config.target.module + ":" + config.target.attribute,
              "--file-target" if config.target.is_file else "--module-target",
              "--out", directory, "--epochs", str(config.epochs), "--save-at", str(config.save_at)]
    if config.sample_id:
        common += ["--sample-id", config.sample_id]
    worker = ["-m", "shufflepoint._tools.audit.worker"]

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
