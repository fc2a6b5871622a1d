"""The sources of a ``Mixture``, checked before anything is mixed: map-style datasets with positive
weights, none with an order of its own but ``Packed``, and ``Packed`` rows only with ``Packed`` rows of
the same ``seq_len`` (so that weights in rows are weights in tokens)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from shufflepoint._core.capabilities import OwnOrder
from shufflepoint._errors import Plain, refusal

PACKED = "packed"  # the order of a Packed source: pass p, row r is its index p * len + r
_PAIRS = "pass Mixture([(dataset_a, 0.7), (dataset_b, 0.3)])"


def check_sources(sources: object) -> list[tuple[Any, float]]:
    if not isinstance(sources, Sequence) or isinstance(sources, (str, bytes)) or not sources:
        raise TypeError(refusal("sources", sources, "a non-empty list of (dataset, weight) pairs",
                                "pass Mixture([(dataset_a, 0.7), (dataset_b, 0.3)])"))
    checked = []
    for number, pair in enumerate(sources):
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise TypeError(refusal(f"sources[{number}]", pair, "a (dataset, weight) pair", _PAIRS))
        dataset, weight = pair
        if not hasattr(dataset, "__len__") or not hasattr(dataset, "__getitem__"):
            raise TypeError(refusal(f"sources[{number}]", Plain(f"a {type(dataset).__name__}"), "a map-style dataset "
                                    "(len and __getitem__)", "mix map-style datasets (a sharded corpus: "
                                    "shufflepoint.Shards)"))
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight) \
                or weight <= 0:
            raise ValueError(refusal(f"sources[{number}] weight", weight, "a finite number > 0",
                                     "give every source a weight > 0 (drop a source to leave it out)"))
        if len(dataset) == 0:
            raise ValueError(refusal(f"sources[{number}]", Plain("an empty dataset"), "at least one sample",
                                     "drop the empty source"))
        own = dataset.order_name if isinstance(dataset, OwnOrder) else None
        if own not in (None, PACKED):
            # LIMIT(mixture-source-own-order): docs/shards.md#limits
            raise TypeError(refusal(f"sources[{number}]", Plain(f"a {type(dataset).__name__} with its own {own!r} "
                                                                "order"), "a dataset without an order of its own "
                                    "(or a Packed)", "list its sources in this Mixture instead",
                                    why="mixing a dataset with its own order is not built"))
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
        raise TypeError(refusal("sources", Plain(f"{packed} Packed, {plain} not"), "every source Packed, or none",
                                "pack every source, with the same seq_len",
                                why="a Mixture mixes Packed rows only with other Packed rows"))
    first: dict[int, int] = {}
    for s, dataset in enumerate(sources):
        if id(dataset) in first:
            raise ValueError(refusal(f"sources[{s}]", Plain(f"the same Packed as sources[{first[id(dataset)]}]"),
                                     "a Packed of its own", "build one Packed per source (they may share the corpus)",
                                     why="a Packed serves one order"))
        first[id(dataset)] = s
    lengths = {s: dataset.seq_len for s, dataset in enumerate(sources)}
    if len(set(lengths.values())) > 1:
        shown = ", ".join(f"sources[{s}] {n}" for s, n in lengths.items())
        raise ValueError(refusal("seq_len", Plain(shown), "the same seq_len for every Packed source of a Mixture",
                                 "pack every source with one seq_len", why="a row is then the same number of tokens "
                                 "whichever source it comes from"))


def is_packed(dataset: Any) -> bool:
    return isinstance(dataset, OwnOrder) and dataset.order_name == PACKED
