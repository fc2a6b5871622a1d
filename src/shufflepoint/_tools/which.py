"""``shufflepoint which CHECKPOINT --step N``: the samples of any step of a run, from its checkpoint alone.

Nothing is logged during training: the checkpoint's loader state (seed, position, the run's layout
history) and the dataset define every step. This module builds the loader as the training job built
it (the state says seed, order, deal, world size, batch size, tail policy and, in its fingerprint,
the ``shuffle_block``), loads the state (refused as a resume would be: a changed corpus is named),
asks ``loader.which(step)`` for each rank's dataset indices and ``dataset.locate(index)`` for where
each lives (``_shards/corpora/shards/locate.py``)::

    $ shufflepoint which checkpoint.pt --step 3 --dataset train.py:dataset
    shufflepoint which checkpoint.pt [loader] (file)
      step 3
      rank 0: 2 samples
        6 shard=1 url=/data/corpus/part-00001.jsonl row=0 line=1 byte_offset=0 bytes=10 decompressed=False
        ...

For a live loader's checkpoint (torchft: ``shufflepoint.integrations.torchft``) ``--step`` is a committed step and the
ranks are global ranks of that step's participants (participant x group ranks + group rank).

For an HF Trainer checkpoint ``--step`` is the optimizer step (``global_step`` after it): the batches it
trained, from the run's record of its steps in the checkpoint (``which_steps``), with the layout that ran it,
before and after every resize.

Words: docs/glossary.md (step, history, leg, layout, state, optimizer step, deal).
"""

from __future__ import annotations

import time
from typing import Any

from shufflepoint._core.capabilities import Identified, OwnOrder
from shufflepoint._core.older_states import upgraded
from shufflepoint._loading.block_choice import recorded_block
from shufflepoint._tools.which_checkpoint import Found

SCHEMA_VERSION = 1


class WhichError(ValueError):
    """The question cannot be answered from this checkpoint and dataset: the CLI exits 2."""


def _user_fingerprint(saved: str | None, dataset: Any) -> str | None:
    """The ``dataset_fingerprint=`` to build the loader with, so that the state validates as on a resume:
    a corpus's own identity is recomputed (and a changed corpus refused); ``auto`` is recomputed; the
    user's own string can only be taken from the state. ``saved`` is the dataset's identity alone, as
    ``upgraded`` gives it for a state of any version (the order's parameters are fields of their own)."""
    if saved is None:
        return None
    own = dataset.fingerprint if isinstance(dataset, Identified) else None
    if isinstance(own, str) and saved.startswith(own):
        rest = saved[len(own):]
        return rest[1:] if rest.startswith(":") else None
    return "auto" if saved.startswith("auto:") else saved


def build_loader(state: dict[str, Any], dataset: Any) -> Any:
    """A ``shufflepoint.DataLoader`` over ``dataset`` as the run that wrote ``state`` built it, the state
    loaded (rank 0 of the saved world; ``which`` answers for every rank from any of them)."""
    from shufflepoint._errors import StateError
    from shufflepoint._loading.loader import DataLoader

    for name in ("seed", "batch_size", "world_size", "shuffle", "drop_last", "order", "deal"):
        if name not in state:
            raise WhichError(f"the checkpoint's loader state has no {name!r} field: not a state shufflepoint can "
                             "place (run shufflepoint inspect on it)")
    shuffle = bool(state["shuffle"])
    own_order = dataset.order_name if isinstance(dataset, OwnOrder) else None
    order = None if state["order"] in ("blocks", own_order) or not shuffle else state["order"]
    try:
        loader = DataLoader(
            dataset, batch_size=state["batch_size"], shuffle=shuffle, seed=state["seed"], drop_last=state["drop_last"],
            rank=0, world_size=state["world_size"], order=order,
            shuffle_block=recorded_block(state) if shuffle else None, deal=state["deal"],
            dataset_fingerprint=_user_fingerprint(upgraded(state).get("dataset_fingerprint"), dataset),
            verify_ranks=False)
        loader.load_state_dict(state, verify_ranks=False)
    except StateError as error:
        raise WhichError(f"the checkpoint's loader state does not fit this dataset, as a resume would refuse it:\n"
                         f"{error}") from None
    except (TypeError, ValueError) as error:
        raise WhichError(f"the loader of the checkpoint cannot be built over this dataset: {error}") from None
    return loader


