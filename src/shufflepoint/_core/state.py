"""The state: a versioned, flat dict of JSON values, the same on every rank. Written and read here.

Fields (format version 4, or 5 for a state holding an epoch folded after 64 world sizes: the same fields, and a
``segments`` or ``history`` start may end with the fold's ``[0, handed]``, ``_core/spans.py``; version 3,
written by 0.4, carried the order's parameters inside
``dataset_fingerprint``; version 2, written by 0.3, had neither ``steps`` nor ``history``, and version 1,
written by 0.1 and 0.2, had neither ``deal`` nor ``segments``: all still load, turned into version 4's
shape by ``older_states.upgraded``, see also ``legacy_history``):

=====================  ===========  ==========================================================
field                  type         meaning
=====================  ===========  ==========================================================
format                 str          always ``"shufflepoint"``
version                int          format version, 4 (5 with a folded epoch)
kind                   str          ``"loader"`` or ``"sampler"``: which object wrote it
seed                   int          the order's seed
epoch                  int          the epoch being read
cursor                 int          positions of the epoch's global stream handed out (0..n)
n                      int          dataset length
shuffle                bool         False means the identity order
order                  str          order algorithm (``feistel``, ``radix-feistel``, ``torch``, ``identity``, ...)
order_version          int          version of that algorithm
world_size             int          ranks when saved (informational: a new one is allowed)
batch_size             int          per-rank batch size when saved (informational, likewise)
drop_last              bool         tail policy when saved (informational, likewise)
torch_version          str or null  torch's version, recorded for the ``torch`` order only
dataset_fingerprint    str or null  the dataset's identity: the user's own string, ``auto:...``, or a corpus's
                                    content hash (with the user's string after it); never an order's parameter
deal                   str          who reads which positions: ``strided`` or ``spans``
segments               list         ``spans`` only: this epoch's ``[world_size, taken]`` pairs, one per
                                    world size it was read at, ``taken`` samples per rank (reset at
                                    each epoch; empty for ``strided``)
steps                  int          batches each rank received since the run began (epoch 0, batch 0)
history                list         the run's legs, one per change of layout or jump, as
                                    ``[step, W, B, D]`` or ``[step, W, B, D, epoch, start]``
                                    (``_core/history.py``); at most 33, the latest
excluded               list         dataset indices never served again (``loader.exclude``), as
                                    sorted ranges written ``[gap, length, gap, length, ...]``
                                    (``_core/exclusion.py``); at most 131,072 ranges; ``[]`` for none
handed                 list         ``spans``, samples excluded: ``[first_world_size, gap, length, ...]``, handed
                                    out before the epoch's latest exclusion (``_core/spanskips.py``); else ``[]``
excluded_at            list         the steps at which ``exclude()`` calls took effect, ascending: the first
                                    and the latest 31 (``which`` places steps before the first and from the
                                    latest on); ``[]`` when nothing is excluded or for a state written before it
shuffle_block          int or null  the block of a block order (``blocks``, a ``Mixture``'s or ``Packed``'s own);
                                    null for the other orders
grid                   int or null  the global batch a scheduled ``Mixture``'s phases follow (the run's first,
                                    adopted by every resume); null otherwise
phases                 list         a scheduled ``Mixture``'s phases as ``[start, hash]`` pairs, ascending
                                    (``Schedule.identities``): a resume may append phases, never change one
                                    that began; ``[]`` without a schedule. A phase ``set_weights`` added while
                                    the run trained is ``[start, hash, shares]``, its exact weights as
                                    fraction strings (``["3/4", "1/4"]``), so a resume rebuilds it
ramp                   int or null  the batch size ``set_batch_size`` set and the run still reads at (a resume
                                    built with another size is told so, ``ResumeWarning``); null otherwise
buckets                str or null  the fingerprint of the loader's bucket keys (``buckets=``, deal ``buckets``,
                                    whose ``segments`` are ``[batch_size, slots]`` pairs): a load with other
                                    keys, or none, is refused; null without buckets
=====================  ===========  ==========================================================

The key set never depends on progress (torch.distributed.checkpoint asks a fresh object for its
keys). Every field is checked on load; nothing is ``.get(key, default)``.

Words: docs/glossary.md (state, fingerprint, epoch, cursor).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Any

from shufflepoint._core.cut import Deal
from shufflepoint._core.deals import named, strided
from shufflepoint._core.exclusion import Exclusion
from shufflepoint._core.history import MAX_EPOCH, History, Place
from shufflepoint._core.older_states import NEWEST_UPGRADED, OLDEST_VERSION, upgraded
from shufflepoint._core.plan import Layout
from shufflepoint._core.segments import Pairs, is_folded
from shufflepoint._core.skips import UNBOUNDED_INDICES, Skip, check_record
from shufflepoint._core.spanskips import Handed
from shufflepoint._core.state_fields import DEALS as DEALS  # re-exported: the deals a state may name
from shufflepoint._core.state_fields import (
    MAX_INT,
    OrderParameters,
    check_buckets,
    check_deal,
    check_excluded,
    check_excluded_at,
    check_handed,
    check_history,
    check_order_parameters,
    check_segments_shape,
    fail,
    parameter_changes,
)
from shufflepoint._errors import DAMAGED, Plain, ResumeWarning, StateError, refusal

FORMAT = "shufflepoint"
CURRENT = NEWEST_UPGRADED + 1  # 4: the fields of today; older_states reads versions 1-3 into this shape
VERSION = CURRENT + 1  # 5, the newest read: version 4 plus the fold of an epoch's resizes (written only with one)
KINDS = ("loader", "sampler")
SKIPPED = "skipped"  # the record of skipped samples (_core/skips.py): a state holds it only once one was skipped
MAX_SEED = 2**64 - 1  # seeds span torch's full range; every other int fits an int64

_INT = "an int (not a bool)"
_SCHEMA: dict[str, tuple[tuple[type, ...], str]] = {
    "format": ((str,), "the string 'shufflepoint'"),
    "version": ((int,), _INT),
    "kind": ((str,), "'loader' or 'sampler'"),
    "seed": ((int,), _INT),
    "epoch": ((int,), _INT),
    "cursor": ((int,), _INT),
    "n": ((int,), _INT),
    "shuffle": ((bool,), "a bool"),
    "order": ((str,), "a string"),
    "order_version": ((int,), _INT),
    "world_size": ((int,), _INT),
    "batch_size": ((int,), _INT),
    "drop_last": ((bool,), "a bool"),
    "torch_version": ((str, type(None)), "a string or None"),
    "dataset_fingerprint": ((str, type(None)), "a string or None"),
    "deal": ((str,), "'strided' or 'spans'"),
    "segments": ((list,), "a list of [world_size, taken] pairs"),
    "steps": ((int,), _INT),
    "history": ((list,), "a list of [step, W, B, D] or [step, W, B, D, epoch, start] entries"),
    "excluded": ((list,), "a list [gap, length, ...] of excluded ranges"),
    "handed": ((list,), "a list [first_world_size, gap, length, ...] of handed-out ranges, or []"),
    "excluded_at": ((list,), "a list of the steps at which exclusions took effect, or []"),
    "shuffle_block": ((int, type(None)), "an int (the order's block) or None"),
    "grid": ((int, type(None)), "an int (the global batch a schedule follows) or None"),
    "phases": ((list,), "a list of a schedule's [start, hash] phases (a live one [start, hash, shares]), or []"),
    "ramp": ((int, type(None)), "an int (the batch size set_batch_size set) or None"),
    "buckets": ((str, type(None)), "a string (the bucket keys' fingerprint) or None"),
}
FIELDS: tuple[str, ...] = tuple(_SCHEMA)
"""The fields of a loader's or a sampler's ``state_dict()``, in the order written; docs/state-format.md
says what each holds (public as ``shufflepoint.STATE_FIELDS``)."""
_ADDED_IN = {"deal": 2, "segments": 2, "steps": 3, "history": 3, "excluded": 3, "handed": 3,
             "excluded_at": 3, "shuffle_block": 4, "grid": 4, "phases": 4,
             "ramp": 4, "buckets": 4}  # the version adding it
_FIELDS_OF = {version: tuple(f for f in FIELDS if _ADDED_IN.get(f, 1) <= version) for version in range(1, VERSION + 1)}
_OPTIONAL = {"handed", "excluded_at"}  # added within version 3 (required from 4): a state without handed handed
# nothing out before an exclusion; one without excluded_at does not say when its exclusions took effect (``which``
# then refuses them)
# Keys that identify states written by other libraries, to say so instead of "missing keys".
_FOREIGN = {
    "_num_yielded": "a torchdata StatefulDataLoader (or an Accelerate-prepared loader)",
    "_sampler_iter_yielded": "a torchdata StatefulDataLoader (or an Accelerate-prepared loader)",
    "_iteration": "an Accelerate-prepared loader",
    "yielded": "torchdata's StatefulDistributedSampler",
    "samples_yielded": "a torchdata BatchSampler",
}


@dataclass(frozen=True)
class Expected:
    """What the object being loaded was constructed with; a state must agree on these."""

    kind: str
    n: int
    seed: int
    shuffle: bool
    order: str
    order_version: int
    dataset_fingerprint: str | None = None
    # The dataset's account of a changed fingerprint (a sharded corpus names the changed shards).
    explain_fingerprint: Callable[[str], str] | None = None
    explain_length: Callable[[int], str | None] | None = None  # why n changed, where the dataset can say
    # The deal it reads with (its keys' fingerprint, the bucket deal's, is the one a state's ``buckets`` must name).
    deal: Deal = strided.DEAL
    # How shufflepoint 0.2 identified the same dataset (a corpus's index without shard versions):
    # a version-1 state carrying it matches, as 0.2 itself would have judged.
    legacy_fingerprint: str | None = None
    # The layout that will read on (None: not checked): a resize that cannot be recorded is refused.
    layout: Layout | None = None
    # The order's parameters (the block, a schedule's grid and phases) the state must record.
    parameters: OrderParameters = dataclass_field(default_factory=OrderParameters)
    # The first of a state's phases (saved phases, epoch, cursor, grid) the dataset's schedule changed before
    # the position reached, or None where it only appended phases after it (a Mixture's resume may).
    phases_changed: Callable[[list[list[Any]], int, int, int | None], int | None] | None = None
    # The dataset's account of another order_version of its own order (a Mixture built with or without a schedule).
    explain_order_version: Callable[[int], str | None] | None = None


@dataclass(frozen=True)
class Position:
    """Where a valid state stands: the epoch, the positions handed out, and the deal's history."""

    epoch: int
    cursor: int
    deal: Deal
    segments: Pairs
    steps: int
    history: History
    excluded: Exclusion | None = None  # None: nothing excluded
    handed: Handed | None = None  # spans with exclusions: what the epoch handed out before its latest one
    excluded_at: tuple[int, ...] = ()  # the steps the exclusions took effect at (the first and the latest 31)
    ramp: int | None = None  # the batch size set_batch_size set and the saved run read at
    skipped: tuple[Skip, ...] = ()  # the latest skipped samples (_core/skips.py)


