"""``DataLoader``: the live loader (``shufflepoint._loading.live``) bound to a torchft ``Manager``."""

from __future__ import annotations

from typing import Any

from shufflepoint._errors import refusal
from shufflepoint._loading.live import LiveLoader, Quorum
from shufflepoint.integrations.torchft import _touch


class DataLoader(LiveLoader):
    """Each step's global batch dealt among the replica groups of torchft's quorum; the position moves on committed
    steps only, and a healing group takes its peer's position through the Manager's state transfer::

        loader = DataLoader(dataset, batch_size=64, replica_groups=NUM_REPLICA_GROUPS, seed=0)
        loader.follow(manager)                     # the state travels with the Manager's own
        for inputs, labels in loader:              # the loader starts each step's quorum
            optimizer.optim.zero_grad()            # not torchft's Optimizer.zero_grad: no second quorum
            ...
            optimizer.step()                       # should_commit(): the loader advances if it commits

    Args are ``shufflepoint._loading.live.LiveLoader``'s; ``group_rank`` and ``group_world_size`` default to the
    Manager's own (torchft's ``RANK`` and ``WORLD_SIZE``) where ``manager`` is given, else 0 and 1. torchft's own
    ``DistributedSampler`` may stand for ``replica_groups`` (the diff from torchft's example stays small): its
    settings are read, its per-group shards are not (each step is dealt among the quorum)::

        trainloader = DataLoader(trainset, batch_size=64, num_workers=2, sampler=sampler)

    Args:
        dataset: a map-style dataset.
        batch_size: samples per rank per step (DYNAMIC: the global batch is participants x group ranks x this).
        replica_groups: the most replica groups the job runs (torchft's ``num_replica_groups``); or ``sampler``.
        sampler: a ``torchft.DistributedSampler``, read for its settings: ``replica_groups`` (its ranks over the
            group size), ``shuffle``, ``seed`` and ``drop_last``. Refused where an argument given says otherwise.
        manager: the torchft ``Manager`` to follow (or ``follow(manager)`` later).
        group_rank: this process's rank in its replica group. Default: the Manager's.
        group_world_size: ranks per replica group. Default: the Manager's.
        **options: ``LiveLoader``'s keywords (``global_batch``, ``min_groups``, ``seed``, ``shuffle``,
            ``drop_last``, ``order``, ``deal``, ``dataset_fingerprint``, ``collate_fn``, ``prefetch``, ``num_workers``,
            ``prefetch_factor``, ``pin_memory``, ``transform``).
    """

    def __init__(self, dataset: Any, batch_size: int | None = None, *, replica_groups: int | None = None,
                 manager: Any = None, group_rank: int | None = None, group_world_size: int | None = None,
                 sampler: Any = None, **options: Any) -> None:
        rank, world = _touch.group_defaults(manager) if manager is not None else (0, 1)
        world = world if group_world_size is None else group_world_size
        if sampler is not None:
            replica_groups = _from_sampler(_touch.sampler_settings(sampler), world, replica_groups, options)
        if replica_groups is None:
            raise TypeError(refusal("replica_groups", None, "the most replica groups the job runs",
                                    "pass replica_groups=NUM_REPLICA_GROUPS, or torchft's sampler=sampler"))
        super().__init__(dataset, batch_size, replica_groups=replica_groups,
                         group_rank=rank if group_rank is None else group_rank, group_world_size=world, **options)
        if manager is not None:
            self.follow(manager)

    def quorum(self, manager: Any) -> tuple[int, int | None]:
        """The step's participants as torchft trains them: on the init-sync step only the primary group trains (it
        reads the step's one lot), the others heal and read nothing (``_touch.init_sync_step``)."""
        if _touch.init_sync_step(manager):
            manager.participating_rank()  # waits for the quorum, which sets the step and who heals
            if _touch.init_sync_step(manager):
                return 1, 0 if manager.is_participating() else None
        return manager.num_participants(), manager.participating_rank()

    def follow(self, manager: Quorum, register: Any = None) -> None:
        """Follow torchft's ``manager``: its quorums and commits, and its state transfer (the loader registers
        its state under ``"shufflepoint"``). Refused when the Manager's replica group has other ranks than this
        loader's."""
        rank, world = _touch.group_defaults(manager)
        if (rank, world) != (self.group_rank, self.sizing.group_world):
            field, found, wanted = (("group_world_size", self.sizing.group_world, world)
                                    if world != self.sizing.group_world else ("group_rank", self.group_rank, rank))
            raise ValueError(refusal(
                field, found, f"{wanted}, the Manager's (rank {rank} of {world} ranks per replica group)",
                f"pass manager= when the loader is built (its group_rank and group_world_size then default to the "
                f"Manager's), or pass {field}={wanted}",
                why=f"this loader deals as rank {self.group_rank} of {self.sizing.group_world} per replica group"))
        super().follow(manager, register or (lambda key, load, state: _touch.register(manager, key, load, state)))


def _from_sampler(settings: dict[str, Any], group_world: int, replica_groups: int | None,
                  options: dict[str, Any]) -> int:
    """``replica_groups`` from torchft's sampler (its ranks over ``group_world``), its shuffle, seed and drop_last
    set in ``options``; ValueError naming the argument that says otherwise (nothing built)."""
    ranks = settings["ranks"]
    groups, left = divmod(ranks, group_world)
    if left or not groups or replica_groups not in (None, groups):
        raise ValueError(refusal(
            "replica_groups" if replica_groups is not None else "group_world_size",
            replica_groups if replica_groups is not None else group_world,
            f"what the sampler says: {ranks} ranks over all replica groups, so replica_groups x group_world_size "
            f"= {ranks}", "pass the sampler's num_replica_groups (or leave replica_groups out) and the group's ranks",
            why="torchft's DistributedSampler was built for another job's shape"))
    for name in ("shuffle", "seed", "drop_last"):
        if name in options and options[name] != settings[name]:
            raise ValueError(refusal(name, options[name], f"the sampler's {name}={settings[name]!r}",
                                     f"leave {name} out (the sampler's is used) or build the sampler with it"))
        options[name] = settings[name]
    return int(groups)