def build_live(state: dict[str, Any], dataset: Any) -> Any:
    """A live loader (torchft's, ``_loading/live.py``) over ``dataset`` as the run built it, the state loaded: its
    ``which`` takes committed steps and answers per global rank (participant x group ranks + group rank)."""
    from shufflepoint._errors import StateError
    from shufflepoint._loading.live import LiveLoader

    position = state.get("position")
    if not isinstance(position, dict) or any(name not in position for name in ("seed", "batch_size", "shuffle")):
        raise WhichError("the checkpoint's live loader state has no 'position' with seed, batch_size and shuffle")
    try:
        group_world = int(state.get("group_world_size", 1))  # a lot is group ranks x batch (or the global batch)
        loader = LiveLoader(dataset, max(int(position["batch_size"]) // group_world, 1),
                            replica_groups=int(state.get("replica_groups", 1)), group_world_size=group_world,
                            seed=position["seed"], shuffle=bool(position["shuffle"]), drop_last=position["drop_last"],
                            dataset_fingerprint=_user_fingerprint(upgraded(position).get("dataset_fingerprint"),
                                                                  dataset), prefetch=False)
        loader.load_state_dict(state)
    except StateError as error:
        raise WhichError(f"the checkpoint's loader state does not fit this dataset, as a resume would refuse it:\n"
                         f"{error}") from None
    except (TypeError, ValueError) as error:
        raise WhichError(f"the loader of the checkpoint cannot be built over this dataset: {error}") from None
    return loader


def _where(dataset: Any, index: int) -> dict[str, Any]:
    from shufflepoint._core.capabilities import Locatable

    return dataset.locate(index) if isinstance(dataset, Locatable) else {"index": index}


def answer(found: Found, dataset: Any, step: int, *, rank: int | None = None, accumulation: int | None = None,
           locate: bool = True) -> dict[str, Any]:
    """The JSON-ready answer: per rank, the indices of step ``step`` (an optimizer step for an HF
    Trainer checkpoint: the batches it trained; ``accumulation``, when given, must be the run's), each with
    where it lives when ``locate``."""
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise WhichError(f"--step: found {step!r}, expected an int >= 0")
    began = time.perf_counter()
    loader = build_live(found.state, dataset) if found.kind == "live" else build_loader(found.state, dataset)
    steps = _loader_steps(found, loader, step, accumulation)
    ranks: dict[int, list[dict[str, Any]]] = {}
    for loader_step in steps:
        for r, indices in sorted(_which(loader, loader_step, step if found.kind == "hf_trainer" else None).items()):
            if rank is not None and r != rank:
                continue
            entries = [_where(dataset, i) if locate else {"index": i} for i in indices]
            for entry in entries:
                entry["step"] = loader_step
            ranks.setdefault(int(r), []).extend(entries)
    if rank is not None and rank not in ranks:
        raise WhichError(f"--rank: found {rank}, but step {step} was read by ranks {sorted(_which(loader, steps[0]))}")
    return {"schema_version": SCHEMA_VERSION, "checkpoint": found.where, "kind": found.kind, "step": step,
            "loader_steps": steps, "trainer_step": found.trainer_step,
            "seed": found.state["position"]["seed"] if found.kind == "live" else found.state["seed"],
            "ranks": {str(r): entries for r, entries in sorted(ranks.items())},
            "seconds": round(time.perf_counter() - began, 6)}


def _which(loader: Any, step: int, update: int | None = None) -> dict[int, list[int]]:
    """``loader.which(step)``; refused naming ``--step`` as given (``update``, an optimizer step, when it is one)."""
    try:
        found: dict[int, list[int]] = loader.which(step)
    except (ValueError, IndexError) as error:
        given = f"--step {step}" if update is None else f"--step {update} (its loader step {step})"
        raise WhichError(f"{given}: {error}") from None
    return found


def _loader_steps(found: Found, loader: Any, step: int, accumulation: int | None) -> list[int]:
    """The loader steps (batches per rank since the run began) that ``step`` means."""
    if found.kind != "hf_trainer":
        if accumulation not in (None, 1):
            raise WhichError(f"--accumulation: found {accumulation}, but it applies to an HF Trainer checkpoint "
                             f"only (this one is {found.kind}: --step counts batches per rank)")
        return [step]
    from shufflepoint._tools.which_steps import StepsError, trainer_loader_steps

    try:  # the state as loaded: an older state's history as the loader rebuilt it
        return trainer_loader_steps(found, loader.state_dict(), step, accumulation)
    except StepsError as error:
        raise WhichError(str(error)) from None


def render(result: dict[str, Any]) -> str:
    """One line per sample (rank, index, where it lives); a packed row's documents on lines of their own."""
    steps = result["loader_steps"]
    head = f"shufflepoint which {result['checkpoint']} ({result['kind']})"
    lines = [head, f"  step {result['step']}" + (
        f" (optimizer step: loader steps {steps[0]}..{steps[-1]})" if result["kind"] == "hf_trainer" else "")]
    for rank, entries in result["ranks"].items():
        lines.append(f"  rank {rank}: {len(entries)} samples")
        for entry in entries:
            lines += _lines(entry, "    ")
    lines.append(f"  answered in {result['seconds'] * 1000:.1f} ms, from the checkpoint alone")
    return "\n".join(lines)


def _fields(entry: dict[str, Any]) -> str:
    """``index``, the location's own fields, then what the dataset below says, after an arrow."""
    rest = " ".join(f"{k}={v}" for k, v in entry.items() if k not in ("index", "step", "where", "documents"))
    text = f"{entry.get('index')}" + (f" {rest}" if rest else "")
    return text + (f" -> {_fields(entry['where'])}" if "where" in entry else "")


def _lines(entry: dict[str, Any], indent: str) -> list[str]:
    found = [indent + _fields(entry)]
    below = entry
    while "documents" not in below and isinstance(below.get("where"), dict):  # a Mixture's Packed source
        below = below["where"]
    for document in below.get("documents", []):
        text = f"document {document['document']} tokens [{document['tokens'][0]}, {document['tokens'][1]})"
        found.append(f"{indent}  {text}" + (f" -> {_fields(document['where'])}" if "where" in document else ""))
    return found
