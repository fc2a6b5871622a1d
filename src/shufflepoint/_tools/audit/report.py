"""The audit's report: the JSON document (a compatibility surface) and its terminal view."""

from __future__ import annotations

import sys
from dataclasses import asdict
from typing import Any

from shufflepoint._tools.audit.config import AuditConfig
from shufflepoint._tools.audit.judge import Judgement
from shufflepoint._tools.audit.verdicts import exit_code

SCHEMA_VERSION = 1


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
        "content": judgement.content,
        "error": error,
        "versions": _versions(),
        "timings_s": {k: round(v, 2) for k, v in timings.items()},
    }


def _short(batch: list[Any] | None, width: int) -> str:
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