def _check_shape(state: object) -> Mapping[str, Any]:
    if not isinstance(state, Mapping):
        hint = "; json.load a JSON file first" if isinstance(state, (str, bytes)) else ""
        raise StateError(refusal("state", Plain(type(state).__name__), "a dict as returned by state_dict()",
                                 f"pass what state_dict() returned{hint}"))
    keys = set(state)
    if "format" not in keys or state.get("format") != FORMAT:
        foreign = sorted({who for key, who in _FOREIGN.items() if key in keys})
        origin = f"it looks like a state of {foreign[0]}" if foreign else "this is not a shufflepoint state"
        found = state["format"] if "format" in keys else Plain(f"no 'format' key (keys: {sorted(map(str, keys))[:8]})")
        raise fail("format", found, repr(FORMAT), "load it into the object that wrote it, or start this loader fresh",
                   why=origin)
    version = state.get("version")
    if isinstance(version, bool) or not isinstance(version, int):
        raise fail("version", version, _INT, DAMAGED)
    if not OLDEST_VERSION <= version <= VERSION:
        newer = isinstance(version, int) and version > VERSION
        raise fail(
            "version", version, f"{OLDEST_VERSION}..{VERSION}",
            "it was written by a newer shufflepoint; upgrade shufflepoint to load it"
            if newer else "this format version is not known; the state is damaged or foreign",
        )
    fields = _FIELDS_OF[version]
    if version >= CURRENT:
        keys -= {SKIPPED}  # written only once a sample was skipped (checked in validate: _core/skips.py)
    missing = [f for f in fields if f not in keys and not (version == 3 and f in _OPTIONAL)]
    extra = sorted(str(k) for k in keys - set(fields))
    if missing:
        raise fail("(keys)", Plain(f"missing {missing}"), f"all of {list(fields)} (version {version})",
                   "the state is truncated or was edited; use another checkpoint")
    if extra:
        raise fail("(keys)", Plain(f"unknown {extra}"), f"exactly {list(fields)} (version {version})",
                   "the state was edited or comes from another program; use another checkpoint",
                   why=f"a version {version} state has no {extra}")
    state = upgraded(state)
    for field, (types, text) in _SCHEMA.items():
        if field not in state:  # steps and history before version 3: see legacy_history
            continue
        value = state[field]
        is_bool = isinstance(value, bool)
        if not isinstance(value, types) or (is_bool and bool not in types):
            raise fail(field, value, text, DAMAGED)
        highest = MAX_SEED if field == "seed" else MAX_INT
        if isinstance(value, int) and not is_bool and not 0 <= value <= highest:
            raise fail(field, value, f"an int in [0, {highest}]", DAMAGED)
    for field, why in (("epoch", " (the last epoch the orders support)"), ("steps", " (room to count on)")):
        if state.get(field, 0) > MAX_EPOCH:  # steps: the state written after the next batch must load too
            raise fail(field, state[field], f"an int in [0, {MAX_EPOCH}]{why}",
                       DAMAGED)
    check_segments_shape(state["segments"])
    if version < VERSION and _folded([], state.get("history")):  # in segments: check_deal names the pair
        raise fail("segments", Plain("an epoch folded after 64 world sizes"), f"no fold in a version {version} "
                   f"state (version {VERSION} records one)", DAMAGED)
    check_order_parameters(state)
    if state["ramp"] is not None and not 1 <= state["ramp"] <= 2**31:
        raise fail("ramp", state["ramp"], "a batch size in [1, 2**31] or None", DAMAGED)
    return state


