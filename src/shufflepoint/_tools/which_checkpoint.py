"""Find the loader state in a checkpoint, whichever integration wrote it, for ``shufflepoint which``.

=====================================  =========================================================
CHECKPOINT                             where the state is
=====================================  =========================================================
a file (``.pt``, ``.bin``, ``.json``)  the first dict with ``format == "shufflepoint"``, found by
                                       walking the saved dicts (``{"loader": loader.state_dict()}``)
a DCP folder (``.metadata``)           the entries under one prefix whose ``format`` entry is
                                       ``"shufflepoint"``, read alone (no model or optimizer tensor)
an Accelerate ``save_state`` folder    ``dl_state_dict_rank0.bin`` (or any ``dl_state_dict*.bin``):
                                       a prepared ``shufflepoint.DataLoader``'s state
an HF Trainer ``checkpoint-N`` folder  ``shufflepoint_loader.json``, ``trainer_state.json`` for the
                                       optimizer step and ``shufflepoint_run.json`` for what each
                                       optimizer step trained (see ``which_trainer``)
=====================================  =========================================================

Files are read as ``shufflepoint inspect`` reads them: ``torch.load(weights_only=True)``, never an
arbitrary unpickle. A DCP folder's non-tensor entries are pickles that DCP itself reads back, as the
training job's ``dcp.load`` does.

Words: docs/glossary.md (state, optimizer step, step).
"""

from __future__ import annotations

import json
import os
import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from shufflepoint._tools.inspect import InspectError, _find, _load

TRAINER_STATE = "trainer_state.json"
LOADER_STATE_FILE = "shufflepoint_loader.json"  # integrations.transformers writes it (not imported: no transformers)
RUN_FILE = "shufflepoint_run.json"  # likewise: the run's gradient accumulation and the record of its steps
_ACCELERATE_LOADER = re.compile(r"^dl_state_dict(?:_(\d+))?(?:_rank(\d+))?\.bin$")


class CheckpointError(ValueError):
    """No shufflepoint loader state in CHECKPOINT (or it cannot be read): the CLI exits 2."""


@dataclass(frozen=True)
class Found:
    """A loader state, what kind of checkpoint held it and where, and the Trainer's
    ``global_step`` when the checkpoint is an HF Trainer folder."""

    state: dict[str, Any]
    kind: str
    where: str
    trainer_step: int | None = None
    run: dict[str, Any] | None = None  # an HF Trainer checkpoint's shufflepoint_run.json (its steps' record)


LIVE_KIND = "shufflepoint.live"  # a live loader's state (_loading/live.py: torchft); its steps are committed steps


def _live_state(value: Any, depth: int = 0) -> tuple[tuple[str, ...], Mapping[str, Any]] | None:
    """The first live loader state inside ``value`` (it holds a plain loader state, its position, inside)."""
    if not isinstance(value, Mapping) or depth > 4:
        return None
    if value.get("kind") == LIVE_KIND:
        return (), value
    for key, inner in value.items():
        found = _live_state(inner, depth + 1)
        if found is not None:
            return (str(key), *found[0]), found[1]
    return None


def _from_file(path: str, kind: str) -> Found:
    try:
        value = _load(path)
    except InspectError as error:
        raise CheckpointError(str(error)) from None
    live = _live_state(value)
    if live is not None:
        shown = os.path.basename(path) + (f" [{'.'.join(live[0])}]" if live[0] else "")
        return Found(dict(live[1]), "live", shown)
    states = [(keys, state) for keys, state in _find(value) if state.get("format") == "shufflepoint"]
    if not states:
        found = _find(value)
        what = (" (a loader state of another library: which answers for shufflepoint.DataLoader and "
                "ResumableSampler states)" if found else "")
        raise CheckpointError(f"{path}: no shufflepoint loader state found{what}; expected a dict with "
                              "format 'shufflepoint' somewhere inside (loader.state_dict())")
    keys, state = states[0]
    shown = os.path.basename(path) + (f" [{'.'.join(keys)}]" if keys else "")
    return Found(dict(state), kind, shown)


