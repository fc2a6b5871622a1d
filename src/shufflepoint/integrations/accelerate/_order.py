"""The order of a stock prepared loader: which sampler decides it, and how its state is saved and restored."""

from __future__ import annotations

import base64
import warnings
import weakref
from dataclasses import dataclass
from typing import Any

from shufflepoint._errors import ResumeWarning, field_error

ITERATION_KEY = "_iteration"
BLOCK_KEY = "_shufflepoint"
BLOCK_FORMAT = 1
_ORDER_SOURCES = ("generator", "seedable", "fixed", "dataset", "unknown")


@dataclass
class _EpochTracker:
    """What a prepared loader (and the skip_first_batches loaders made from it) knows about the
    pass in progress. ``epoch`` is None until the first pass starts."""

    epoch: int | None = None
    epoch_start_generator: str | None = None
    pass_done: bool = False
    # The loader iterating the pass in progress, held weakly: no cycle keeps a loader alive.
    current: weakref.ref[Any] | None = None


def _tracker(loader: Any) -> _EpochTracker:
    # Read from __dict__: DataLoaderAdapter.__getattr__ would forward a miss to the base loader.
    found = loader.__dict__.get("_shufflepoint_tracker")
    if not isinstance(found, _EpochTracker):
        found = loader.__dict__["_shufflepoint_tracker"] = _EpochTracker()
    return found


def _leaf_sampler(loader: Any) -> Any:
    """The sampler that decides the order, under Accelerate's batch-sampler wrappers.

    TOUCH POINT (read only): the chain DataLoaderShard.base_dataloader.batch_sampler ->
    SkipBatchSampler.batch_sampler -> BatchSamplerShard.batch_sampler -> BatchSampler.sampler
    (accelerate/data_loader.py: prepare_data_loader, skip_first_batches).
    """
    from torch.utils.data import BatchSampler

    base = loader.__dict__["base_dataloader"]
    node = base.batch_sampler if base.batch_sampler is not None else base.sampler
    for _ in range(16):
        inner = getattr(node, "batch_sampler", None)
        if inner is not None:
            node = inner
            continue
        if isinstance(node, BatchSampler) and getattr(node, "sampler", None) is not None:
            node = node.sampler
            continue
        return node
    return node


def _order_source(sampler: Any) -> str:
    from accelerate.data_loader import SeedableRandomSampler
    from torch.utils.data import DistributedSampler, RandomSampler, SequentialSampler
    from torch.utils.data.dataloader import _InfiniteConstantSampler

    kind = type(sampler)  # exact types: a subclass may draw randomness of its own
    if kind is SeedableRandomSampler:
        return "seedable"
    if kind is RandomSampler:
        return "generator"
    if kind in (SequentialSampler, DistributedSampler):
        return "fixed"
    if kind is _InfiniteConstantSampler:
        return "dataset"
    return "unknown"


def _ensure_generator(sampler: Any) -> Any:
    """The RandomSampler's generator; give it a private one if it has none.

    Accelerate does this itself for a multi-process DataLoaderShard (prepare_data_loader, "not
    use_seedable_sampler and hasattr(sampler, 'generator')"), but not with one process or
    dispatch_batches=True, where the sampler then draws a fresh seed from the global RNG every
    epoch and its order cannot be captured. The private generator is seeded from the global RNG,
    the same draw the sampler would have made.
    """
    import torch

    if sampler.generator is None:
        generator = torch.Generator()
        generator.manual_seed(int(torch.empty((), dtype=torch.int64).random_().item()))
        sampler.generator = generator
    return sampler.generator


def _encode_generator(generator: Any) -> str:
    return base64.b64encode(generator.get_state().numpy().tobytes()).decode("ascii")


def _decode_generator(text: Any) -> Any:
    import torch

    if not isinstance(text, str):
        raise field_error(f"{BLOCK_KEY}.generator_state", type(text).__name__, "a base64 string",
                          "The state was not written by shufflepoint.patch_accelerate; save it again.")
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except ValueError as error:
        raise field_error(f"{BLOCK_KEY}.generator_state", text[:16] + "...", "base64 text",
                          "The state file is damaged; use an earlier checkpoint.") from error
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8)


def _warn_unknown(sampler: Any, when: str) -> None:
    warnings.warn(
        f"Accelerate loader {when}: its sampler {type(sampler).__qualname__} is not one whose order "
        f"shufflepoint can pin (RandomSampler, SequentialSampler, DistributedSampler, Accelerate's "
        f"SeedableRandomSampler), so only the epoch and position are restored; if it draws "
        f"randomness of its own, the resumed order can differ. Use shuffle=True with "
        f"use_seedable_sampler=True, or shufflepoint.DataLoader.",
        ResumeWarning,
        stacklevel=4,
    )


