"""The ``torch`` order: exactly ``DistributedSampler``'s shuffle, so a run can switch without a jump.

``torch.randperm(n, generator=torch.Generator().manual_seed(seed + epoch))``, materialised once per
epoch (8 bytes per sample, O(n) time) and then read by position. Its output depends on torch's
implementation of ``randperm``, which is not promised stable across torch releases; the state
records the torch version and a load under another version raises a ``ResumeWarning``.
"""

from __future__ import annotations

import numpy as np

from shufflepoint._order.walking import table_inverse

NAME = "torch"
VERSION = 1
MAX_N = 2**40  # materialised: far beyond this, memory runs out first


class TorchRandpermOrder:
    name = NAME
    version = VERSION

    def __init__(self, n: int, seed: int, epoch: int) -> None:
        import torch

        self.n = n
        generator = torch.Generator().manual_seed(seed + epoch)
        self._perm = torch.randperm(n, generator=generator).numpy()
        self._inverse: np.ndarray | None = None

    def index(self, position: int) -> int:
        return int(self._perm[position])

    def take(self, positions: np.ndarray) -> np.ndarray:
        return self._perm[np.asarray(positions, dtype=np.int64)]

    def positions_of(self, indices: np.ndarray) -> np.ndarray:
        """The inverse of ``take``: each index's position (int64), from a table built once (O(n), as the
        order itself)."""
        if self._inverse is None:
            self._inverse = table_inverse(np.asarray(self._perm, dtype=np.int64))
        found: np.ndarray = self._inverse[np.asarray(indices, dtype=np.int64)]
        return found
