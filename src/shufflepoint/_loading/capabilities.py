"""What a dataset may declare to the loader beyond ``__getitem__``/``__len__``: the capabilities a
schedule needs, as a ``Protocol`` rather than attribute names probed one by one.

A scheduled ``Mixture`` declares both: it is read under one deal only (``check_deal``), and a resume
whose fingerprint changed may still be its own run with phases appended (``fingerprint_compatible``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class Scheduled(Protocol):
    """A dataset whose order follows a schedule (``shufflepoint.Mixture(..., schedule=...)``)."""

    def check_deal(self, deal: str, global_batch: int) -> None:
        """Raise ``ValueError`` naming ``deal`` when the dataset cannot be read under it; warn when the
        global batch (world size x batch size) splits what the schedule means whole."""

    def fingerprint_compatible(self, saved: str, expected: str, epoch: int, cursor: int, shuffle_block: int) -> bool:
        """Whether a state saved with fingerprint ``saved`` at (epoch, cursor) resumes the loader whose
        fingerprint is ``expected``."""


def schedule_hooks(dataset: Any, deal: str, shuffle_block: int | None,
                   global_batch: int) -> Callable[[str, str, int, int], bool] | None:
    """Check the deal and global batch against a scheduled dataset, and return its fingerprint check for
    the state (``state.Expected.fingerprint_compatible``); None for any other dataset."""
    if not isinstance(dataset, Scheduled):
        return None
    dataset.check_deal(deal, global_batch)
    return functools.partial(dataset.fingerprint_compatible, shuffle_block=shuffle_block or 0)
