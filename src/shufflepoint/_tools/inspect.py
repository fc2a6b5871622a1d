"""``shufflepoint inspect PATH``: what a loader checkpoint holds, and whether its order survives.

PATH is a state file (``.pt``, ``.bin``: ``torch.load(weights_only=True)``; ``.json``), a corpus
index sidecar of ``shufflepoint.Shards`` (see ``inspect_corpus``), a
training checkpoint with a loader state somewhere inside it (found by walking its dicts), or a
directory: an Accelerate ``save_state`` directory (``dl_state_dict*.bin``, ``random_states_*.pkl``)
or any directory of state files.

Each loader state found is classified by who wrote it, and whether the shuffle order of the
interrupted epoch can be recovered from it:

=========================================  ==============================================
writer                                     order recoverable
=========================================  ==============================================
shufflepoint.DataLoader / ResumableSampler yes: (seed, epoch, cursor), any world size
Accelerate + patch_accelerate()            yes, unless the sampler is a custom one
Accelerate with ``_iteration`` only        only with use_seedable_sampler=True (#4238)
stock Accelerate / torchdata, cursor only  no: right position, wrong order (#4195)
torchdata with its own RandomSampler       yes, for the same (single) process setup
=========================================  ==============================================

Words: docs/glossary.md (state, cursor, order, epoch, seed).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from typing import Any

from shufflepoint._tools import inspect_corpus as _corpus

SCHEMA_VERSION = 1
_TORCHDATA_KEYS = {"_num_yielded", "_sampler_iter_yielded", "_iterator_finished"}
_STATE_SUFFIXES = (".pt", ".pth", ".bin", ".json", ".ckpt")
_FIX_CURSOR_ONLY = (
    "call shufflepoint.patch_accelerate() before accelerator.prepare(...) in the training script (or use "
    "shufflepoint.DataLoader) and checkpoint again; the epoch and shuffle of this checkpoint are not in it, "
    "so it cannot be resumed in order"
)


class InspectError(ValueError):
    """PATH cannot be inspected (missing, unreadable, no loader state): the CLI exits 2."""


def _load(path: str) -> Any:
    if path.endswith(".json"):
        try:
            with open(path) as f:
                return json.load(f)
        except (OSError, ValueError) as error:
            raise InspectError(f"{path}: not readable as JSON: {error}") from None
    import torch

    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # torch raises several types here: pickle, zip, runtime
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise InspectError(
            f"{path}: torch.load(weights_only=True) failed ({first[:200]}). inspect never unpickles "
            "arbitrary objects; save the loader's state_dict() on its own (torch.save or JSON) to inspect it"
        ) from None


def _find(value: Any, path: tuple[str, ...] = (), depth: int = 0) -> list[tuple[tuple[str, ...], Mapping[str, Any]]]:
    """Every dict that looks like a loader state, with the keys leading to it (outermost first)."""
    if not isinstance(value, Mapping) or depth > 4:
        return []
    keys = set(map(str, value))
    if value.get("format") == "shufflepoint" or keys & _TORCHDATA_KEYS or "_snapshot" in keys:
        return [(path, value)]
    found = []
    for key, inner in value.items():
        found += _find(inner, (*path, str(key)), depth + 1)
    return found


def _nested_shufflepoint(value: Any, depth: int = 0) -> Mapping[str, Any] | None:
    if not isinstance(value, Mapping) or depth > 4:
        return None
    if value.get("format") == "shufflepoint":
        return value
    for inner in value.values():
        found = _nested_shufflepoint(inner, depth + 1)
        if found is not None:
            return found
    return None


def _has_generator(value: Any, depth: int = 0) -> bool:
    if not isinstance(value, Mapping) or depth > 4:
        return False
    return "generator" in value or any(_has_generator(v, depth + 1) for v in value.values())


def classify(state: Mapping[str, Any]) -> dict[str, Any]:
    """Who wrote this loader state, where it stands, and whether its order is recoverable."""
    if state.get("format") == "shufflepoint":
        return _classify_own(state)
    main = state.get("_snapshot", {}).get("_main_snapshot", {}) if "_snapshot" in state else state
    batches = state.get("_num_yielded", state.get("_snapshot", {}).get("_snapshot_step"))
    position = f"{batches} batches into the epoch" if isinstance(batches, int) else None
    if state.get("_iterator_finished"):
        position = "after the last batch of an epoch"
    if "_iteration" in state:
        return _classify_patched_accelerate(state, position)
    nested = _nested_shufflepoint(main.get("_sampler_iter_state")) or _nested_shufflepoint(
        main.get("_index_sampler_state"))
    if nested is not None:
        inner = classify(nested)
        inner["writer"] = f"torchdata StatefulDataLoader with {inner['writer']}"
        return inner
    if _has_generator(main.get("_sampler_iter_state")):
        return {"writer": "torchdata StatefulDataLoader with its own RandomSampler", "recoverable": True,
                "epoch": None, "position": position,
                "finding": "order recoverable for this process: the sampler's generator state is saved "
                           "(one process; under Accelerate's sharding this state is not written)",
                "fix": None}
    return {
        "writer": "torchdata StatefulDataLoader state (also what stock Accelerate's prepared loader writes)",
        "recoverable": False, "epoch": None, "position": position,
        "finding": "cursor only: this checkpoint resumes at the right position in the wrong order",
        "why": "no epoch and no shuffle state are saved: under stock Accelerate the rest of the epoch follows "
               "epoch 0's order (Accelerate #4195); under torchdata with a DistributedSampler it is right only "
               "if your loop calls sampler.set_epoch(epoch) with the epoch from your own checkpoint",
        "fix": _FIX_CURSOR_ONLY,
    }


def _classify_own(state: Mapping[str, Any]) -> dict[str, Any]:
    """A state that shufflepoint wrote: valid (recoverable on any world size) or damaged."""
    from shufflepoint._core.state import _check_shape
    from shufflepoint._errors import StateError

    try:
        _check_shape(state)
    except StateError as error:
        return {"writer": "shufflepoint (damaged)", "recoverable": False, "epoch": None, "position": None,
                "finding": f"a shufflepoint state that does not validate: {error}",
                "fix": "use another checkpoint"}
    writer = "shufflepoint.DataLoader" if state["kind"] == "loader" else "shufflepoint.ResumableSampler"
    corpus = state["dataset_fingerprint"] or ""
    if corpus.startswith(("shards:", "mixture:")):
        writer += f" over a {'sharded corpus' if corpus.startswith('shards:') else 'mixture'} ({corpus[:40]}...)"
    return {
        "writer": writer, "recoverable": True, "epoch": state["epoch"],
        "position": f"cursor {state['cursor']} of {state['n']} samples",
        "finding": (f"order recoverable: {state['order']} order v{state['order_version']}, seed {state['seed']}, "
                    f"a pure function of (seed, epoch); saved by {state['world_size']} ranks x batch "
                    f"{state['batch_size']}, resumable on any world size or batch size"),
        "fix": None,
        "skipped": [_skip_line(entry) for entry in state.get("skipped", [])],
        "excluded": _excluded_count(state["excluded"]),
    }


def _skip_line(entry: list[Any]) -> str:
    """One skipped sample of the state's record (``_core/skips.py``), as ``inspect`` shows it."""
    step, index, replacement, shard, row, error = entry
    where = f"shard {shard} row {row}" if shard is not None else "dataset index"
    return f"step {step}: {where} (index {index}) -> replaced by index {replacement}: {error}"