def _folded(segments: list[Any], history: object) -> bool:
    """Whether an epoch's segments, or a history entry's start, hold a fold (written as version 5)."""
    starts = [entry[5] for entry in history if isinstance(entry, list) and len(entry) == 6
              and isinstance(entry[5], list)] if isinstance(history, list) else []
    return any(is_folded(pairs) for pairs in [segments, *starts]
               if all(isinstance(p, list) and len(p) == 2 for p in pairs))


def _current(state: object, expected: Expected) -> Mapping[str, Any]:
    """The state, checked, in the current format (``upgraded``): a 0.2 corpus fingerprint (no shard versions)
    taken as the same corpus when it matches 0.2's measure, and an older state whose fingerprint recorded no
    block (a dataset without an identity of its own) read in this object's block, unchecked as before."""
    written_as = state.get("version") if isinstance(state, Mapping) else None
    current = _check_shape(state)
    if written_as == OLDEST_VERSION and expected.legacy_fingerprint is not None \
            and current["dataset_fingerprint"] == expected.legacy_fingerprint:
        current = {**current, "dataset_fingerprint": expected.dataset_fingerprint}
    if written_as not in (CURRENT, VERSION) and current["shuffle_block"] is None:
        current = {**current, "shuffle_block": expected.parameters.shuffle_block}
    return current


