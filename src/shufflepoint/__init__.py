"""shufflepoint: exact, elastic, O(1) checkpoint/resume of the data order for distributed PyTorch.

The data order is a pure, seekable function of (seed, epoch, position); a loader's whole state is
a handful of integers that are the same on every rank.

A dataset of your own plugs in by offering any of five small protocols (``OwnOrder``, ``Identified``,
``Locatable``, ``ReadsBatches``, ``Prefetching``): docs/extending.md.
"""

from __future__ import annotations

from shufflepoint._core.capabilities import Identified, Locatable, OwnOrder, Prefetching, ReadsBatches
from shufflepoint._core.state import FIELDS as STATE_FIELDS
from shufflepoint._errors import HubError, ResumeWarning, SampleError, ShardError, StateError
from shufflepoint._loading.loader import DataLoader
from shufflepoint._loading.randomness import sample_rng, torch_generator
from shufflepoint._loading.sampler import ResumableSampler
from shufflepoint._media.images import DecodeImage
from shufflepoint._media.video import VideoClips
from shufflepoint._order import ORDERS, Permutation, permutation
from shufflepoint._shards.corpora.mixture.mixture import Mixture
from shufflepoint._shards.corpora.packed.packed import Packed
from shufflepoint._shards.corpora.shards.batch import collate
from shufflepoint._shards.corpora.shards.shards import Shards
from shufflepoint._version import __version__
from shufflepoint.integrations.accelerate import patch_accelerate, unpatch_accelerate

__all__ = [
    "ORDERS",
    "STATE_FIELDS",
    "DataLoader",
    "DecodeImage",
    "HubError",
    "Identified",
    "Locatable",
    "Mixture",
    "OwnOrder",
    "Packed",
    "Permutation",
    "Prefetching",
    "ReadsBatches",
    "ResumableSampler",
    "ResumeWarning",
    "SampleError",
    "ShardError",
    "Shards",
    "StateError",
    "VideoClips",
    "__version__",
    "collate",
    "patch_accelerate",
    "permutation",
    "sample_rng",
    "torch_generator",
    "unpatch_accelerate",
]
