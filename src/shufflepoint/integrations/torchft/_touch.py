"""Every place shufflepoint meets torchft, named and checked against the versions it was tested on.

TOUCH POINTS (torchft 0.2.0, ``torchft/manager.py``):

1. ``Manager.start_quorum()``: the loader starts each step's quorum itself, before dealing the step (so the
   training loop calls its optimizer's own ``zero_grad``, not ``torchft.Optimizer.zero_grad``, which would
   start a second quorum).
2. ``Manager.num_participants()`` and ``Manager.participating_rank()``: the step's participants and this
   group's rank among them (None while it heals, or as a spare under ``FIXED_WITH_SPARES``); both wait
   for the quorum.
3. ``Manager.current_step()``: the committed steps; it moves by one in ``should_commit()`` when a step commits.
   A healing group takes its peers' step during the quorum.
4. ``Manager.register_state_dict_fn(key, load, state)``: a healing group receives the peer's loader state; it is
   applied inside ``should_commit()``, after the step was dealt.
5. ``Manager._group_rank`` and ``Manager._group_world_size`` (private): the defaults for the loader's rank and
   ranks inside a replica group (torchft reads them from ``RANK`` and ``WORLD_SIZE``).

6. ``Manager._init_sync`` (private) and ``Manager.is_participating()``: with ``init_sync=True`` (the default) the
   first step (``max_step == 0``, torchft's ``force_recover`` in ``src/manager.rs``) trains only the primary
   group's data: every other group heals from it with a participating rank of its own and zeroed gradients.

7. ``torchft.DistributedSampler`` (``torchft/data.py``, a torch ``DistributedSampler``): a loader given one as
   ``sampler=`` reads its settings, not its order: ``num_replicas`` (torchft sets it to the ranks of all replica
   groups, group ranks x ``num_replica_groups``), ``shuffle``, ``seed``, ``drop_last``.

torchft versions outside ``TESTED_TORCHFT`` are refused unless ``SHUFFLEPOINT_TORCHFT_FORCE=1``.
"""

from __future__ import annotations

import os
from typing import Any

from shufflepoint._errors import Plain, refusal

TESTED_TORCHFT = ("0.2.0",)
"""The torchft releases the loader is tested on; importing the integration under another is refused unless
``SHUFFLEPOINT_TORCHFT_FORCE=1``."""


def torchft_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("torchft")
    except PackageNotFoundError as error:
        raise ImportError(refusal("shufflepoint.integrations.torchft", Plain("no torchft installed"),
                                  "torchft 0.2.0",
                                  "pip install torchft==0.2.0 (see docs/integrations.md, torchft)")) from error


def check_version(found: str | None = None) -> str:
    """The installed torchft's version, refused (``ImportError``) outside ``TESTED_TORCHFT``."""
    found = torchft_version() if found is None else found
    if found not in TESTED_TORCHFT and os.environ.get("SHUFFLEPOINT_TORCHFT_FORCE") != "1":
        raise ImportError(refusal(
            "torchft", Plain(f"version {found}"), f"one of {', '.join(TESTED_TORCHFT)}",
            f"pip install torchft=={TESTED_TORCHFT[-1]}, or set SHUFFLEPOINT_TORCHFT_FORCE=1 to try this version at "
            "your own risk",
            why="the loader reads the Manager's quorum, commits and state transfer (shufflepoint/integrations/"
            "torchft/_touch.py), whose meaning changes between torchft versions"))
    return found


def group_defaults(manager: Any) -> tuple[int, int]:
    """(group rank, group world size) the Manager was built with (TOUCH POINT 5)."""
    rank = getattr(manager, "_group_rank", None)  # private: torchft 0.2.0 has no public accessor (TOUCH POINT 5)
    world = getattr(manager, "_group_world_size", None)  # private: the same
    if isinstance(rank, int) and isinstance(world, int):
        return rank, world
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))


def init_sync_step(manager: Any) -> bool:
    """Whether the step just started is torchft's init-sync step (TOUCH POINT 6): only the primary group trains."""
    return bool(getattr(manager, "_init_sync", False)) and manager.current_step() == 0  # private: no public flag


def register(manager: Any, key: str, load: Any, state: Any) -> None:
    """TOUCH POINT 4."""
    manager.register_state_dict_fn(key, load, state)


def sampler_settings(sampler: Any) -> dict[str, Any]:
    """What a ``torchft.DistributedSampler`` says of the run (TOUCH POINT 7): its ranks over all replica groups,
    ``shuffle``, ``seed`` and ``drop_last``; TypeError naming ``sampler`` for anything else."""
    from torchft.data import DistributedSampler  # type: ignore[import-not-found]  # the integration's own extra

    if not isinstance(sampler, DistributedSampler):
        raise TypeError(refusal(
            "sampler", sampler, "a torchft.DistributedSampler (read for its settings: replica groups, shuffle, seed, "
            "drop_last)", "leave sampler out and pass replica_groups=, or pass torchft's DistributedSampler",
            why="the loader deals each step among the quorum itself; another sampler's order cannot be followed"))
    return {"ranks": sampler.num_replicas, "shuffle": sampler.shuffle, "seed": sampler.seed,
            "drop_last": sampler.drop_last}
