"""The sources of a ``Mixture``, checked before anything is mixed: map-style datasets with positive
weights, none with an order of its own but ``Packed``, and ``Packed`` rows only with ``Packed`` rows of
the same ``seq_len`` (so that weights in rows are weights in tokens)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from shufflepoint._core.capabilities import OwnOrder

PACKED = "packed"  # the order of a Packed source: pass p, row r is its index p * len + r


def check_sources(sources: object) -> list[tuple[Any, float]]:
    if not isinstance(sources, Sequence) or isinstance(sources, (str, bytes)) or not sources:
        raise TypeError(f"sources: found {sources!r}, expected a non-empty list of (dataset, weight) pairs")
    checked = []
    for number, pair in enumerate(sources):
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise TypeError(f"sources[{number}]: found {pair!r}, expected a (dataset, weight) pair")
        dataset, weight = pair
        if not hasattr(dataset, "__len__") or not hasattr(dataset, "__getitem__"):
            raise TypeError(f"sources[{number}]: found a {type(dataset).__name__}, expected a map-style dataset")
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight) \
                or weight <= 0:
            raise ValueError(f"sources[{number}] weight: found {weight!r}, expected a finite number > 0")
        if len(dataset) == 0:
            raise ValueError(f"sources[{number}]: the dataset is empty")
        own = dataset.order_name if isinstance(dataset, OwnOrder) else None
        if own not in (None, PACKED):
            raise TypeError(f"sources[{number}]: a {type(dataset).__name__} has its own {own!r} order; mixing it "
                            "is not built (list its sources in this Mixture instead)")
        checked.append((dataset, float(weight)))
    check_packed([dataset for dataset, _ in checked])
    return checked


def check_packed(sources: list[Any]) -> None:
    """Packed sources mix only with Packed sources of the same ``seq_len``: every row then holds the
    same number of tokens, so weights in rows are weights in tokens."""
    packed = [s for s, dataset in enumerate(sources) if is_packed(dataset)]
    if not packed:
        return
    if len(packed) != len(sources):
        plain = [s for s in range(len(sources)) if s not in packed]
        raise TypeError(f"sources: {packed} are Packed, {plain} are not; a Mixture mixes Packed rows only with "
                        "other Packed rows (pack every source, with the same seq_len)")
    first: dict[int, int] = {}
    for s, dataset in enumerate(sources):
        if id(dataset) in first:
            raise ValueError(f"sources[{s}]: the same Packed as sources[{first[id(dataset)]}]; a Packed serves one "
                             "order, so build one Packed per source (they may share the corpus)")
        first[id(dataset)] = s
    lengths = {s: dataset.seq_len for s, dataset in enumerate(sources)}
    if len(set(lengths.values())) > 1:
        shown = ", ".join(f"sources[{s}] {n}" for s, n in lengths.items())
        raise ValueError(f"seq_len: found {shown}; every Packed source of a Mixture needs the same seq_len, so "
                         "that a row is the same number of tokens whichever source it comes from")


def is_packed(dataset: Any) -> bool:
    return isinstance(dataset, OwnOrder) and dataset.order_name == PACKED
