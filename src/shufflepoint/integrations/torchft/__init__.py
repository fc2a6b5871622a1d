"""shufflepoint under torchft (0.2.0): a run that heals without restarting trains every sample once.

torchft keeps a job alive while replica groups fail: the others go on, and a failed group heals from a peer and
rejoins. Its own ``DistributedSampler`` shards the data per group and is lossy by its own account. ``DataLoader``
here deals each step's global batch among that step's participants (``Manager.num_participants()``,
``participating_rank()``), splits it inside a group by rank, advances only on committed steps, and travels to a
rejoining group through ``Manager.register_state_dict_fn``. See docs/integrations.md (torchft) and
examples/torchft_train_ddp.py.

Modules: ``_touch`` (every touch point on torchft, and the version check at import), ``_loader`` (the loader).

Words: docs/glossary.md (participant, lot, membership change, commit, state).
"""

from shufflepoint.integrations.torchft._touch import TESTED_TORCHFT, check_version

check_version()

from shufflepoint.integrations.torchft._loader import DataLoader  # noqa: E402

__all__ = ["TESTED_TORCHFT", "DataLoader", "check_version"]
