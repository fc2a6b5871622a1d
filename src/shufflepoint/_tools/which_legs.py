"""The legs of a run, as ``which_trainer`` counts them, from a loaded loader's layout history.

Words: docs/glossary.md (leg, history, layout, cut, deal).
"""

from __future__ import annotations

from typing import Any

from shufflepoint._core.history import History
from shufflepoint._tools.which_trainer import Leg


def _batches(samples: int, batch_size: int) -> int:
    return -(-samples // batch_size)


def legs_of(state: dict[str, Any]) -> list[Leg]:
    """Each leg of the state's history: its first step, the epoch there, its batches per rank per
    epoch, and the batches of that epoch left at its start (what the Trainer placed itself with)."""
    history = History.from_entries(state["n"], state["deal"], state["history"])
    found = []
    for leg in history.legs:
        layout = leg.layout
        whole = _batches(history.deal.cut(layout, 0).samples_per_rank(), layout.batch_size)
        left = _batches(leg.start.cut(layout, history.deal).samples_per_rank(), layout.batch_size)
        found.append(Leg(leg.step, leg.start.epoch, whole, left))
    return found


def a_layout_changed_on_one_world(state: dict[str, Any]) -> bool:
    """Whether two legs in a row share a world size (a batch-size change: in a run or at a resume)."""
    legs = History.from_entries(state["n"], state["deal"], state["history"]).legs
    return any(a.layout.world_size == b.layout.world_size for a, b in zip(legs, legs[1:], strict=False))
