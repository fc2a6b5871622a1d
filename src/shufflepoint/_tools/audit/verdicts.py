"""The verdict vocabulary of DESIGN.md, its severity order, and the CLI's exit-code contract.

Words: docs/glossary.md (verdict).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

SCHEMA_VERSION = 1

EXACT, EXACTLY_ONCE, ORDER_LOST = "EXACT", "EXACTLY_ONCE", "ORDER_LOST"
DUPLICATED, DROPPED, DIVERGED, ERROR = "DUPLICATED", "DROPPED", "DIVERGED", "ERROR"
CONTENT_DIVERGED = "CONTENT_DIVERGED"  # the ids are right (EXACT/EXACTLY_ONCE), a sample's content is not
# Elastic at a fixed global batch (world size x batch size unchanged): every sample once, and each
# global batch after the resume holds the uninterrupted run's samples (the ranks cut it differently).
SAME_GLOBAL_BATCHES = "SAME_GLOBAL_BATCHES"
SERVED_EXCLUDED = "SERVED_EXCLUDED"  # audit --exclude: a sample excluded with loader.exclude was served after it
VERDICTS = (EXACT, SAME_GLOBAL_BATCHES, EXACTLY_ONCE, ORDER_LOST, DUPLICATED, DROPPED, DIVERGED, CONTENT_DIVERGED,
            SERVED_EXCLUDED, ERROR)
PASSING = (EXACT, SAME_GLOBAL_BATCHES, EXACTLY_ONCE)
# The overall verdict is the most severe one found, in this order.
_SEVERITY = (ERROR, SERVED_EXCLUDED, ORDER_LOST, DUPLICATED, DROPPED, DIVERGED, CONTENT_DIVERGED, EXACTLY_ONCE,
             SAME_GLOBAL_BATCHES, EXACT)

SampleId = Hashable  # int or str in practice: JSON round-trips them
Batch = list[Any]  # of sample ids (SampleId); Any, as lists are invariant and callers build list[int]
Pass = list[Batch]  # of batches: one run of iter(loader)


class UsageError(ValueError):
    """A command line or TARGET the audit cannot run; the CLI exits 2 with this message."""


def exit_code(verdict: str) -> int:
    """0 for a passing verdict, 1 for any other; the CLI's contract."""
    return 0 if verdict in PASSING else 1


def worst(verdicts: Sequence[str]) -> str:
    """The most severe verdict of several (EXACT for none)."""
    return min(verdicts, key=_SEVERITY.index) if verdicts else EXACT