def _excluded_count(ranges: list[int]) -> int:
    """Samples in the state's ``excluded`` ranges (``[gap, length, ...]``)."""
    return sum(ranges[1::2])


def _classify_patched_accelerate(state: Mapping[str, Any], position: str | None) -> dict[str, Any]:
    """An Accelerate state with ``_iteration``: written with the patch (order pinned) or by an
    Accelerate that saves the epoch alone."""
    epoch = state["_iteration"]
    block = state.get("_shufflepoint")
    if isinstance(block, Mapping):
        source = block.get("order_source")
        text = {
            "generator": "the shuffle generator's state at the start of the epoch is saved",
            "seedable": f"SeedableRandomSampler seed {block.get('initial_seed')} + epoch",
            "fixed": "an order that is a function of the epoch alone (no shuffle, or DistributedSampler)",
            "dataset": "an iterable dataset: its own order, given the epoch",
        }.get(str(source))
        if text is not None:
            return {"writer": "Accelerate-prepared loader + shufflepoint.patch_accelerate()",
                    "recoverable": True, "epoch": epoch, "position": position,
                    "finding": f"order recoverable: {text}", "fix": None}
        return {"writer": "Accelerate-prepared loader + shufflepoint.patch_accelerate()", "recoverable": False,
                "epoch": epoch, "position": position,
                "finding": "a custom sampler: only the epoch and position are saved; if it draws randomness "
                           "of its own, the resumed order differs",
                "fix": "use shuffle=True with use_seedable_sampler=True, or shufflepoint.DataLoader"}
    return {"writer": "Accelerate-prepared loader (saves _iteration, as upstream PR #4238)",
            "recoverable": None, "epoch": epoch, "position": position,
            "finding": "the epoch is saved but not the shuffle: the order is recoverable only if the loader "
                       "uses use_seedable_sampler=True",
            "fix": "prepare with DataLoaderConfiguration(use_seedable_sampler=True), or call "
                   "shufflepoint.patch_accelerate() before prepare"}


