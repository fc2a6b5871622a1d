"""The fields that place a state in the run, checked against each other: the deal and this epoch's
``segments``, the run's ``history`` and ``steps``, the ``excluded`` set and what was ``handed`` out
before an exclusion, and the order's parameters (``shuffle_block``, ``grid``, ``phases``). ``state.validate``
calls these once the shape and the types are checked, with what the loading object was built with."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from shufflepoint._core import spans as _spans
from shufflepoint._core.cut import Deal
from shufflepoint._core.deals import NAMES
from shufflepoint._core.exclusion import Exclusion
from shufflepoint._core.history import History, Place
from shufflepoint._core.plan import Layout
from shufflepoint._core.segments import is_folded
from shufflepoint._core.spanskips import Handed
from shufflepoint._errors import DAMAGED, Plain, Refused, StateError, field_error, shown

MAX_INT = 2**63 - 1
MAX_PARAMETER = 2**62  # a block or a grid: run positions stay int64
DEALS: tuple[str, ...] = NAMES  # the deals a state may name


def fail(field: str, found: object, expected: str, fix: str, *, why: str | None = None) -> StateError:
    return field_error(field, found, expected, fix, why=why)


def check_segments_shape(segments: list[Any]) -> None:
    if len(segments) > _spans.MAX_SEGMENTS + is_folded(segments):
        raise fail("segments", Plain(f"{len(segments)} segments"), f"at most {_spans.MAX_SEGMENTS} world sizes in one "
                   "epoch and its fold", DAMAGED)
    for number, pair in enumerate(segments):
        if not (isinstance(pair, list) and len(pair) == 2
                and all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_INT for v in pair)):
            raise fail(f"segments[{number}]", pair, "a [world_size, taken] pair of ints >= 0",
                       DAMAGED)


def check_deal(state: Mapping[str, Any], expected: Deal, kind: str) -> None:
    """The layout is sane, the deal is the ``expected`` one (what this ``kind`` of object reads with), and
    the state's position is one of that deal (its ``check_state``: the segments replay to the cursor)."""
    for field in ("world_size", "batch_size"):
        if not 1 <= state[field] <= 2**31:
            raise fail(field, state[field], "an int in [1, 2**31]", DAMAGED)
    deal = state["deal"]
    if deal not in DEALS:
        raise fail("deal", deal, " or ".join(map(repr, DEALS)), "the state is damaged or from a newer "
                   "shufflepoint; use another checkpoint, or upgrade shufflepoint")
    if deal != expected.name:
        raise fail("deal", deal, f"{expected.name!r} (what this {kind} was built with)",
                   f"build the {kind} with deal={deal!r} to resume this run, or start fresh",
                   why="the constructor's value is not silently overridden")
    expected.check_state(state)


