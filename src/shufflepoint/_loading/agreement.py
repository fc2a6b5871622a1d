"""At load, one small collective checks that every rank loaded the same state.

The commonest silent failure after a restart is ranks restoring different checkpoints (a stale
file on one node, a copy that did not finish). shufflepoint's state is the same on every rank, so
disagreement is always a mistake. The check runs once per load, never per batch.
"""

from __future__ import annotations

from typing import Any

from shufflepoint._core.errors import StateError


def group_matches(rank: int, world_size: int) -> bool:
    """True when the default process group is the one this object shards over."""
    import torch.distributed as dist

    return (
        dist.is_available() and dist.is_initialized()
        and dist.get_world_size() == world_size and dist.get_rank() == rank
    )


def agree_across_ranks(local: dict[str, Any] | None, local_error: str | None) -> None:
    """Exchange each rank's loaded state (or its own refusal) and raise the same error on all ranks.

    Every rank must call this, including one whose local validation failed, or the others would
    wait forever in the collective.
    """
    import torch.distributed as dist

    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, (local, local_error))
    refused = [(rank, error) for rank, (_, error) in enumerate(gathered) if error is not None]
    if refused:
        lines = "; ".join(f"rank {rank}: {error}" for rank, error in refused)
        raise StateError(f"the state was refused on {len(refused)} rank(s), so no rank loads it: {lines}")
    states = [state for state, _ in gathered]
    differing = sorted({field for state in states for field in state if state[field] != states[0][field]})
    if differing:
        details = "; ".join(
            f"{field!r}: " + ", ".join(f"rank {rank}={state[field]!r}" for rank, state in enumerate(states))
            for field in differing[:4]
        )
        raise StateError(
            f"ranks loaded different states, which cannot both be right: {details}. Every rank must "
            "load the same checkpoint (shufflepoint states are identical on all ranks; rank 0's "
            "copy restores everyone). To load on a subset of ranks on purpose, pass verify_ranks=False."
        )


def validate_everywhere(
    state: object, expected: Any, *, strict: bool, rank: int, world_size: int, verify_ranks: bool,
) -> tuple[int, int]:
    """Validate a state locally and, in a matching process group, across ranks; (epoch, cursor)."""
    from shufflepoint._core import state as _state

    collective = verify_ranks and group_matches(rank, world_size)
    try:
        position = _state.validate(state, expected, strict=strict)
    except StateError as error:
        if not collective:
            raise
        agree_across_ranks(None, str(error))
        raise  # not reached: agree_across_ranks raised for every rank
    if collective:
        agree_across_ranks(dict(state), None)  # type: ignore[call-overload]
    return position