def _inspect_file(path: str, shown: str) -> list[dict[str, Any]]:
    value = _load(path)
    found = []
    for keys, state in _find(value):
        entry = {"file": shown, "key": ".".join(keys) or None, "why": None, **classify(state)}
        found.append(entry)
    return found


_ACCELERATE_LOADER = re.compile(r"^dl_state_dict(?:_(\d+))?(?:_rank(\d+))?\.bin$")
_ACCELERATE_RNG = re.compile(r"^random_states_(\d+)\.pkl$")


def _inspect_accelerate_dir(path: str, names: list[str]) -> dict[str, Any]:
    ranks = sorted(int(m.group(1)) for m in map(_ACCELERATE_RNG.match, names) if m)
    loaders: dict[int, dict[str, Any]] = {}
    states = []
    for name in names:
        match = _ACCELERATE_LOADER.match(name)
        if not match:
            continue
        index = int(match.group(1) or 0)
        entry = loaders.setdefault(index, {"index": index, "shared_file": None, "rank_files": []})
        if match.group(2) is None:
            entry["shared_file"] = name
        else:
            entry["rank_files"].append(int(match.group(2)))
        states += _inspect_file(os.path.join(path, name), name)
    notes = []
    world = len(ranks) or None
    for entry in loaders.values():
        entry["rank_files"].sort()
        if not entry["rank_files"]:
            notes.append(
                f"loader {entry['index']}: one file ({entry['shared_file']}) for all "
                f"{world or '?'} ranks: stock Accelerate writes it from every rank to the same path, the last "
                "writer wins (upstream #4164); each rank resumes from that one rank's state")
        elif world is not None and entry["rank_files"] != list(range(world)):
            missing = sorted(set(range(world)) - set(entry["rank_files"]))
            notes.append(f"loader {entry['index']}: per-rank files for ranks {entry['rank_files']}, "
                         f"missing {missing}")
    return {"kind": "accelerate_save_state", "ranks_saved": ranks, "loaders": sorted(
        loaders.values(), key=lambda e: e["index"]), "states": states, "notes": notes}