def _fingerprint_changed(state: Mapping[str, Any], expected: Expected) -> bool:
    """Whether the dataset's fingerprint changed (the dataset's identity; the order's parameters are apart)."""
    found, current = state["dataset_fingerprint"], expected.dataset_fingerprint
    return found is not None and current is not None and found != current


def _warn_if_torch_changed(state: Mapping[str, Any]) -> None:
    """The ``torch`` order is torch.randperm's: another torch version may give another order."""
    if state["order"] != "torch":
        return
    import torch

    if state["torch_version"] != torch.__version__:
        warnings.warn(
            f"the 'torch' order was saved under torch {state['torch_version']} and is resumed under "
            f"torch {torch.__version__}: torch.randperm may differ between versions, so the order "
            "may not be the same. The default order (radix-feistel) does not depend on torch.",
            ResumeWarning, stacklevel=4,
        )


def _check_changed(state: Mapping[str, Any], expected: Expected, strict: bool) -> None:
    """A changed dataset fingerprint or order parameter is refused by name, or with ``strict=False``
    warned about (the saved positions then point at other samples)."""
    found_print, expected_print = state["dataset_fingerprint"], expected.dataset_fingerprint
    fingerprint_changed = _fingerprint_changed(state, expected)
    if fingerprint_changed and strict:
        why = expected.explain_fingerprint(found_print) if expected.explain_fingerprint else None
        raise fail("dataset_fingerprint", found_print, repr(expected_print),
                   "resume with the dataset the checkpoint was written with, or load with strict=False to accept "
                   "a changed one (a ResumeWarning: the positions then point at other samples)",
                   why=why or "the dataset is not the one the checkpoint was written with")
    changes = parameter_changes(state, expected.parameters, expected.kind, expected.phases_changed)
    if changes and strict:
        field_name, found, wanted, why, fix = changes[0]
        raise fail(field_name, found, wanted, f"{fix}, or load with strict=False to accept the change (a "
                   "ResumeWarning: the positions then point at other samples)", why=why)
    if fingerprint_changed:
        warnings.warn(
            f"the dataset changed since the checkpoint (fingerprint {found_print!r} -> {expected_print!r}); "
            "loaded anyway (strict=False): the positions now point at other samples than before.",
            ResumeWarning, stacklevel=4,
        )
    for field_name, found, wanted, *_ in changes:
        warnings.warn(
            f"the order changed since the checkpoint ({field_name} {found!r} -> {wanted}); loaded anyway "
            "(strict=False): the positions now point at other samples than before.", ResumeWarning, stacklevel=4,
        )


