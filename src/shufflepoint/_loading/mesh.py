"""Data-parallel groups: rank and world size from a ``DeviceMesh`` or a process group.

Under tensor, context or pipeline parallelism only the data-parallel ranks read different data; their
peers must receive the same batches. shufflepoint deals the epoch over the data-parallel ranks only::

    world of 4 processes, mesh (dp=2, tp=2)         mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))

               tp=0          tp=1
    dp=0    process 0     process 1      both: dp rank 0 of 2  -> identical batches, identical state
    dp=1    process 2     process 3      both: dp rank 1 of 2  -> identical batches, identical state

    DataLoader(dataset, batch_size, mesh=mesh["dp"])        # or mesh=mesh, mesh_dims="dp"

A mesh of several data-parallel dimensions (torchtitan's ``dp_replicate`` x ``dp_shard``) counts as one,
flattened row-major: dp rank = coordinate[0] * size[1] + coordinate[1]. The loader's state holds no
rank, so every process of the mesh holds the same state. At a load the agreement collective
(``agreement.py``) runs along each dimension of the mesh the loader was given, whose processes
certainly all hold a loader: ``mesh=device_mesh["dp"]`` compares the data-parallel ranks (a pipeline
stage that reads no data never joins a collective it would hang in); ``mesh=device_mesh,
mesh_dims="dp"`` compares every process of ``device_mesh``, tensor-parallel peers too.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from shufflepoint._errors import Plain, refusal
from shufflepoint._order import check_int

# Dimension names that say "model parallel": their peers must get the same data, so a mesh that
# carries one of them is refused unless the caller names the data-parallel dimensions (mesh_dims=).
_NOT_DATA_PARALLEL = frozenset({"tp", "cp", "pp", "ep", "etp", "sp", "tensor", "context", "pipeline", "expert"})


class DataParallel(NamedTuple):
    """This process's place among the data-parallel ranks.

    ``groups`` are the process groups the rank-agreement collective runs along, one per mesh
    dimension; ``None`` means the default process group (when it is the one the loader deals over).
    """

    world_size: int
    rank: int
    groups: tuple[Any, ...] | None = None


def _mesh_dims(names: tuple[str, ...] | None, mesh_dims: str | tuple[str, ...] | list[str]) -> tuple[str, ...]:
    wanted = (mesh_dims,) if isinstance(mesh_dims, str) else tuple(mesh_dims)
    if not wanted or not all(isinstance(name, str) for name in wanted):
        raise TypeError(refusal("mesh_dims", mesh_dims, "a dimension name or a tuple of names",
                                "pass mesh_dims='dp' or a tuple of the data-parallel dimensions"))
    missing = [name for name in wanted if name not in (names or ())]
    if missing:
        raise ValueError(refusal(
            "mesh_dims", Plain(f"{', '.join(map(repr, missing))}, not a dimension of the mesh (its dimensions: "
                               f"{list(names) if names else 'without names'})"),
            "the names of its data-parallel dimensions",
            f"build the mesh with mesh_dim_names=(...), or pass mesh_dims= one of {list(names or ())}"))
    return wanted


def _refuse_model_parallel(names: tuple[str, ...] | None) -> None:
    for name in names or ():
        if set(name.lower().split("_")) & _NOT_DATA_PARALLEL:
            raise ValueError(refusal(
                "mesh", Plain(f"a dimension named {name!r} (dimensions {list(names or ())})"),
                "a mesh whose dimensions are all data-parallel", "pass mesh=device_mesh['dp'], or mesh=device_mesh, "
                "mesh_dims='dp' (the data-parallel dimension names; naming them overrides this check)",
                why="it reads as tensor/context/pipeline/expert parallel: its peers must receive the same batches"))


def from_mesh(mesh: Any, mesh_dims: str | tuple[str, ...] | list[str] | None) -> DataParallel:
    """The data-parallel rank and world size of a ``DeviceMesh`` (all of its dimensions, or ``mesh_dims``)."""
    from torch.distributed.device_mesh import DeviceMesh

    if not isinstance(mesh, DeviceMesh):
        raise TypeError(refusal("mesh", Plain(type(mesh).__name__), "a torch.distributed DeviceMesh or None",
                                "pass mesh=device_mesh['dp'], or leave it unset"))
    names = tuple(mesh.mesh_dim_names) if mesh.mesh_dim_names else None
    whole = mesh  # every process of it builds this loader: the agreement may run along all its dimensions
    if mesh_dims is not None:
        mesh = mesh[_mesh_dims(names, mesh_dims)]
    else:
        _refuse_model_parallel(names)
    coordinate = mesh.get_coordinate()
    if coordinate is None:
        raise ValueError(refusal(
            "mesh", Plain(f"a mesh without this process (global rank {_global_rank()})"),
            "a mesh that holds this process", "pass the mesh only on the processes it holds, or the data-parallel "
            "slice of the mesh this process belongs to", why=f"the mesh is {mesh}"))
    rank = 0
    for size, index in zip(mesh.shape, coordinate, strict=True):
        rank = rank * size + index
    groups = tuple(whole.get_group(dim) for dim in range(whole.ndim))
    return DataParallel(int(mesh.size()), int(rank), groups)


def from_process_group(group: Any) -> DataParallel:
    """The rank and world size of this process in ``group``; refused when it is not a member."""
    import torch.distributed as dist

    outside = getattr(getattr(dist, "GroupMember", None), "NON_GROUP_MEMBER", None)  # new_group's answer to others
    if dist.is_available() and not isinstance(group, dist.ProcessGroup) and (outside is None or group != outside):
        raise TypeError(refusal("process_group", Plain(type(group).__name__), "a torch.distributed ProcessGroup "
                                "or None", "pass torch.distributed.new_group(ranks), or leave it unset"))
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError(refusal("process_group", Plain("a group"), "torch.distributed initialised first",
                                   "call torch.distributed.init_process_group(...) first"))
    rank = dist.get_rank(group)
    if rank < 0:
        raise ValueError(refusal(
            "process_group", Plain(f"a group this process is not a member of (global rank {dist.get_rank()})"),
            "the data-parallel group this process belongs to", "pass the group returned by new_group(...) for this "
            "rank's own data-parallel ranks (every process builds every group, and keeps the one it is in)"))
    return DataParallel(int(dist.get_world_size(group)), int(rank), (group,))


def _global_rank() -> int:
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def resolve_world(world_size: int | None, rank: int | None) -> tuple[int, int]:
    """(world_size, rank): given values, else the initialised process group's, else (1, 0)."""
    import torch.distributed as dist

    initialised = dist.is_available() and dist.is_initialized()
    if world_size is None:
        world_size = dist.get_world_size() if initialised else 1
    if rank is None:
        rank = dist.get_rank() if initialised else 0
    check_int("world_size", world_size, 1, 2**31)
    check_int("rank", rank, 0, 2**31)
    if rank >= world_size:
        raise ValueError(refusal("rank", rank, f"an int in [0, world_size={world_size})",
                                 "pass this process's rank among the loader's ranks"))
    return int(world_size), int(rank)


