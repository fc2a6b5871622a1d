"""Every place shufflepoint meets Ray (and the one place it meets torch's iterator), named and checked.

TOUCH POINTS (Ray 2.60.0, torch 2.13):

1. ``ray.is_initialized()``, ``ray.cluster_resources()``: a connected cluster, and what it holds, checked
   before any actor is asked for.
2. ``ray.remote(cls).options(num_cpus=..., **actor_options).remote(...)``: the decode actors; ``ray.put`` ships
   the dataset as served once, ``ray.get``/``ray.wait`` take results, ``ray.kill`` retires an actor.
3. The errors that mean "this actor or its result is gone, compute it elsewhere":
   ``ray.exceptions.RayActorError`` (``ActorDiedError``), ``ActorUnavailableError``, ``ObjectLostError`` (its
   node died after the batch was made) and ``WorkerCrashedError``. Any other exception is the batch's own.
4. ``torch.utils.data.DataLoader._get_iterator()``: the method torch's ``__iter__`` calls for the batches of a
   pass (``num_workers=0``); the Ray loader returns its own iterator there, and ``BatchSampler`` (the loader's
   ``batch_sampler``) is what it reads the batches' indices from. ``torch.utils.data._utils.pin_memory`` pins.

Ray versions outside ``TESTED_RAY`` are refused unless ``SHUFFLEPOINT_RAY_FORCE=1``.
"""

from __future__ import annotations

import os
from typing import Any

from shufflepoint._errors import Plain, refusal

TESTED_RAY = ("2.60.0",)
"""The Ray releases the decode pool is tested on; others are refused unless ``SHUFFLEPOINT_RAY_FORCE=1``."""


def ray_module() -> Any:
    """``import ray``, refused with the fix when it is missing."""
    try:
        import ray
    except ImportError as error:
        raise ImportError(refusal("shufflepoint.integrations.ray", Plain("no ray installed"), "ray 2.60",
                                  "pip install 'shufflepoint[ray]'")) from error
    return ray


def check_version(found: str | None = None) -> str:
    """The installed Ray's version, refused when it was not tested (``SHUFFLEPOINT_RAY_FORCE=1`` accepts it)."""
    found = found if found is not None else ray_module().__version__
    if found not in TESTED_RAY and os.environ.get("SHUFFLEPOINT_RAY_FORCE") != "1":
        raise ImportError(refusal("ray", found, "one of " + ", ".join(TESTED_RAY),
                                  "pip install 'shufflepoint[ray]', or set SHUFFLEPOINT_RAY_FORCE=1 to try it",
                                  why="the decode pool relies on Ray's actor errors and object store (_touch.py)"))
    return found


def lost_errors() -> tuple[type[BaseException], ...]:
    """The errors after which a batch is computed again on another actor: its actor, worker or result is gone."""
    exceptions = ray_module().exceptions
    return (exceptions.RayActorError, exceptions.ActorUnavailableError, exceptions.ObjectLostError,
            exceptions.WorkerCrashedError)


def connected_cpus(actors: int, cpus: float, actor_options: dict[str, Any]) -> float:
    """The cluster's CPUs, once it is known to be connected and able to place ``actors`` of ``cpus`` each."""
    ray = ray_module()
    if not ray.is_initialized():
        raise RuntimeError(refusal(
            "shufflepoint.integrations.ray", Plain("no Ray cluster connected in this process"),
            "ray.init(...) before the loader's first batch",
            "call ray.init(address='auto') (torchrun beside a cluster: RAY_ADDRESS or the head's address), "
            "or build the loader inside a Ray Train worker, where Ray is connected"))
    resources = ray.cluster_resources()
    total = float(resources.get("CPU", 0.0))
    if total < actors * cpus:
        raise RuntimeError(refusal(
            "decode_actors", actors, f"at most {int(total // cpus) if cpus else actors} actors of {cpus} CPUs: "
            f"the cluster has {total:g} CPUs",
            "add nodes (ray start --address=...), or pass fewer decode_actors or a smaller decode_cpus",
            why="an actor Ray cannot place waits forever, and the first batch with it"))
    for name, amount in (actor_options.get("resources") or {}).items():
        if float(resources.get(name, 0.0)) < actors * float(amount):
            raise RuntimeError(refusal(
                f"actor_options['resources'][{name!r}]", amount,
                f"{actors} x {amount} of {name!r}: the cluster has {resources.get(name, 0.0):g}",
                f"start nodes with --resources='{{\"{name}\": ...}}', or pass fewer decode_actors"))
    return total


def pin(batch: Any) -> Any:
    """The batch in page-locked memory, as torch's ``pin_memory=True`` leaves it; as it is where no accelerator
    is (torch's loader then warns and pins nothing too)."""
    import torch
    from torch.utils.data._utils.pin_memory import pin_memory

    if not torch.accelerator.is_available():
        return batch
    return pin_memory(batch)  # type: ignore[no-untyped-call]