def validate(state: object, expected: Expected, *, strict: bool = True) -> Position:
    """Check a state against the loading object; return its position. Raises StateError.

    Emits ResumeWarning (after all checks pass) where the load is accepted but cannot be exact.
    ``strict=False`` turns a dataset-fingerprint or order-parameter mismatch into a ResumeWarning; nothing else.
    """
    state = _current(state, expected)
    if state["kind"] != expected.kind:
        raise fail("kind", state["kind"], repr(expected.kind),
                   f"load it into a {state['kind']}: a {state['kind']} state cannot restore a {expected.kind}")
    if state["n"] != expected.n:
        print_found = state["dataset_fingerprint"]
        why = expected.explain_length(state["n"]) if expected.explain_length else None
        why = why or (expected.explain_fingerprint(print_found)
                      if expected.explain_fingerprint and isinstance(print_found, str) else "")
        raise fail("n", state["n"], f"{expected.n} (len(dataset) now)",
                   "resume with the dataset the checkpoint was written with",
                   why=f"the dataset changed length since the checkpoint{': ' + why if why else ''}")
    if state["shuffle"] != expected.shuffle:
        raise fail("shuffle", state["shuffle"], f"{expected.shuffle!r} (what this {expected.kind} was built with)",
                   f"build the {expected.kind} with shuffle={state['shuffle']!r} to resume this run, or start fresh",
                   why="the constructor's value is not silently overridden")
    if state["order"] != expected.order:
        raise fail("order", state["order"], f"{expected.order!r} (what this {expected.kind} was built with)",
                   f"build the {expected.kind} with order={state['order']!r} to resume this run, or start fresh",
                   why="the constructor's value is not silently overridden")
    if state["order_version"] != expected.order_version:
        own = expected.explain_order_version(state["order_version"]) if expected.explain_order_version else None
        raise fail("order_version", state["order_version"], f"{expected.order_version} (this shufflepoint's "
                   f"{expected.order!r} order)", own or "resume with the shufflepoint version that wrote the state",
                   why=None if own else "that shufflepoint's order algorithm differs from this one's")
    if state["seed"] != expected.seed:
        raise fail("seed", state["seed"], f"{expected.seed!r} (what this {expected.kind} was built with)",
                   f"build the {expected.kind} with seed={state['seed']!r} to resume this run, or start fresh",
                   why="the constructor's value is not silently overridden")
    if state["cursor"] > state["n"]:
        raise fail("cursor", state["cursor"], f"an int in [0, n={state['n']}]", DAMAGED)
    deal = expected.deal
    check_buckets(state["buckets"], deal.keys_fingerprint, expected.kind)
    check_deal(state, deal, expected.kind)
    steps, history = check_history(state, deal, bool(state["excluded"]))
    _check_changed(state, expected, strict)
    _warn_if_torch_changed(state)
    bound = 2**63 if state["order"] in UNBOUNDED_INDICES else state["n"]
    skipped = check_record(state[SKIPPED], bound) if SKIPPED in state else ()
    return Position(state["epoch"], state["cursor"], deal, deal.segments(state["segments"]), steps, history,
                    check_excluded(state, expected.kind), check_handed(state, deal), check_excluded_at(state, steps),
                    state["ramp"], skipped)


