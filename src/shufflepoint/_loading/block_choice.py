"""The ``blocks`` order's block when the caller gives none, and on a resume, the block the run began with.

A ``Shards`` corpus sizes its default block to the process's decode budget
(``_order/decode_budget``), and a budget differs between machines. The block is part of the order,
so the state records it (``shuffle_block``; before state version 4 in the corpus fingerprint,
``shards:<hash>:blocks=N``), and a loader whose block is this machine's default adopts the one a state
records: a run resumed on a machine with another budget keeps its order (with a warning where that
block no longer fits the budget), where any other block is checked against the state like any field.
Whether the block was passed or left to the default changes nothing: ``shuffle_block=None`` and the block
it resolves to resume alike.

Words: docs/glossary.md (block, shuffle block, decode budget).
"""

from __future__ import annotations

from typing import Any, Protocol

from shufflepoint._core.cut import Deal
from shufflepoint._core.older_states import recorded_parameter
from shufflepoint._loading.capabilities import fitting_shuffle_block
from shufflepoint._order.blocks import DEFAULT_SHUFFLE_BLOCK
from shufflepoint._order.blocks import NAME as BLOCKS


class _Orders(Protocol):
    name: str
    shuffle_block: int | None

    @property
    def dataset(self) -> Any: ...

    def for_state(self, state: object, deal: Deal) -> Any: ...

    def on_grid(self, grid: int | None) -> Any: ...


def default_block(dataset: Any, name: str) -> int:
    """The block of a loader given none: the corpus's fitting block (``Shards``) or the default."""
    fitting = fitting_shuffle_block(dataset) if name == BLOCKS else None
    return DEFAULT_SHUFFLE_BLOCK if fitting is None else fitting


def recorded_block(state: object) -> int | None:
    """The block a state records (``shuffle_block``, or a corpus fingerprint's before version 4), or None.

    >>> recorded_block({"version": 4, "shuffle_block": 2048})
    2048
    """
    return recorded_parameter(state, "shuffle_block")


def adopt_recorded_block(orders: _Orders, state: object, rebuild: Any) -> Any:
    """``rebuild(order, shuffle_block)`` with the state's block where ``orders`` read a ``blocks`` order in this
    machine's default block and the state records another; None otherwise (the state is validated as usual)."""
    recorded = recorded_block(state)
    if orders.name != BLOCKS or recorded in (None, orders.shuffle_block):
        return None
    if orders.shuffle_block != default_block(orders.dataset, orders.name):
        return None  # a block of the caller's own: checked against the state's
    return rebuild(orders.name, recorded)


def orders_for_state(orders: _Orders, state: object, deal: Deal, rebuild: Any) -> Any:
    """The orders to validate ``state`` against, read with ``deal``, from a loader's ``orders`` as built: the
    state's block where these read this machine's default block (``adopt_recorded_block``; ``rebuild(order,
    block)`` builds them), the state's earlier default order where these read today's (``OrderCache.for_state``),
    and the state's grid for a scheduled dataset (its phases follow the run's first global batch). Read from a
    state of any version."""
    adopted = adopt_recorded_block(orders, state, rebuild) or orders.for_state(state, deal)
    return adopted.on_grid(recorded_parameter(state, "grid"))
