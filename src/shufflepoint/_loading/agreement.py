"""At load, one small collective checks that every rank loaded the same state.

The commonest silent failure after a restart is ranks restoring different checkpoints (a stale
file on one node, a copy that did not finish). shufflepoint's state is the same on every rank, so
disagreement is always a mistake. The check runs once per load, never per batch.

It costs one ``all_reduce`` of three int64 (24 bytes per rank, whatever the world size): each rank
contributes a 56-bit digest of its state, its negation and a refusal flag, reduced with MAX, so
every rank learns max(digest), min(digest) and whether anyone refused. Only when they differ,
which is always an error, does a second collective gather the states to name the fields and ranks.

Under a data-parallel mesh (``mesh.py``) the same reduction runs along each data-parallel dimension's
group in turn: MAX is associative, so every rank still learns the extremes over the whole mesh.
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import json
import time
from typing import Any

from shufflepoint._core.exclusion import Exclusion
from shufflepoint._core.state import Position
from shufflepoint._errors import Plain, StateError, refusal


def group_matches(rank: int, world_size: int) -> bool:
    """True when the default process group is the one this object shards over."""
    import torch.distributed as dist

    return (
        dist.is_available() and dist.is_initialized()
        and dist.get_world_size() == world_size and dist.get_rank() == rank
    )


def state_digest(state: dict[str, Any] | None) -> int:
    """56 bits of a hash of the state's canonical JSON (0 for none): equal states, equal digests;
    two different states collide with probability 2**-56. Small enough to negate in an int64."""
    text = json.dumps(state, sort_keys=True, default=repr) if state is not None else ""
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:7], "big")


Groups = tuple[Any, ...]  # process groups to reduce along in turn; (None,) is the default group


def everyone_agrees(local: dict[str, Any] | None, local_error: str | None, groups: Groups) -> bool:
    """One all_reduce(MAX) of [digest, -digest, refused] per group: the same answer on every rank."""
    import torch
    import torch.distributed as dist

    on_gpu = dist.get_backend(groups[0]) == "nccl"  # NCCL reduces device tensors only
    device = torch.device("cuda", torch.cuda.current_device()) if on_gpu else torch.device("cpu")
    digest = state_digest(local)
    flags = torch.tensor([digest, -digest, int(local_error is not None)], dtype=torch.int64, device=device)
    for group in groups:
        dist.all_reduce(flags, op=dist.ReduceOp.MAX, group=group)
    if not on_gpu:
        watch_gloo_exit()
    highest, lowest_negated, refused = flags.tolist()
    return bool(refused == 0 and highest == -lowest_negated)


def agree_across_ranks(local: dict[str, Any] | None, local_error: str | None, groups: Groups = (None,)) -> None:
    """Check that every rank loaded the same state and none refused it; raise the same error on
    all ranks otherwise.

    Every rank must call this, including one whose local validation failed, or the others would
    wait forever in the collective.
    """
    if everyone_agrees(local, local_error, groups):
        return
    _explain_disagreement(local, local_error, groups)


# Seconds the main thread gives up the GIL before a finished run tears Gloo down. Each Gloo work captures the caller's
# contextvars.Context (torch's ThreadLocalState), so the Gloo worker thread that frees a finished work must take the
# GIL to drop it, and frees it under the group's work mutex. A core dump of an abort at exit showed exactly that
# (~AsyncAllreduceWork -> ~ThreadLocalState -> decref of a _contextvars.Context -> take_gil during Py_FinalizeEx ->
# PyThread_exit_thread: a forced unwind through a noexcept destructor, "terminate called without an active
# exception"); a main thread that destroys the group instead waits on that mutex holding the GIL (the hang). On a
# busy 2-core machine a worker can be off the CPU for tens of ms between finishing a work and freeing it.
SETTLE_S = 0.05


def settle_gloo_threads() -> None:
    """Give up the GIL for SETTLE_S when a Gloo group is alive, so that its worker threads free the works they
    finished (each needs the GIL) before the interpreter ends or a group is destroyed by a thread holding the GIL."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_backend() == "gloo":
        time.sleep(SETTLE_S)