def build(
    *, kind: str, seed: int, epoch: int, cursor: int, n: int, shuffle: bool, order: str,
    order_version: int, world_size: int, batch_size: int, drop_last: bool,
    dataset_fingerprint: str | None, deal: str | Deal = strided.DEAL, segments: Sequence[Sequence[int]] = (),
    steps: int = 0, history: History | None = None, excluded: list[int] | None = None,
    handed: list[int] | None = None, excluded_at: list[int] | None = None,
    parameters: OrderParameters | None = None, ramp: int | None = None, buckets: str | None = None,
    skipped: Sequence[Skip] = (),
) -> dict[str, Any]:
    """The state dict, every field in schema order. Without a ``history``, the run's history starts at
    ``steps`` from the state's own place (what is known of a state built by hand); without ``parameters``,
    the order has none (a map-style order)."""
    parameters, deal = parameters or OrderParameters(), named(deal) if isinstance(deal, str) else deal
    pairs = deal.segments(segments)
    if history is None:
        layout = Layout(n, world_size, batch_size, drop_last)
        history = History.begin(n, deal, layout, Place(epoch, cursor, pairs), steps)
    torch_version, entries = None, history.entries()
    if order == "torch":
        import torch

        torch_version = torch.__version__
    state = {
        "format": FORMAT, "version": VERSION if _folded(pairs.to_state(), entries) else CURRENT, "kind": kind,
        "seed": seed, "epoch": epoch,
        "cursor": cursor, "n": n, "shuffle": shuffle, "order": order, "order_version": order_version,
        "world_size": world_size, "batch_size": batch_size, "drop_last": drop_last,
        "torch_version": torch_version, "dataset_fingerprint": dataset_fingerprint,
        "deal": deal.name, "segments": pairs.to_state(),
        "steps": steps, "history": entries, "excluded": list(excluded or []),
        "handed": list(handed or []), "excluded_at": list(excluded_at or []),
        "shuffle_block": parameters.shuffle_block, "grid": parameters.grid,
        "phases": [[phase[0], phase[1], *([list(phase[2])] if len(phase) > 2 else [])]  # a live phase's shares
                   for phase in parameters.phases],
        "ramp": ramp, "buckets": buckets,
    }
    if skipped:
        state[SKIPPED] = [skip.to_state() for skip in skipped]
    return state
