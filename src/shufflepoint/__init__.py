"""shufflepoint: exact, elastic, O(1) checkpoint/resume of the data order for distributed PyTorch.

The data order is a pure, seekable function of (seed, epoch, position); a loader's whole state is
a handful of integers that are the same on every rank.
"""

from __future__ import annotations

from shufflepoint._errors import ResumeWarning, StateError
from shufflepoint.integrations.accelerate import patch_accelerate, unpatch_accelerate

__version__ = "0.1.0"

__all__ = [
    "ResumeWarning",
    "StateError",
    "__version__",
    "patch_accelerate",
    "unpatch_accelerate",
]