@functools.cache
def _release_gloo_at_exit() -> None:
    """Destroy a Gloo default process group still alive at interpreter exit, after letting its worker threads free
    their finished works (``settle_gloo_threads``). Registered once, when a loader is built, a patched Accelerator
    prepares a loader (integrations/accelerate/_native.py) or a collective of ours runs under a Gloo default group,
    for the group seen then: a group the program destroyed (and maybe replaced) itself is left alone. atexit runs
    hooks last-registered first, so whatever registers after us runs before our settle; Accelerate 1.13 registers
    no atexit hook and has no ``__del__`` (read in its source). A Gloo group torn down with the interpreter right
    after a collective aborts its process now and then ("terminate called without an active exception", SIGABRT
    after the program ended): measured on the seed's check, 2 ranks that load a state and never destroy their
    group, 3 of 12 resumes. benchmarks/exit_soak.py per path, 2-CPU box: native 1 of 12 before the settle, 0 of
    20 with it; native-destroy 0 of 20; Accelerate 2 of 20 while only our collectives registered this (a stock
    loader runs none: the core showed a Gloo thread freeing accelerator.gather's AsyncAllgatherWork ->
    TensorImpl::decref_pyobject -> take_gil in Py_FinalizeEx's last gc), 0 of 20 since prepare registers it
    (250 s, load ~5); Trainer 0 of 10, resized Trainer resume with destroy 0 of 10; no hang anywhere. NCCL groups
    are left alone (their destruction may wait on peers)."""
    import torch.distributed as dist

    seen = id(dist.group.WORLD)  # not the group itself: holding it would keep its threads alive past a destroy

    def release() -> None:
        time.sleep(SETTLE_S)  # also after the program destroyed the group: a DDP module may still hold it
        if not (dist.is_available() and dist.is_initialized()) or dist.get_backend() != "gloo":
            return  # destroyed by the program: nothing of ours to release
        if id(dist.group.WORLD) != seen:
            return  # the program replaced the group we saw with its own: its own to end
        dist.destroy_process_group()

    atexit.register(release)


def watch_gloo_exit() -> None:
    """Register the exit release (once) when the default group is Gloo; see ``_release_gloo_at_exit``."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_backend() == "gloo":
        _release_gloo_at_exit()


def gather_from_all(local: Any, groups: Groups) -> list[Any]:
    """Every rank's ``local``, in (data-parallel) rank order: gathered along the last group first, so
    that the nested lists flatten row-major, as ``mesh.py`` numbers the ranks."""
    import torch.distributed as dist

    item, depth = local, 0
    for group in reversed(groups):
        gathered: list[Any] = [None] * dist.get_world_size(group)
        dist.all_gather_object(gathered, item, group=group)
        item, depth = gathered, depth + 1
    for _ in range(depth - 1):
        item = [inner for outer in item for inner in outer]
    return list(item)


def _explain_disagreement(local: dict[str, Any] | None, local_error: str | None, groups: Groups) -> None:
    """The rare path (always an error): gather every rank's state or refusal and name them."""
    gathered = gather_from_all((local, local_error), groups)
    refused = [(rank, error) for rank, (_, error) in enumerate(gathered) if error is not None]
    if refused:
        # the first refusing rank's refusal, as it said it, under a line that says where (not nested in a sentence)
        ranks = [rank for rank, _ in refused]
        raise StateError(f"the state was refused on {len(refused)} rank(s) {ranks}, so no rank loads it; "
                         f"rank {ranks[0]}:\n" + refused[0][1])
    states = [state for state, _ in gathered]
    differing = sorted({field for state in states for field in state if state[field] != states[0][field]})
    if differing:
        details = "; ".join(
            f"{field!r}: " + ", ".join(f"rank {rank}={state[field]!r}" for rank, state in enumerate(states))
            for field in differing[:4]
        )
        raise StateError(refusal(
            "ranks loaded different states", Plain(f"fields that differ: {', '.join(map(repr, differing[:4]))}"),
            "the same state on every rank",
            "load the same checkpoint on every rank; to load on a subset of ranks on purpose, pass verify_ranks=False",
            why=f"{details}; shufflepoint states are identical on all ranks (rank 0's copy restores everyone)"))
    raise StateError(refusal("ranks loaded different states", Plain("digests that differ, yet no field differs"),
                             "states that are JSON values alike on every rank", "load the same checkpoint on every "
                             "rank", why="a value differs in type only (e.g. 1 and 1.0)"))


