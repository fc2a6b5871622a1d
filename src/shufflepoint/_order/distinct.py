"""``np.unique`` without its first call's import of ``numpy.ma``.

``np.unique`` imports ``numpy.ma`` the first time it runs (6 ms; and where the allocations it makes
reach the collector's threshold, a full garbage collection of torch's ~170k objects, 80 ms), which
lands in a restarted job's first batch: the orders and the readers group positions by block,
window, source, pass and shard with it. Sorting does the same work without the import.

Words: docs/glossary.md (position, block).
"""

from __future__ import annotations

import numpy as np


def distinct(values: np.ndarray) -> np.ndarray:
    """``np.unique(values)``: the values of a 1-D array sorted, each once."""
    ordered = np.sort(values, kind="stable")
    if not ordered.size:
        return ordered
    kept: np.ndarray = ordered[np.concatenate(([True], ordered[1:] != ordered[:-1]))]
    return kept


def distinct_inverse(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(values, return_inverse=True)`` of a 1-D array: (distinct values, where each value is in them)."""
    found = distinct(values)
    return found, np.searchsorted(found, values)


def in_first_seen_order(values: np.ndarray) -> np.ndarray:
    """The distinct values of a 1-D array in the order they first appear."""
    if not values.size:
        return values
    by_value = np.argsort(values, kind="stable")
    ordered = values[by_value]
    heads = np.concatenate(([True], ordered[1:] != ordered[:-1]))
    return values[np.sort(by_value[heads])]
