"""shufflepoint's batches decoded on a Ray cluster, in exact order: ``RayDataLoader`` (Ray 2.60).

A batch is a pure function of (seed, epoch, position), and each sample's randomness is keyed by its own
index, so any machine computes any batch to the same bytes. ``RayDataLoader`` is a ``shufflepoint.DataLoader``
whose reading, ``transform`` and ``collate`` run in a pool of Ray actors (CPU-only nodes, or spare cores);
results come back through Ray's object store in order, ``window`` in flight. The state is still what the
loop received: it resumes exactly on any world size, and a lost actor's batches are computed again
elsewhere with the same bytes. The trainer runs under Ray Train or under torchrun beside a cluster::

    from shufflepoint.integrations.ray import RayDataLoader

    ray.init(address="auto")
    loader = RayDataLoader(corpus, batch_size=32, seed=1234, transform=shufflepoint.DecodeImage(224),
                           decode_actors=8)

Modules: ``_touch`` (every touch point on Ray, the version check), ``_reader`` (the actor), ``_pool`` (the
actors and the tickets), ``_loader`` (the loader and its iterator). See docs/ray.md, "Decode on a Ray pool".

Words: docs/glossary.md (decode pool, ticket, state, rank, world size).
"""

from shufflepoint.integrations.ray._loader import RayDataLoader
from shufflepoint.integrations.ray._pool import DecodePool, PoolStats
from shufflepoint.integrations.ray._touch import TESTED_RAY, check_version

__all__ = ["TESTED_RAY", "DecodePool", "PoolStats", "RayDataLoader", "check_version"]