def checked_along(verify_ranks: bool, rank: int, world_size: int, groups: Groups | None) -> Groups | None:
    """The process groups a rank check reduces along: a data-parallel mesh's (``groups``), else the default
    group when it is the one the loader shards over; None when there is no check to make."""
    if not verify_ranks:
        return None
    if groups is not None:
        return groups
    return (None,) if group_matches(rank, world_size) else None


def validate_everywhere(
    state: object, expected: Any, *, strict: bool, rank: int, world_size: int, verify_ranks: bool,
    groups: Groups | None = None,
) -> Position:
    """Validate a state locally and, across ranks, in a matching default process group or along
    ``groups`` (a data-parallel mesh's, see ``mesh.py``); its ``state.Position``."""
    from shufflepoint._core import state as _state

    along = checked_along(verify_ranks, rank, world_size, groups)
    collective, groups = along is not None, along or (None,)
    try:
        position = _state.validate(state, expected, strict=strict)
    except StateError as error:
        if not collective:
            raise
        agree_across_ranks(None, str(error), groups)
        raise  # not reached: agree_across_ranks raised for every rank
    if collective:
        agree_across_ranks(dict(state), None, groups)  # type: ignore[call-overload]
    return position


def agree_on_exclusion(added: Exclusion, rank: int, world_size: int, verify_ranks: bool,
                       groups: Groups | None) -> None:
    """Along the loader's ranks (its mesh's groups, or a matching default group), check that every rank passed
    the same indices (one ``all_reduce`` per group, as a state load checks); ValueError on every rank, naming
    the ranks' counts, when not."""
    along = checked_along(verify_ranks, rank, world_size, groups)
    if along is None or everyone_agrees({"excluded": added.to_state()}, None, along):
        return
    counts = gather_from_all((added.count, added.ranges()[:3]), along)
    shown = "; ".join(f"rank {r}: {count} indices, first ranges {first}" for r, (count, first) in enumerate(counts))
    raise ValueError(refusal(
        "exclude", Plain("different indices on the ranks"), "the same indices on every rank",
        "compute the indices identically everywhere, or broadcast them from rank 0, then call loader.exclude on "
        "every rank", why=f"{shown}; the state is the same on every rank, and so is what it excludes; nothing was "
        "excluded"))


def agree_on_weights(weights: Any, rank: int, world_size: int, verify_ranks: bool, groups: Groups | None) -> None:
    """Along the loader's ranks, check that every rank passed the same ``set_weights`` weights (one ``all_reduce``
    per group, as ``exclude`` does); ValueError on every rank, naming them, when not."""
    along = checked_along(verify_ranks, rank, world_size, groups)
    shown = {str(k): repr(v) for k, v in weights.items()} if isinstance(weights, dict) else \
        [repr(w) for w in weights] if isinstance(weights, (list, tuple)) else repr(weights)
    if along is None or everyone_agrees({"weights": shown}, None, along):
        return
    found = gather_from_all(shown, along)
    raise ValueError(refusal(
        "set_weights", Plain("different weights on the ranks"), "the same weights on every rank",
        "compute the weights identically everywhere (from losses all-reduced first), or broadcast them from rank 0",
        why="; ".join(f"rank {r}: {w}" for r, w in enumerate(found)) + "; the state is the same on every rank; "
        "nothing was changed"))
