"""A token column of a ``Shards`` corpus read as arrays, shard by shard, no Python int per token.

What ``Packed`` and the token counts read a ``Shards`` with (its hooks' ``ReadsIds``, ``ReadsIdsAscending``,
``ReadsIdSpansAscending``, ``_core/capabilities.py``). Each function takes the rows asked (their shards and
their rows in them) and ``open(shard)``, the shard opened in this process; it returns None where a shard's
reader holds no such arrays (``TakesIds``: a Parquet list of integers without nulls; JSON Lines holds none).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import numpy as np

from shufflepoint._core.capabilities import offered
from shufflepoint._shards.readers.base import TakesIds

Open = Callable[[int], Any]  # shard -> the shard opened in this process


def _takes(opened: Any) -> TakesIds | None:
    return cast(TakesIds, opened) if offered(opened, TakesIds) else None


def take_ids(open_shard: Open, shards: np.ndarray, rows: np.ndarray, column: str) -> list[np.ndarray] | None:
    """Each row's ``column`` as a 1-D integer array, rows in any order (views of the decoded group)."""
    places: dict[int, list[int]] = {}  # a few documents per shard: grouped in Python, not numpy
    for place, shard in enumerate(shards.tolist()):
        places.setdefault(shard, []).append(place)
    listed = rows.tolist()
    found: list[np.ndarray] = [np.empty(0)] * shards.size
    for shard, where in places.items():
        takes = _takes(open_shard(shard))
        part = takes.take_ids([listed[p] for p in where], column) if takes is not None else None
        if part is None:
            return None
        for place, ids in zip(where, part, strict=True):
            found[place] = ids
    return found


def take_ids_ascending(open_shard: Open, shards: np.ndarray, rows: np.ndarray,
                       column: str) -> list[np.ndarray] | None:
    """``take_ids`` for rows in ascending order, many at once (a window of ``Packed``'s token stream,
    thousands of documents): grouped by shard with numpy, then by decoded group."""
    found: list[np.ndarray] = []
    for where in np.split(np.arange(shards.size), np.flatnonzero(np.diff(shards)) + 1):
        if not where.size:
            continue
        takes = _takes(open_shard(int(shards[where[0]])))
        part = takes.take_ids_ascending(rows[where], column) if takes is not None else None
        if part is None:
            return None
        found += part
    return found


def take_id_spans_ascending(open_shard: Open, shards: np.ndarray, rows: np.ndarray, column: str,
                            ) -> tuple[list[np.ndarray], np.ndarray, np.ndarray, np.ndarray] | None:
    """``take_ids_ascending`` without an array per row: ``(arrays, source, starts, stops)``, row k's ids
    being ``arrays[source[k]][starts[k]:stops[k]]`` (the decoded groups' values, read-only). What
    ``Packed``'s token windows are built from: a few numpy calls for thousands of documents."""
    arrays: list[np.ndarray] = []
    counts: list[int] = []
    starts: list[np.ndarray] = []
    stops: list[np.ndarray] = []
    bounds = [0, *(np.flatnonzero(shards[1:] != shards[:-1]) + 1).tolist(), shards.size]
    for first, last in zip(bounds[:-1], bounds[1:], strict=True):
        if first == last:
            continue
        takes = _takes(open_shard(int(shards[first])))
        part = takes.take_id_spans_ascending(rows[first:last], column) if takes is not None else None
        if part is None:
            return None
        for values, opens, closes in part:
            arrays.append(values)
            counts.append(int(opens.size))
            starts.append(opens)
            stops.append(closes)
    if not arrays:
        empty = np.empty(0, np.int64)
        return [], empty, empty, empty
    source = np.repeat(np.arange(len(arrays), dtype=np.int64), counts)
    return arrays, source, np.concatenate(starts), np.concatenate(stops)
