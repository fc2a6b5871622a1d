"""States of format versions 1-3 in version 4's shape: the one place that reads how older versions wrote
what version 4 keeps in fields of its own (``state.py`` validates the result like a version 4 state).

Version 1 (0.1, 0.2) had no ``deal`` and ``segments`` (it was always strided); version 2 (0.3) no
``steps``, ``history``, ``excluded``; version 3 (0.4) grew ``handed`` and ``excluded_at`` within it. Up to
version 3 the order's parameters were appended to a corpus's fingerprint by the loader::

    shards:<hash>:blocks=2048:mine                                  a Shards corpus, the user's "mine"
    mixture:<hash>|0:45f6188f01b5|30:a9129eebda1c:blocks=64:grid=6  a scheduled Mixture: phases, block, grid

and version 4 keeps ``shards:<hash>:mine`` / ``mixture:<hash>`` with ``shuffle_block``, ``grid`` and ``phases``.

A version 4 or 5 state of a loader with buckets whose keys' fingerprint is ``buckets:v1:...`` was written before
buckets padded their tail: it dropped each bucket's last samples whatever ``drop_last`` said, which is what
``drop_last=True`` reads today. It is read as such (``buckets:v2:...``, ``drop_last`` true in the state and in
every history leg), so it resumes exactly with ``drop_last=True``, and a loader with ``drop_last=False`` is
refused by name inside an epoch (``deals/buckets.py``) and pads from the next epoch on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shufflepoint._core.plan import STRIDED
from shufflepoint._core.state_fields import MAX_PARAMETER
from shufflepoint._order import ORDERS

OLDEST_VERSION = 1  # version 1: without deal and segments (always strided); version 2: without steps and history
NEWEST_UPGRADED = 3  # version 3: the order's parameters inside dataset_fingerprint
_BLOCK, _GRID = ":blocks=", ":grid="  # how versions 1-3 wrote the order's parameters into a corpus's fingerprint

def _digits(text: str) -> tuple[int | None, str]:
    """(the int ``text`` starts with, the rest), or (None, ``text``)."""
    rest = text.lstrip("0123456789")
    head = text[: len(text) - len(rest)]
    return (int(head), rest) if head else (None, text)


def _legacy_parameters(fingerprint: object, order: object) -> tuple[object, dict[str, Any]]:
    """A fingerprint as versions 1-3 wrote it, split into the dataset's identity and the order's parameters:
    a corpus's identity (a scheduled Mixture's followed by its phases, ``|start:hash`` each), then
    ``:blocks=N``, ``:grid=G`` and ``:`` the user's own string. Other fingerprints are the identity alone.

    >>> _legacy_parameters("mixture:0f3a|0:9c2e|30:77aa:blocks=64:grid=6:mine", "mixture")
    ('mixture:0f3a:mine', {'shuffle_block': 64, 'grid': 6, 'phases': [[0, '9c2e'], [30, '77aa']]})
    """
    none: dict[str, Any] = {"shuffle_block": None, "grid": None, "phases": []}
    if not isinstance(fingerprint, str) or order in ORDERS or _BLOCK not in fingerprint:
        return fingerprint, none  # map-style orders never had parameters appended
    corpus, _, rest = fingerprint.partition(_BLOCK)
    block, rest = _digits(rest)
    grid = None
    if rest.startswith(_GRID):
        grid, rest = _digits(rest[len(_GRID):])
    base, *written = corpus.split("|")
    phases = [_digits(phase) for phase in written]  # (start, ":hash")
    if block is None or (rest and not rest.startswith(":")) \
            or any(start is None or not digest.startswith(":") for start, digest in phases):
        return fingerprint, none  # not as a loader wrote it: left whole, the fingerprint check judges it
    return base + rest, {"shuffle_block": block, "grid": grid,
                         "phases": [[start, digest[1:]] for start, digest in phases]}


def upgraded(state: Mapping[str, Any]) -> dict[str, Any]:
    """A state of format version 1-3 in version 4's shape, its ``version`` kept: the fields added since
    as the older version meant them (``deal`` strided, nothing excluded or handed out), and the order's
    parameters parsed out of ``dataset_fingerprint`` (the one place that reads how versions 1-3 wrote
    them); unknown where the fingerprint held none (``shuffle_block`` None: see ``_current``). Anything
    else (a version 4 state, a damaged or foreign one) comes back as it is, for ``validate`` to judge.

    >>> old = {"version": 3, "order": "blocks", "dataset_fingerprint": "shards:0f3a:blocks=2048:mine"}
    >>> {k: v for k, v in upgraded(old).items() if k in ("dataset_fingerprint", "shuffle_block")}
    {'dataset_fingerprint': 'shards:0f3a:mine', 'shuffle_block': 2048}
    """
    found = _unpadded_buckets(dict(state))
    version = found.get("version")
    if isinstance(version, bool) or not isinstance(version, int) or not OLDEST_VERSION <= version <= NEWEST_UPGRADED:
        return found
    if version == 1:  # version 1 was always strided
        found.update(deal=STRIDED, segments=[])
    if version < 3:  # versions 1 and 2 excluded nothing
        found["excluded"] = []
    found.setdefault("handed", [])
    found.setdefault("excluded_at", [])
    found["ramp"] = None  # version 4 records a set_batch_size's size; older states do not say
    found["buckets"] = None  # version 4 may read a run with bucket keys; older versions had none
    found["dataset_fingerprint"], parameters = _legacy_parameters(found.get("dataset_fingerprint"), found.get("order"))
    found.update(parameters)
    return found


_UNPADDED, _PADDED = "buckets:v1:", "buckets:v2:"  # the bucket keys' fingerprint before and since padding


def _unpadded_buckets(found: dict[str, Any]) -> dict[str, Any]:
    """A state with bucket keys of v1 (no padding) read as the ``drop_last=True`` run it was (module docstring);
    any other state as it is. Fields of the wrong shape are left for ``validate`` to name.

    >>> old = {"buckets": "buckets:v1:3:0f3a", "drop_last": False, "history": [[0, 2, 8, 0], [9, 4, 8, 0, 1, []]]}
    >>> {k: v for k, v in _unpadded_buckets(old).items()}
    {'buckets': 'buckets:v2:3:0f3a', 'drop_last': True, 'history': [[0, 2, 8, 1], [9, 4, 8, 1, 1, []]]}
    """
    keys = found.get("buckets")
    if not (isinstance(keys, str) and keys.startswith(_UNPADDED)):
        return found
    found["buckets"] = _PADDED + keys[len(_UNPADDED):]
    found["drop_last"] = True
    history = found.get("history")
    if isinstance(history, list):
        found["history"] = [[*entry[:3], 1, *entry[4:]] if isinstance(entry, list) and len(entry) >= 4 else entry
                            for entry in history]
    return found


def recorded_parameter(state: object, name: str) -> int | None:
    """The order's parameter ``name`` (``shuffle_block``, ``grid``) a state of any version records, or None
    where it records none or no valid one (``validate`` then names it): how a resume reads back the
    settings the run began with, before it validates the state against them.

    >>> recorded_parameter({"version": 3, "order": "blocks", "dataset_fingerprint": "shards:0f3a:blocks=2048"},
    ...                    "shuffle_block")
    2048
    """
    value = upgraded(state).get(name) if isinstance(state, Mapping) else None
    valid = isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_PARAMETER
    return value if valid else None


def recorded_deal(state: object) -> object:
    """The deal a state of any version records (a version 1 state: ``strided``, the only deal then), or None
    where it is no state: what a resume reads the state's deal as, before it validates it.

    >>> recorded_deal({"version": 1}), recorded_deal({"version": 4, "deal": "spans"})
    ('strided', 'spans')
    """
    return upgraded(state).get("deal") if isinstance(state, Mapping) else None
