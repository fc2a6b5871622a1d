"""The ``identity`` order: position i is sample i. What ``shuffle=False`` uses."""

from __future__ import annotations

import numpy as np

NAME = "identity"
VERSION = 1
MAX_N = 2**62


class IdentityOrder:
    name = NAME
    version = VERSION

    def __init__(self, n: int, seed: int, epoch: int) -> None:
        self.n = n

    def index(self, position: int) -> int:
        return position

    def take(self, positions: np.ndarray) -> np.ndarray:
        return np.array(positions, dtype=np.int64, copy=True)

    def positions_of(self, indices: np.ndarray) -> np.ndarray:
        """The inverse of ``take``: each index's position (int64)."""
        return np.array(indices, dtype=np.int64, copy=True)