def _from_dcp(path: str) -> Found:
    from torch.distributed.checkpoint.filesystem import FileSystemReader
    from torch.distributed.checkpoint.state_dict_loader import load

    metadata = FileSystemReader(path).read_metadata()
    keys = list(metadata.state_dict_metadata)
    prefixes = [key[: -len("format")] for key in keys if key == "format" or key.endswith(".format")]
    for prefix in prefixes:
        probe: dict[str, Any] = {f"{prefix}format": None}
        with warnings.catch_warnings():  # "assuming the intent is to load in a single process": it is
            warnings.simplefilter("ignore", UserWarning)
            load(probe, checkpoint_id=path)
        if probe[f"{prefix}format"] != "shufflepoint":
            continue
        flat: dict[str, Any] = {key: None for key in keys if key.startswith(prefix)}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            load(flat, checkpoint_id=path)
        return Found(_unflatten({key[len(prefix):]: value for key, value in flat.items()}), "dcp",
                     f"{os.path.basename(path.rstrip(os.sep))} [{prefix.rstrip('.') or 'top level'}]")
    raise CheckpointError(f"{path}: a DCP checkpoint without a shufflepoint loader state (no entry "
                          f"'<key>.format' equal to 'shufflepoint' among its {len(keys)} entries); save the "
                          "loader itself in the state dict (dcp.save({..., 'loader': loader}))")


def _unflatten(flat: Mapping[str, Any]) -> dict[str, Any]:
    """DCP flattens nested dicts into dotted keys; the state's own values are lists and scalars."""
    found: dict[str, Any] = {}
    for key, value in flat.items():
        *parents, last = key.split(".")
        node = found
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    return found


def _json_object(path: str) -> dict[str, Any] | None:
    """The JSON object in ``path`` (None when there is no such file); CheckpointError when it is not one."""
    if not os.path.isfile(path):
        return None
    try:
        with open(path) as f:
            found = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CheckpointError(f"{path}: not readable as JSON ({type(error).__name__}: {error}); the file is "
                              "damaged or was cut short") from None
    if not isinstance(found, dict):
        raise CheckpointError(f"{path}: found a JSON {type(found).__name__}, expected an object")
    return found


def _from_trainer(path: str) -> Found:
    trainer = _json_object(os.path.join(path, TRAINER_STATE))
    step = trainer.get("global_step") if trainer is not None else None
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise CheckpointError(f"{path}/{TRAINER_STATE}: global_step: found {step!r}, expected an int >= 0")
    loader = os.path.join(path, LOADER_STATE_FILE)
    if not os.path.isfile(loader):
        raise CheckpointError(f"{path}: an HF Trainer checkpoint without {LOADER_STATE_FILE}: it was not written "
                              "by shufflepoint's Trainer (shufflepoint.integrations.transformers.Trainer), so its "
                              "data order is not known; train with that Trainer to make its steps answerable")
    found = _from_file(loader, "hf_trainer")
    return Found(found.state, "hf_trainer", f"{os.path.basename(path.rstrip(os.sep))}/{LOADER_STATE_FILE}", step,
                 _json_object(os.path.join(path, RUN_FILE)))


def _from_accelerate(path: str, names: list[str]) -> Found:
    files = sorted((n for n in names if _ACCELERATE_LOADER.match(n)), key=lambda n: ("rank0" not in n, n))
    errors = []
    for name in files:  # every rank's file holds the same state; rank 0's first
        try:
            found = _from_file(os.path.join(path, name), "accelerate")
        except CheckpointError as error:
            errors.append(str(error))
            continue
        return Found(found.state, "accelerate", f"{os.path.basename(path.rstrip(os.sep))}/{found.where}")
    raise CheckpointError(f"{path}: an Accelerate save_state folder without a shufflepoint loader state "
                          f"({'; '.join(errors[:2])}); which answers for a prepared shufflepoint.DataLoader")


def read_checkpoint(path: str) -> Found:
    """The shufflepoint loader state in ``path`` (see the module docstring); CheckpointError when none."""
    if not os.path.exists(path):
        raise CheckpointError(f"{path}: no such file or directory")
    if not os.path.isdir(path):
        return _from_file(path, "file")
    names = sorted(os.listdir(path))
    if TRAINER_STATE in names:
        return _from_trainer(path)
    if ".metadata" in names:
        return _from_dcp(path)
    if any(_ACCELERATE_LOADER.match(n) for n in names):
        return _from_accelerate(path, names)
    for name in names:
        if name.endswith((".pt", ".pth", ".bin", ".json", ".ckpt")) and os.path.isfile(os.path.join(path, name)):
            try:
                return _from_file(os.path.join(path, name), "file")
            except CheckpointError:
                continue
    raise CheckpointError(f"{path}: a folder that is none of a DCP checkpoint (.metadata), an Accelerate "
                          f"save_state folder (dl_state_dict*.bin), an HF Trainer checkpoint ({TRAINER_STATE}), "
                          "and holds no file with a shufflepoint loader state")
