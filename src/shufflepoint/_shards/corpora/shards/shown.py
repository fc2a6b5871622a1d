"""How a dataset shows itself in a ``repr``: cheaply (no I/O, no work that grows with its rows), so that a
debugger or a log line can print it at any time.

``shown(dataset)`` is shufflepoint's own repr for its datasets (``Shards``, ``Packed``, ``Mixture``) and
the type and length for any other (a list's own repr would print every sample); ``short(fingerprint)``
keeps a fingerprint's kind and its first hex digits, enough to tell two apart by eye.

>>> shown(list(range(1_000)))
'list of 1,000 rows'
>>> short("shards:0f3a9c1e5b7d2f4a6c8e0b1d3f5a7c9e")
"'shards:0f3a9c1e…'"
"""

from __future__ import annotations

from typing import Any

_DIGITS = 8


def shown(dataset: Any) -> str:
    """``repr(dataset)`` for shufflepoint's datasets, ``<type> of <len> rows`` for any other."""
    if type(dataset).__module__.startswith("shufflepoint."):
        return repr(dataset)
    return f"{type(dataset).__name__} of {len(dataset):,} rows"


def short(fingerprint: str) -> str:
    """A fingerprint's kind (``shards:``) and its first hex digits, quoted, with an ellipsis."""
    kind, colon, rest = fingerprint.partition(":")
    head = f"{kind}{colon}{rest[:_DIGITS]}" if colon else fingerprint[:_DIGITS]
    return repr(head + "…")