def legacy_history(state: Mapping[str, Any], deal: Deal, layout: Layout, start: Place) -> tuple[int, History]:
    """(steps, history) for a state written before version 3, which recorded neither: the steps are
    counted as if the saved layout had read the whole run, and the history starts there (earlier
    steps are not placed)."""
    per_epoch = -(-deal.cut(layout, 0).samples_per_rank() // layout.batch_size)
    left = -(-start.cut(layout, deal).samples_per_rank() // layout.batch_size)
    steps = state["epoch"] * per_epoch + max(per_epoch - left, 0)
    return steps, History.begin(state["n"], deal, layout, start, steps)


def check_buckets(found: str | None, expected: str | None, kind: str) -> None:
    """The state's bucket keys are the loader's (both none, or the same fingerprint)."""
    if found == expected:
        return
    if expected is None:
        raise fail("buckets", found, f"None (this {kind} was built without buckets=)",
                   f"build the {kind} with the run's buckets=keys to resume it, or start fresh")
    same_keys = found is not None and found.split(":")[2:] == expected.split(":")[2:]
    why = ("the run was read without buckets" if not found else "the run was written by another version of the "
           "bucket interleave" if same_keys else "the keys changed since the checkpoint")
    raise fail("buckets", found, f"{expected!r} (the keys this {kind} was built with)",
               "resume with the keys the run was written with (or without buckets= if it had none), or start fresh",
               why=f"{why}: its positions would point at other samples")


def on_grid(state: Mapping[str, Any], deal: Deal) -> Deal:
    """``deal``, on the state's grid where it records one (a scheduled ``Mixture`` read by a loader): under
    ``spans`` its epochs keep their parts across a change of global batch (``global_batch.grid_parts``)."""
    return deal.on_grid() if state["grid"] is not None else deal


def check_history(state: Mapping[str, Any], deal: Deal, excluding: bool = False) -> tuple[int, History]:
    """The run's history under ``deal`` (the state's) is well formed, ends with the saved layout, and arrives at
    the saved place after ``steps`` batches. With samples ``excluding`` where it arrives needs the order's
    inverse, so the loader checks it (``_loading/excluded.arrived``), not this."""
    layout = Layout(state["n"], state["world_size"], state["batch_size"], state["drop_last"])
    start = Place(state["epoch"], state["cursor"], deal.segments(state["segments"]))
    if "history" not in state:
        return legacy_history(state, deal, layout, start)
    try:
        history = History.from_entries(state["n"], on_grid(state, deal), state["history"])
    except Refused as error:
        raise fail("history", error.where(), error.expected, DAMAGED, why=error.why) from None
    steps, last = state["steps"], history.legs[-1]
    if last.layout != layout:
        saved = [layout.world_size, layout.batch_size, int(layout.drop_last)]
        raise fail("history", state["history"], f"a last entry with the saved layout [W, B, D] = {saved}",
                   DAMAGED)
    if steps < last.step:
        raise fail("steps", steps, f"at least {last.step} (the history's last entry)", DAMAGED)
    try:
        arrived, target = history.position(steps), history.normal(start, layout)
    except Refused as error:  # a deal's own cuts (buckets) found segments its keys cannot hold
        raise fail("segments", error.where(), error.expected, DAMAGED) from None
    if arrived != target and not excluding:
        there = f"epoch {arrived.epoch}, cursor {arrived.cursor}" if arrived else "no batch"
        raise fail("steps", steps, f"a step at which the history arrives at epoch {start.epoch}, cursor "
                   f"{start.cursor} (it arrives at {there})", DAMAGED)
    return steps, history


def check_handed(state: Mapping[str, Any], deal: Deal) -> Handed | None:
    """What the epoch handed out before its latest exclusion (a deal that ``redeals``), or None (``[]``)."""
    if not state["handed"]:
        return None
    try:
        return Handed.from_state_field(state["handed"], state["n"], deal.redeals and bool(state["excluded"]))
    except Refused as error:
        raise fail("handed", _found(state["handed"], "handed", error), error.expected, error.fix,
                   why=error.why) from None


def check_excluded(state: Mapping[str, Any], kind: str) -> Exclusion | None:
    try:
        return Exclusion.from_state_field(state["excluded"], state["n"], kind)
    except Refused as error:
        raise fail("excluded", _found(state["excluded"], "excluded", error), error.expected, error.fix,
                   why=error.why) from None


def _found(value: object, field: str, error: Refused) -> object:
    """What a field's check found: where inside the field, or the field's value (and what is wrong with it)."""
    if error.subject != field:
        return error.where()
    return Plain(f"{shown(value, 40)} ({error.found})") if isinstance(error.found, Plain) else error.found


MAX_EXCLUDED_AT = 32  # the first exclusion's step and the latest 31


def check_excluded_at(state: Mapping[str, Any], steps: int) -> tuple[int, ...]:
    """The steps the exclusions took effect at: ascending ints in [0, steps], at most ``MAX_EXCLUDED_AT``,
    ``[]`` when nothing is excluded (a state written before the field may carry ``[]`` with exclusions)."""
    value = state["excluded_at"]
    expected = (f"at most {MAX_EXCLUDED_AT} ascending steps in [0, steps={steps}], [] when nothing is excluded")
    well_formed = (len(value) <= MAX_EXCLUDED_AT and all(isinstance(s, int) and not isinstance(s, bool)
                                                        and 0 <= s <= steps for s in value)
                   and all(a < b for a, b in zip(value, value[1:], strict=False)))
    if not well_formed or (value and not state["excluded"]):
        raise fail("excluded_at", value, expected, DAMAGED)
    return tuple(value)


def check_order_parameters(state: Mapping[str, Any]) -> None:
    """The order's parameters (version 4) are well formed: ``shuffle_block`` and ``grid`` ints in
    [1, 2**62] or None, ``phases`` ``[start, hash]`` pairs with ascending starts, a ``grid`` only with
    ``phases`` (it is the global batch a schedule follows) and either only with a ``shuffle_block``."""
    block, grid, phases = state["shuffle_block"], state["grid"], state["phases"]
    for field, value in (("shuffle_block", block), ("grid", grid)):
        if value is not None and not 1 <= value <= MAX_PARAMETER:
            raise fail(field, value, f"an int in [1, {MAX_PARAMETER}] or None", DAMAGED)
    for number, phase in enumerate(phases):
        if not (isinstance(phase, list) and len(phase) in (2, 3) and isinstance(phase[0], int)
                and not isinstance(phase[0], bool) and 0 <= phase[0] <= MAX_PARAMETER
                and isinstance(phase[1], str) and 0 < len(phase[1]) <= 64
                and (len(phase) == 2 or (isinstance(phase[2], list) and 0 < len(phase[2]) <= MAX_SOURCES
                                         and all(isinstance(x, str) and 0 < len(x) <= 64 for x in phase[2])))):
            raise fail(f"phases[{number}]", phase, "a [start, hash] pair: an int start in [0, 2**62] and the "
                       "phase's hash (a non-empty string), or a live phase's [start, hash, shares] (its weights as "
                       "exact fractions, one string per source)", DAMAGED)
        if number and phase[0] <= phases[number - 1][0]:
            raise fail(f"phases[{number}]", phase, f"a start after the previous phase's ({phases[number - 1][0]})",
                       DAMAGED)
    if grid is not None and not phases:
        raise fail("grid", grid, "None without phases (the grid is the global batch a schedule follows)",
                   DAMAGED)
    if block is None and (phases or grid is not None):
        raise fail("shuffle_block", block, "an int where the state has phases or a grid (a Mixture's order has "
                   "a block)", DAMAGED)


MAX_SOURCES = 65_536  # a live phase's shares, one per source: a bound on what a state may hold


@dataclass(frozen=True)
class OrderParameters:
    """The parameters of an order beyond its name and version (state version 4's own fields): the block of a
    block order, the grid a schedule follows, a schedule's phases as ``(start, hash)`` pairs."""

    shuffle_block: int | None = None
    grid: int | None = None
    phases: tuple[tuple[Any, ...], ...] = ()  # a live phase: (start, hash, shares)


_SCHEDULE_CHANGED = ("schedule[{}] changed, a phase the run had started (or one starting inside the window it "
                     "had reached: under 'spans' a Mixture's epoch, whose rows of each source are laid out when it "
                     "begins); a resume may only append phases after it")


def parameter_changes(state: Mapping[str, Any], own: OrderParameters, kind: str,
                      hook: Callable[[list[list[Any]], int, int, int | None], int | None] | None,
                      ) -> list[tuple[str, object, str, str, str]]:
    """(field, found, expected, why, fix) for each of the order's parameters the state records otherwise than this
    ``kind`` of object reads with (``own``); phases appended after the position reached are not a change
    (``hook``: the scheduled dataset's ``phase_changed``, see ``state.Expected.phases_changed``)."""
    changes: list[tuple[str, object, str, str, str]] = []
    if state["shuffle_block"] != own.shuffle_block:
        changes.append(("shuffle_block", state["shuffle_block"], f"{own.shuffle_block!r} (what this {kind} reads "
                        "with)", "the block is part of the order (a blocks order left to its default follows the "
                        "state's)", f"build the {kind} with shuffle_block={state['shuffle_block']!r} to resume "
                        "this run"))
    if state["grid"] != own.grid:
        changes.append(("grid", state["grid"], f"{own.grid!r} (the global batch this {kind}'s schedule follows)",
                        "the grid is the global batch a scheduled Mixture follows under a shufflepoint.DataLoader",
                        "resume with the dataset and the object the run used"))
    saved = [tuple(phase) for phase in state["phases"]]
    if saved != list(own.phases):
        number = hook(state["phases"], state["epoch"], state["cursor"], state["grid"]) if hook and saved else 0
        if number is not None:
            # LIMIT(schedule-phase-began): docs/shards.md#limits
            why = (_SCHEDULE_CHANGED.format(number) if hook and saved and own.phases else
                   "the schedule was added or removed since the checkpoint")
            changes.append(("phases", state["phases"], f"{[list(p) for p in own.phases]} (this dataset's "
                            "schedule)", why, "build the dataset's schedule as the run did"))
    return changes