def inspect_path(path: str) -> dict[str, Any]:
    """The findings for PATH as a JSON-ready dict; raises InspectError when there is nothing to say."""
    if not os.path.exists(path):
        raise InspectError(f"{path}: no such file or directory")
    result: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "path": path}
    if os.path.isdir(path):
        names = sorted(os.listdir(path))
        if any(_ACCELERATE_LOADER.match(n) or _ACCELERATE_RNG.match(n) for n in names):
            result.update(_inspect_accelerate_dir(path, names))
        else:
            result["corpora"] = [c for c in map(_corpus.describe_file, _corpus.sidecars_in(path, names)) if c]
            states = []
            for name in names:
                if name.endswith(_STATE_SUFFIXES) and os.path.isfile(os.path.join(path, name)):
                    try:
                        states += _inspect_file(os.path.join(path, name), name)
                    except InspectError:
                        continue  # a directory may hold other files; only loader states count
            result.update(kind="directory", states=states, notes=[])
    else:
        corpus = _corpus.describe_file(path) if path.endswith((".json", ".idx")) else None
        if corpus is not None:
            result.update(kind="corpus_index", states=[], notes=[], corpora=[corpus],
                          recoverable=corpus["damaged"] is None)
            result["exit_code"] = 0 if result["recoverable"] else 1
            return result
        result.update(kind="file", states=_inspect_file(path, os.path.basename(path)), notes=[])
    if not result["states"] and result.get("corpora"):
        result["recoverable"] = all(c["damaged"] is None for c in result["corpora"])
        result["exit_code"] = 0 if result["recoverable"] else 1
        return result
    if not result["states"]:
        raise InspectError(
            f"{path}: no loader state found (looked for shufflepoint, Accelerate and torchdata loader states"
            + (", in dl_state_dict*.bin" if result["kind"] == "accelerate_save_state" else "") + ")")
    result["recoverable"] = all(s["recoverable"] is True for s in result["states"])
    result["exit_code"] = 0 if result["recoverable"] else 1
    return result


def render(result: dict[str, Any]) -> str:
    lines = [f"shufflepoint inspect {result['path']}"]
    if result["kind"] == "accelerate_save_state":
        lines.append(f"  an Accelerate save_state directory; random states for ranks {result['ranks_saved']}")
        for loader in result["loaders"]:
            files = [f"rank {r}" for r in loader["rank_files"]]
            if loader["shared_file"]:
                files.append(f"{loader['shared_file']} (shared)")
            lines.append(f"  loader {loader['index']}: state files: {', '.join(files)}")
    for state in result["states"]:
        where = state["file"] + (f" [{state['key']}]" if state["key"] else "")
        lines.append("")
        lines.append(f"  {where}")
        lines.append(f"    written by : {state['writer']}")
        epoch = state["epoch"] if state["epoch"] is not None else "not saved"
        lines.append(f"    epoch      : {epoch}")
        lines.append(f"    position   : {state['position'] or 'unknown'}")
        mark = {True: "yes", False: "NO", None: "only if"}[state["recoverable"]]
        lines.append(f"    order      : {mark} - {state['finding']}")
        if state["why"]:
            lines.append(f"    why        : {state['why']}")
        if state["fix"]:
            lines.append(f"    fix        : {state['fix']}")
        if state.get("excluded"):
            lines.append(f"    excluded   : {state['excluded']} samples never served again")
        if state.get("skipped"):
            how = ("each excluded" if state.get("excluded") else
                   "replaced, not excluded (a Mixture, Packed or buckets= cannot exclude): met again, replaced again")
            lines.append(f"    skipped    : {len(state['skipped'])} bad samples (the latest kept), {how}:")
            lines += [f"      {line}" for line in state["skipped"]]
    for corpus in result.get("corpora", []):
        lines += _corpus.render(corpus)
    if result["notes"]:
        lines.append("")
        lines += [f"  note: {note}" for note in result["notes"]]
    lines.append("")
    if result["kind"] == "corpus_index" or not result["states"]:
        lines.append("corpus index valid: " + ("yes" if result["recoverable"] else "NO (see above)"))
    else:
        lines.append("order recoverable: " + ("yes" if result["recoverable"] else "NO (see above)"))
    return "\n".join(lines)