def resolve_data_parallel(
    world_size: int | None, rank: int | None, *, mesh: Any = None, process_group: Any = None,
    mesh_dims: str | tuple[str, ...] | list[str] | None = None, names: tuple[str, str] = ("world_size", "rank"),
) -> DataParallel:
    """One of: ``mesh`` (a ``DeviceMesh``), ``process_group``, explicit ``world_size``/``rank``, or the
    initialised default group (else one process). ``names`` are the caller's argument names."""
    given = [name for name, value in (("mesh", mesh), ("process_group", process_group),
                                      (names[0], world_size), (names[1], rank)) if value is not None]
    if mesh_dims is not None and mesh is None:
        raise ValueError(refusal("mesh_dims", mesh_dims, "None without a mesh", "pass mesh=device_mesh with it"))
    if (mesh is not None or process_group is not None) and len(given) > 1:
        raise ValueError(refusal(' and '.join(given), Plain(f"{len(given)} sources of rank and world size"), "one",
                                 "pass mesh= (or process_group=) alone; the data-parallel rank and size come from it"))
    if mesh is not None:
        return from_mesh(mesh, mesh_dims)
    if process_group is not None:
        return from_process_group(process_group)
    world_size, rank = resolve_world(world_size, rank)
    return DataParallel(world_size, rank)


def sampler_world(num_replicas: int | None, rank: int | None, mesh: Any, process_group: Any) -> DataParallel:
    """``resolve_data_parallel`` for ``ResumableSampler``, whose world size is ``num_replicas``."""
    return resolve_data_parallel(num_replicas, rank, mesh=mesh, process_group=process_group,
                                 names=("num_replicas", "rank"))