def _order_state(loader: Any) -> dict[str, Any]:
    """``{"_iteration": ..., "_shufflepoint": {...}}`` for a prepared loader, at this moment."""
    tracker = _tracker(loader)
    sampler = _leaf_sampler(loader)
    source = _order_source(sampler)
    iteration = loader.iteration  # TOUCH POINT: DataLoaderShard/DataLoaderDispatcher.iteration
    at_start = True  # the generator state to save is the one before this epoch's draw
    if tracker.epoch is not None:
        current = tracker.current() if tracker.current is not None else None
        at_end = tracker.pass_done or bool(current is not None and current.end_of_dataloader)
        if at_end:
            # The epoch is over: the next pass serves the next epoch (or the one set_epoch chose),
            # and the generator already holds the state that epoch starts from.
            iteration = iteration if iteration != tracker.epoch else tracker.epoch + 1
        else:
            iteration = tracker.epoch
            at_start = False
    block: dict[str, Any] = {"format": BLOCK_FORMAT, "order_source": source}
    if source == "generator":
        if at_start or tracker.epoch_start_generator is None:
            block["generator_state"] = _encode_generator(_ensure_generator(sampler))
        else:
            block["generator_state"] = tracker.epoch_start_generator
    elif source == "seedable":
        block["initial_seed"] = int(sampler.initial_seed)
    elif source == "unknown":
        _warn_unknown(sampler, "state saved")
    return {ITERATION_KEY: int(iteration), BLOCK_KEY: block}


@dataclass(frozen=True)
class _Restore:
    iteration: int
    source: str
    generator_state: Any = None  # a uint8 tensor
    initial_seed: int | None = None


def _parse_order_state(loader: Any, state: dict[str, Any]) -> _Restore | None:
    """Validate the order part of a saved state against this loader; None for a stock state."""
    if ITERATION_KEY not in state:
        return None
    iteration = state[ITERATION_KEY]
    if isinstance(iteration, bool) or not isinstance(iteration, int) or iteration < 0:
        raise field_error(ITERATION_KEY, iteration, "an integer >= 0",
                          "The state was edited or is not an Accelerate loader state.")
    sampler = _leaf_sampler(loader)
    here = _order_source(sampler)
    block = state.get(BLOCK_KEY)
    if block is None:
        # Written by an Accelerate that saves the epoch (upstream PR #4238) but not the order
        # source: the epoch is all there is.
        return _Restore(iteration=iteration, source="epoch-only")
    if not isinstance(block, dict):
        raise field_error(BLOCK_KEY, type(block).__name__, "a dict",
                          "The state was edited or damaged; use an earlier checkpoint.")
    if block.get("format") != BLOCK_FORMAT:
        raise field_error(f"{BLOCK_KEY}.format", block.get("format"), f"{BLOCK_FORMAT}",
                          "The state was written by another version of shufflepoint; load it with "
                          "that version, or restart the epoch.")
    saved = block.get("order_source")
    if saved not in _ORDER_SOURCES:
        raise field_error(f"{BLOCK_KEY}.order_source", saved, f"one of {', '.join(_ORDER_SOURCES)}",
                          "The state was edited or damaged; use an earlier checkpoint.")
    if saved != here:
        raise field_error(
            f"{BLOCK_KEY}.order_source", saved, f"{here!r} (this loader's sampler is "
            f"{type(sampler).__qualname__})",
            "The checkpoint was taken with another sampler setup; prepare the loader as it was "
            "(same shuffle, same use_seedable_sampler, same sampler class).")
    if saved == "generator":
        tensor = _decode_generator(block.get("generator_state"))
        import torch

        try:
            torch.Generator().set_state(tensor)  # refuse now, before anything was changed
        except RuntimeError as error:
            raise field_error(f"{BLOCK_KEY}.generator_state", f"{tensor.numel()} bytes",
                              "the state of a CPU torch.Generator",
                              "The checkpoint came from another torch build or device.") from error
        return _Restore(iteration=iteration, source=saved, generator_state=tensor)
    if saved == "seedable":
        seed = block.get("initial_seed")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise field_error(f"{BLOCK_KEY}.initial_seed", seed, "an integer",
                              "The state was edited or damaged; use an earlier checkpoint.")
        return _Restore(iteration=iteration, source=saved, initial_seed=seed)
    return _Restore(iteration=iteration, source=saved)


def _apply_order(loader: Any, restore: _Restore) -> None:
    """Set the epoch and the order source; must not fail after _parse_order_state passed."""
    sampler = _leaf_sampler(loader)
    if restore.source == "generator":
        _ensure_generator(sampler).set_state(restore.generator_state)
    elif restore.source == "seedable":
        # The seed belongs to the order being resumed; a fresh process may have drawn another.
        sampler.initial_seed = restore.initial_seed
    elif restore.source == "unknown":
        _warn_unknown(sampler, "state loaded")
    # TOUCH POINT: DataLoaderShard/DataLoaderDispatcher.iteration, read by their __iter__ in
    # set_epoch(self.iteration) before the base iterator (and its sampler iterator) is built.
    loader.iteration = restore.iteration
    tracker = _tracker(loader)
    tracker.epoch = None
    tracker.epoch_start_generator = None
    tracker.pass_done = False
    tracker.current = None


def _warn_position_only(when: str) -> None:
    warnings.warn(
        f"Accelerate loader state {when} has no '{ITERATION_KEY}' (it was written without "
        f"shufflepoint.patch_accelerate): only the position is restored, not the order; the rest "
        f"of the interrupted epoch follows epoch 0's order. Checkpoints written with the patch "
        f"resume exactly.",
        ResumeWarning,
        stacklevel=4,
    )

