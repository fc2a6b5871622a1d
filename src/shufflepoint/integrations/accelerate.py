"""Exact resume of the data order for stock Hugging Face Accelerate: ``patch_accelerate()``.

With ``DataLoaderConfiguration(use_stateful_dataloader=True)``, stock Accelerate (1.13 to 1.15)
checkpoints the *position* of a prepared loader but not its *order*: the epoch counter
``iteration`` that seeds the shuffle is never saved, nor is the private shuffle generator, so new
processes replay epoch 0's permutation at the saved cursor (Accelerate issue #4195). One call
before ``accelerator.prepare(...)`` fixes that, and the bug family around it::

    import shufflepoint
    shufflepoint.patch_accelerate()          # once, before accelerator.prepare(...)

    loader = accelerator.prepare(DataLoader(dataset, batch_size=4, shuffle=True))
    state = loader.state_dict()              # now carries "_iteration" and the order source
    ...                                      # new processes, same script:
    loader.load_state_dict(state)            # same samples, same order, every rank

What the saved state holds, next to torchdata's own keys:

- ``_iteration``: the epoch the next pass serves (the key upstream PR #4238 uses). A state taken
  after the last batch of epoch ``e`` (inside the loop or after it) says ``e + 1``: the next pass
  is the next epoch, as torchdata itself does for a finished iterator.
- ``_shufflepoint``: where the order comes from, and what pins it. ``order_source`` is one of
  ``generator`` (a ``RandomSampler`` and its generator's state at the start of the epoch, before
  the permutation was drawn), ``seedable`` (Accelerate's ``SeedableRandomSampler``: its seed; the
  epoch does the rest), ``fixed`` (no shuffle, or an order that is a pure function of the epoch:
  ``SequentialSampler``, ``DistributedSampler``), ``dataset`` (an iterable dataset: its own order,
  given the epoch) or ``unknown`` (any other sampler: ``ResumeWarning`` at save and at load).

Native path: with the patch installed, ``accelerator.prepare(shufflepoint.DataLoader(...))`` wraps
the loader (``PreparedDataLoader``) instead of re-sharding it: batches go to the device,
``GradientState`` learns where each pass ends (``accumulate()`` syncs on the last batch,
``gather_for_metrics()`` drops the tail padding, each sample once), and ``save_state`` /
``load_state`` checkpoint the loader's own state. Without the patch, Accelerate rebuilds the loader
and shards it a second time; the loader refuses to be iterated that way (``RuntimeError`` naming
``patch_accelerate()``), at the first batch. ``skip_first_batches`` of a shufflepoint loader is
refused: its position is already in its state.

Every place where this module reaches into Accelerate (or torchdata) is a *touch point*, listed
in ``_TOUCH_POINTS`` and marked ``TOUCH POINT`` in a comment naming the Accelerate source it
replaces or reads. The patch refuses Accelerate versions it was not tested on
(``TESTED_ACCELERATE``), unless ``force=True``.
"""

from __future__ import annotations

import base64
import importlib.metadata
import inspect
import os
import warnings
import weakref
from dataclasses import dataclass
from typing import Any

from shufflepoint._errors import ResumeWarning, field_error

__all__ = ["TESTED_ACCELERATE", "patch_accelerate", "unpatch_accelerate"]

# The versions every test of this module ran on: from the first (inclusive) to the second
# (exclusive). Each touch point below was read in the sources of 1.13.0, 1.14.0 and 1.15.0.
TESTED_ACCELERATE: tuple[str, str] = ("1.13.0", "1.16.0")

ITERATION_KEY = "_iteration"
BLOCK_KEY = "_shufflepoint"
BLOCK_FORMAT = 1
_ORDER_SOURCES = ("generator", "seedable", "fixed", "dataset", "unknown")

# Per-rank loader state files written by the patched Accelerator.save_state, next to the legacy
# name that stock Accelerate writes from every rank (upstream #4164: last writer wins).
_LEGACY_NAME = "dl_state_dict.bin"

_TOUCH_POINTS = (
    "accelerate.data_loader.DataLoaderShard.state_dict / .load_state_dict (inherited from "
    "DataLoaderAdapter): add and read _iteration and the order source",
    "accelerate.data_loader.DataLoaderDispatcher.state_dict / .load_state_dict: same",
    "accelerate.data_loader.DataLoaderShard.begin / .end and DataLoaderDispatcher.begin / .end "
    "(DataLoaderStateMixin): the epoch-start and epoch-end hooks",
    "accelerate.data_loader.DataLoaderAdapter.dl_state_dict: the snapshot state_dict() returns",
    "accelerate.data_loader.DataLoaderShard.iteration / DataLoaderDispatcher.iteration: the epoch",
    "accelerate.data_loader.skip_first_batches (also bound in accelerate.accelerator and "
    "accelerate): carry the epoch (#4071) and report the epoch's end to the source loader",
    "accelerate.accelerator.save_accelerator_state / load_accelerator_state: per-rank files",
    "accelerate.accelerator.Accelerator.prepare_data_loader: a shufflepoint.DataLoader is wrapped, not "
    "re-sharded, and listed in Accelerator._dataloaders",
    "accelerate.accelerator.Accelerator.gather_for_metrics: the padded tail of a shufflepoint.DataLoader "
    "with more than one padded rank is trimmed by position",
    "accelerate.data_loader.DataLoaderStateMixin and accelerate.state.GradientState._add_dataloader: "
    "end_of_dataloader and remainder of a prepared shufflepoint.DataLoader",
    "torchdata StatefulDataLoader._initial_iter_for_state_dict: the iterator built by the eager "
    "state_dict() in DataLoaderAdapter.__init__ (#4204)",
)


@dataclass
class _EpochTracker:
    """What a prepared loader (and the skip_first_batches loaders made from it) knows about the
    pass in progress. ``epoch`` is None until the first pass starts."""

    epoch: int | None = None
    epoch_start_generator: str | None = None
    pass_done: bool = False
    # The loader iterating the pass in progress, held weakly: no cycle keeps a loader alive.
    current: weakref.ref | None = None


@dataclass
class _Patch:
    originals: list[tuple[Any, str, bool, Any]]  # (owner, name, owned_in_dict, value)
    version: str


_PATCH: _Patch | None = None


# ----------------------------------------------------------------------------------------------
# Public entry points
# ----------------------------------------------------------------------------------------------


def patch_accelerate(force: bool = False) -> None:
    """Make stock Accelerate checkpoint and resume the data order exactly. Idempotent.

    Call once per process, before ``accelerator.prepare(...)``. Checks the installed Accelerate
    against ``TESTED_ACCELERATE`` and refuses any other version with ``RuntimeError``;
    ``force=True`` patches anyway and says so with a ``ResumeWarning``.

    >>> import shufflepoint
    >>> shufflepoint.patch_accelerate()
    >>> shufflepoint.patch_accelerate()      # a second call changes nothing
    >>> shufflepoint.unpatch_accelerate()    # the original methods are back
    """
    global _PATCH
    if _PATCH is not None:
        return
    version = _installed_accelerate_version()
    if not _version_in_range(version):
        low, high = TESTED_ACCELERATE
        if not force:
            raise RuntimeError(
                f"shufflepoint.patch_accelerate: Accelerate {version} is installed, but the patch "
                f"was tested on {low} up to (not including) {high}. It reaches into Accelerate's "
                f"internals, which change between releases, so an untested version could resume "
                f"silently wrong. Install a tested version (pip install 'accelerate>={low},<{high}'), "
                f"or call patch_accelerate(force=True) to try anyway."
            )
        warnings.warn(
            f"patch_accelerate(force=True) on Accelerate {version}, outside the tested range "
            f"{low} to {high} (exclusive): exact resume is not guaranteed; run "
            f"`shufflepoint audit` on your pipeline before trusting it.",
            ResumeWarning,
            stacklevel=2,
        )
    import accelerate
    import accelerate.accelerator as accelerator_module
    import accelerate.data_loader as data_loader_module

    shard = data_loader_module.DataLoaderShard
    dispatcher = data_loader_module.DataLoaderDispatcher
    replacements: list[tuple[Any, str, Any]] = []
    for cls in (shard, dispatcher):
        replacements += [
            (cls, "state_dict", _make_state_dict(cls.state_dict)),
            (cls, "load_state_dict", _make_load_state_dict(cls.load_state_dict)),
            (cls, "begin", _make_begin(cls.begin)),
            (cls, "end", _make_end(cls.end)),
        ]
    original_skip = data_loader_module.skip_first_batches
    patched_skip = _make_skip_first_batches(original_skip)
    for module in (data_loader_module, accelerator_module, accelerate):
        if getattr(module, "skip_first_batches", None) is original_skip:
            replacements.append((module, "skip_first_batches", patched_skip))
    replacements += [
        (accelerator_module, "save_accelerator_state",
         _make_save_accelerator_state(accelerator_module.save_accelerator_state)),
        (accelerator_module, "load_accelerator_state",
         _make_load_accelerator_state(accelerator_module.load_accelerator_state)),
        (accelerator_module.Accelerator, "prepare_data_loader",
         _make_prepare_data_loader(accelerator_module.Accelerator.prepare_data_loader)),
        (accelerator_module.Accelerator, "gather_for_metrics",
         _make_gather_for_metrics(accelerator_module.Accelerator.gather_for_metrics)),
    ]
    originals = []
    for owner, name, value in replacements:
        owned = name in vars(owner)
        originals.append((owner, name, owned, vars(owner)[name] if owned else None))
        setattr(owner, name, value)
    _PATCH = _Patch(originals=originals, version=version)


def unpatch_accelerate() -> None:
    """Put back every original that ``patch_accelerate()`` replaced. A no-op when not patched.

    Loaders prepared while patched keep the state they gathered, but from now on behave as stock
    Accelerate does.
    """
    global _PATCH
    if _PATCH is None:
        return
    for owner, name, owned, value in reversed(_PATCH.originals):
        if owned:
            setattr(owner, name, value)
        else:
            delattr(owner, name)
    _PATCH = None


def _installed_accelerate_version() -> str:
    try:
        return importlib.metadata.version("accelerate")
    except importlib.metadata.PackageNotFoundError:
        raise RuntimeError(
            "shufflepoint.patch_accelerate: Accelerate is not installed. "
            "Install it (pip install 'shufflepoint[accelerate]') or drop the call."
        ) from None


def _version_in_range(version: str) -> bool:
    def release(text: str) -> tuple[int, ...] | None:
        parts = text.split(".")
        if len(parts) != 3 or not all(p.isdigit() for p in parts):
            return None  # pre-releases, dev and local builds are not a tested version
        return tuple(int(p) for p in parts)

    found, low, high = release(version), release(TESTED_ACCELERATE[0]), release(TESTED_ACCELERATE[1])
    assert low is not None and high is not None
    return found is not None and low <= found < high


# ----------------------------------------------------------------------------------------------
# The order source of a prepared loader
# ----------------------------------------------------------------------------------------------


def _tracker(loader: Any) -> _EpochTracker:
    # Read from __dict__: DataLoaderAdapter.__getattr__ would forward a miss to the base loader.
    found = loader.__dict__.get("_shufflepoint_tracker")
    if found is None:
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


# ----------------------------------------------------------------------------------------------
# The replaced methods
# ----------------------------------------------------------------------------------------------


def _make_state_dict(original: Any) -> Any:
    def state_dict(self: Any) -> dict[str, Any]:
        # TOUCH POINT: replaces DataLoaderAdapter.state_dict (accelerate/data_loader.py), which
        # returns the snapshot self.dl_state_dict alone: no epoch, no order.
        state = dict(original(self))
        state.update(_order_state(self))
        return state

    state_dict.__doc__ = "torchdata's loader state plus the epoch and order source (shufflepoint)."
    return state_dict


def _make_load_state_dict(original: Any) -> Any:
    def load_state_dict(self: Any, state_dict: dict[str, Any]) -> None:
        # TOUCH POINT: replaces DataLoaderAdapter.load_state_dict (accelerate/data_loader.py),
        # which hands the state to torchdata and leaves iteration at 0 (#4195).
        restore = _parse_order_state(self, state_dict)
        if restore is None:
            _warn_position_only("loaded")
            original(self, state_dict)
            return
        position = {k: v for k, v in state_dict.items() if k not in (ITERATION_KEY, BLOCK_KEY)}
        _apply_order(self, restore)
        if restore.source == "epoch-only":
            original(self, position)
            return
        if position.get("_iterator_finished", False):
            # The saved epoch was over and _iteration already names the next one: start it fresh
            # (torchdata would build a finished iterator first and then a fresh one).
            original(self, {})
        else:
            original(self, position)
            # TOUCH POINT: DataLoaderAdapter.dl_state_dict is what state_dict() returns until the
            # next batch; make it the loaded position, so a save before that batch is not cursor 0.
            self.dl_state_dict = dict(position)

    load_state_dict.__doc__ = "Restore the epoch and order source, then torchdata's position (shufflepoint)."
    return load_state_dict


def _make_begin(original: Any) -> Any:
    def begin(self: Any) -> None:
        # TOUCH POINT: wraps DataLoaderStateMixin.begin, which DataLoaderShard.__iter__ calls after
        # synchronize_rng_states and DataLoaderDispatcher.__iter__ calls first; both then call
        # set_epoch(self.iteration) and only then build the base iterator, which draws the
        # permutation. So here is the start of the epoch, before the draw.
        original(self)
        tracker = _tracker(self)
        sampler = _leaf_sampler(self)
        if _order_source(sampler) in ("generator", "seedable"):
            _drop_eager_iterator(self)
        if _order_source(sampler) == "generator":
            tracker.epoch_start_generator = _encode_generator(_ensure_generator(sampler))
        else:
            tracker.epoch_start_generator = None
        tracker.epoch = int(self.iteration)
        tracker.pass_done = False
        tracker.current = weakref.ref(self)

    return begin


def _make_end(original: Any) -> Any:
    def end(self: Any) -> None:
        # TOUCH POINT: wraps DataLoaderStateMixin.end, called by both __iter__ after the last batch
        # (and after iteration += 1).
        original(self)
        tracker = _tracker(self)
        if tracker.current is not None and tracker.current() is self:
            tracker.pass_done = True
        source = self.__dict__.get("_shufflepoint_source")
        if source is not None:
            # A skip_first_batches loader finished the epoch its source loader was resumed in: the
            # source must serve the next one, not repeat this one (upstream #4233, mechanism 2).
            source.iteration = self.iteration

    return end


def _drop_eager_iterator(loader: Any) -> None:
    """Discard the iterator that DataLoaderAdapter.__init__ built for its eager state_dict().

    TOUCH POINT: torchdata StatefulDataLoader._initial_iter_for_state_dict. With num_workers > 0
    that iterator already sent indices to its workers, drawn at prepare() time, before the RNG
    sync and before the seedable sampler was swapped in, and the first pass would reuse it
    (upstream #4204). ``load_state_dict({})`` is torchdata's public way to drop it. Only for a
    shuffled order: an unshuffled one was drawn right, and keeping the iterator keeps its seeds.
    """
    base = loader.__dict__["base_dataloader"]
    if getattr(base, "num_workers", 0) > 0 and getattr(base, "_initial_iter_for_state_dict", False):
        base.load_state_dict({})


def _make_skip_first_batches(original: Any) -> Any:
    def skip_first_batches(dataloader: Any, num_batches: int = 0) -> Any:
        # TOUCH POINT: wraps accelerate.data_loader.skip_first_batches. Before 1.15 the new loader
        # starts at iteration 0 (#4071); in every version the source never learns that the epoch
        # ended (#4233). The new loader shares the source's epoch tracker.
        from accelerate.data_loader import DataLoaderDispatcher, DataLoaderShard

        _refuse_skipping_native(dataloader)
        skipping = original(dataloader, num_batches=num_batches)
        kinds = (DataLoaderShard, DataLoaderDispatcher)
        if type(skipping) in kinds and type(dataloader) in kinds:
            skipping.iteration = dataloader.iteration
            skipping.__dict__["_shufflepoint_tracker"] = _tracker(dataloader)
            skipping.__dict__["_shufflepoint_source"] = dataloader
        return skipping

    skip_first_batches.__doc__ = original.__doc__
    return skip_first_batches


# ----------------------------------------------------------------------------------------------
# Accelerator.save_state / load_state: one loader state file per rank
# ----------------------------------------------------------------------------------------------


def _rank_file_name(index: int, rank: int) -> str:
    return f"dl_state_dict_rank{rank}.bin" if index == 0 else f"dl_state_dict_{index}_rank{rank}.bin"


def _legacy_file_name(index: int) -> str:
    return _LEGACY_NAME if index == 0 else f"dl_state_dict_{index}.bin"


def _is_native(loader: Any) -> bool:
    return getattr(loader, "_shufflepoint_native", False) is True


def _loader_checkpoint_state(loader: Any) -> dict[str, Any] | None:
    from accelerate.data_loader import DataLoaderDispatcher, DataLoaderShard

    if _is_native(loader):
        return loader.state_dict()
    if type(loader) not in (DataLoaderShard, DataLoaderDispatcher):
        return None
    if getattr(loader, "use_stateful_dataloader", False):
        return loader.state_dict()
    # Without torchdata the position is the user's (skip_first_batches); the order is ours.
    return _order_state(loader)


def _make_save_accelerator_state(original: Any) -> Any:
    signature = inspect.signature(original)

    def save_accelerator_state(*args: Any, **kwargs: Any) -> Any:
        # TOUCH POINT: wraps accelerate.checkpointing.save_accelerator_state as bound in
        # accelerate.accelerator (Accelerator.save_state calls it by that name). Stock writes
        # dl_state_dict.bin from every rank to the same path (#4164) and nothing about the order.
        # Here the original saves everything but the loaders, then each rank writes its own file.
        # (Its other loader branch, sampler.bin for an IterableDatasetShard with a
        # SeedableRandomSampler, cannot occur: that dataset has no such sampler.)
        bound = signature.bind(*args, **kwargs)
        loaders = list(bound.arguments["dataloaders"])
        bound.arguments["dataloaders"] = []
        result = original(*bound.args, **bound.kwargs)
        import torch

        output_dir = bound.arguments["output_dir"]
        rank = int(bound.arguments["process_index"])
        for index, loader in enumerate(loaders):
            state = _loader_checkpoint_state(loader)
            if state is None:
                continue
            torch.save(state, os.path.join(output_dir, _rank_file_name(index, rank)))
            if rank == 0:
                # Readable by an unpatched Accelerate too (it loads this name on every rank).
                torch.save(state, os.path.join(output_dir, _legacy_file_name(index)))
        return result

    save_accelerator_state.__doc__ = original.__doc__
    return save_accelerator_state


def _make_load_accelerator_state(original: Any) -> Any:
    signature = inspect.signature(original)

    def load_accelerator_state(*args: Any, **kwargs: Any) -> Any:
        # TOUCH POINT: wraps accelerate.checkpointing.load_accelerator_state as bound in
        # accelerate.accelerator. Each rank reads its own file, falling back to the legacy
        # single file of a stock checkpoint.
        from accelerate.data_loader import DataLoaderDispatcher, DataLoaderShard
        from accelerate.utils import load

        bound = signature.bind(*args, **kwargs)
        loaders = list(bound.arguments["dataloaders"])
        bound.arguments["dataloaders"] = []
        result = original(*bound.args, **bound.kwargs)
        input_dir = bound.arguments["input_dir"]
        rank = int(bound.arguments["process_index"])
        load_kwargs = bound.arguments.get("load_kwargs") or {}
        for index, loader in enumerate(loaders):
            path = os.path.join(input_dir, _rank_file_name(index, rank))
            if not os.path.exists(path):
                path = os.path.join(input_dir, _legacy_file_name(index))
            if not os.path.exists(path):
                continue
            state = load(path, **load_kwargs)
            if _is_native(loader) or getattr(loader, "use_stateful_dataloader", False):
                loader.load_state_dict(state)
            elif type(loader) in (DataLoaderShard, DataLoaderDispatcher):
                restore = _parse_order_state(loader, state)
                if restore is not None:
                    _apply_order(loader, restore)
        return result

    load_accelerator_state.__doc__ = original.__doc__
    return load_accelerator_state


# ----------------------------------------------------------------------------------------------
# Native path: accelerator.prepare(shufflepoint.DataLoader(...))
# ----------------------------------------------------------------------------------------------


def _make_prepare_data_loader(original: Any) -> Any:
    def prepare_data_loader(self: Any, data_loader: Any, device_placement: Any = None,
                            slice_fn_for_dispatch: Any = None) -> Any:
        # TOUCH POINT: wraps Accelerator.prepare_data_loader (accelerate/accelerator.py), which
        # re-shards any DataLoader. A shufflepoint.DataLoader already shards itself.
        if isinstance(data_loader, _native_loader_class()):
            return _prepare_native(self, data_loader, device_placement)
        return original(self, data_loader, device_placement=device_placement,
                        slice_fn_for_dispatch=slice_fn_for_dispatch)

    prepare_data_loader.__doc__ = original.__doc__
    return prepare_data_loader


def _native_loader_class() -> Any:
    from shufflepoint._loader import DataLoader

    return DataLoader


def _prepare_native(accelerator: Any, loader: Any, device_placement: Any) -> Any:
    """Wrap a shufflepoint.DataLoader for Accelerate without re-sharding it.

    Refuses what cannot hold: a loader built for another rank layout than the Accelerator's (built
    before ``Accelerator(...)`` started the process group, say), and the DataLoaderConfiguration
    options that change who reads what (``split_batches``, ``dispatch_batches``,
    ``even_batches=False``). ``use_stateful_dataloader``, ``use_seedable_sampler`` and
    ``data_seed`` do not apply: the order and its state are shufflepoint's.

    TOUCH POINTS: Accelerator.num_processes / .process_index / .split_batches / .dispatch_batches /
    .even_batches / .device_placement / .device / .non_blocking / .distributed_type (read), and
    Accelerator._dataloaders (appended to, as stock prepare_data_loader does: save_state and
    load_state checkpoint what is listed there).
    """
    from accelerate.utils import DistributedType

    found = (int(loader.rank), int(loader.world_size))
    expected = (int(accelerator.process_index), int(accelerator.num_processes))
    if found != expected:
        raise ValueError(
            f"accelerator.prepare(shufflepoint.DataLoader): the loader shards for rank {found[0]} of "
            f"{found[1]}, but this Accelerator is process {expected[0]} of {expected[1]}. Likely cause: "
            f"the loader was built before Accelerator(...) started the process group. Fix: build the "
            f"loader after Accelerator(...), or pass rank=accelerator.process_index, "
            f"world_size=accelerator.num_processes."
        )
    refused = [
        (bool(accelerator.split_batches), "split_batches=True",
         "batch_size is per process here; pass the per-process batch size"),
        (accelerator.dispatch_batches is True, "dispatch_batches=True",
         "every process reads its own shard here; leave dispatch_batches unset"),
        (accelerator.even_batches is False, "even_batches=False",
         "the tail is padded evenly here (drop_last=False) or dropped (drop_last=True); choose with drop_last"),
    ]
    for is_set, option, fix in refused:
        if is_set:
            raise ValueError(
                f"accelerator.prepare(shufflepoint.DataLoader): DataLoaderConfiguration({option}) is "
                f"set, but a shufflepoint.DataLoader does its own sharding and batching and cannot honour "
                f"it. Fix: drop the option ({fix})."
            )
    if device_placement is None:
        device_placement = accelerator.device_placement and accelerator.distributed_type != DistributedType.XLA
    prepared = _native_wrapper_class()(
        loader, device=accelerator.device if device_placement else None,
        non_blocking=bool(getattr(accelerator, "non_blocking", False)))
    accelerator._dataloaders.append(prepared)
    return prepared


def _tail_trim(loader: Any) -> tuple[int, list[int] | None]:
    """What ``gather_for_metrics`` must keep of the last gathered batch of a pass starting now.

    Returns ``(remainder, keep)``: ``remainder`` is the number of real samples in the last global
    step (0 when nothing is padded), which Accelerate keeps as a prefix of the gathered batch.
    ``keep`` is None when that prefix is exactly the real samples; otherwise it lists their
    positions. The gather is rank-major and the tail strided, so with r real samples left, each
    rank's last batch has m = ceil(r / W) samples and rank k's t-th is real when k + W*t < r. Two
    ranks, r = 3 (one padded sample, P)::

        rank 0: [s0, s2]   rank 1: [s1, P]   gathered: [s0, s2, s1, P]   keep the first 3

    Four ranks, r = 5: ``[s0, s4 | s1, P | s2, P | s3, P]``, keep positions 0, 1, 2, 4, 6: no prefix.
    """
    from shufflepoint._plan import Layout

    layout = Layout(len(loader.dataset), int(loader.world_size), int(loader.batch_size), bool(loader.drop_last))
    remaining = layout.n - int(loader.cursor)
    real = remaining % layout.step_size
    if layout.drop_last or real == 0:
        return 0, None
    world_size = layout.world_size
    per_rank = -(-real // world_size)
    keep = [rank * per_rank + t for rank in range(world_size) for t in range(per_rank) if rank + world_size * t < real]
    return real, (None if keep == list(range(real)) else keep)


def _make_gather_for_metrics(original: Any) -> Any:
    def gather_for_metrics(self: Any, input_data: Any, use_gather_object: bool = False) -> Any:
        # TOUCH POINT: wraps Accelerator.gather_for_metrics (accelerate/accelerator.py), which at the
        # end of a dataloader keeps the first GradientState.remainder gathered samples. That is exact
        # for a shufflepoint tail whenever at most one rank is padded (always with 2 processes);
        # otherwise the padding sits at the end of several ranks' parts, and the real samples are
        # picked by position (_tail_trim). The gather itself is the original's code path.
        active = self.gradient_state.active_dataloader
        keep = active._tail_keep if _is_native(active) and active.end_of_dataloader else None
        if keep is None:
            return original(self, input_data, use_gather_object=use_gather_object)
        from accelerate.utils import gather_object, recursively_apply

        try:
            recursively_apply(lambda x: x, input_data, error_on_other_type=True)
            all_tensors = True
        except TypeError:
            all_tensors = False
        gathered_length = active._tail_gathered_length

        def select(data: Any) -> Any:
            if len(data) != gathered_length:
                return data[: active.remainder]  # not one row per sample: Accelerate's own trim
            if isinstance(data, list):
                return [data[i] for i in keep]
            import torch

            return data[torch.tensor(keep, device=data.device)]

        if use_gather_object or not all_tensors:
            return select(gather_object(input_data))
        return recursively_apply(select, self.gather(input_data))

    gather_for_metrics.__doc__ = original.__doc__
    return gather_for_metrics


def _refuse_skipping_native(dataloader: Any) -> None:
    if _is_native(dataloader) or isinstance(dataloader, _native_loader_class()):
        raise TypeError(
            "skip_first_batches: found a shufflepoint.DataLoader, expected an Accelerate-prepared torch "
            "DataLoader. A shufflepoint.DataLoader's position is part of its state: accelerator.load_state() "
            "(or loader.load_state_dict()) already puts it at the next batch, so skipping on top would skip "
            "those batches twice. Fix: drop the skip_first_batches call and iterate the loader itself."
        )


_NATIVE_WRAPPER: Any = None


def _native_wrapper_class() -> Any:
    """Build (once) the wrapper class; it subclasses Accelerate's DataLoaderStateMixin, which can
    only be imported once Accelerate is."""
    global _NATIVE_WRAPPER
    if _NATIVE_WRAPPER is not None:
        return _NATIVE_WRAPPER
    from accelerate.data_loader import DataLoaderStateMixin
    from accelerate.state import GradientState
    from accelerate.utils import send_to_device

    class PreparedDataLoader(DataLoaderStateMixin):
        """A shufflepoint.DataLoader as Accelerate sees it: batches on the device, GradientState
        told where the epoch ends. Not a torch DataLoader: it wraps one (``.loader``), and says so.

        The sharding, the order and the state stay the loader's: ``state_dict()``,
        ``load_state_dict()``, ``set_epoch()``, ``epoch``, ``cursor`` and every other attribute are
        the loader's own. Nothing is read ahead: the last batch of a pass is known by arithmetic
        (every rank takes the same number of steps), so what the loader counts as received is
        exactly what the training loop received, also after a ``break``.

        TOUCH POINTS: DataLoaderStateMixin (end_of_dataloader, remainder, reset, end) and
        GradientState._add_dataloader (accelerate/data_loader.py, accelerate/state.py), which
        accumulate() and gather_for_metrics() read through GradientState.
        """

        _shufflepoint_native = True
        _is_accelerate_prepared = True

        def __init__(self, loader: Any, device: Any, non_blocking: bool) -> None:
            self.loader = loader
            self.device = device
            self._non_blocking = non_blocking
            self._drop_last = bool(loader.drop_last)
            self.gradient_state = GradientState()
            self._tail_keep: list[int] | None = None
            self._tail_gathered_length = 0

        @property
        def dataset(self) -> Any:
            return self.loader.dataset

        @property
        def batch_size(self) -> int:
            return int(self.loader.batch_size)

        @property
        def total_batch_size(self) -> int:
            return self.batch_size * int(self.loader.world_size)

        @property
        def total_dataset_length(self) -> int:
            return len(self.loader.dataset)

        def __len__(self) -> int:
            return len(self.loader)

        def begin(self) -> None:
            """Register with GradientState for the pass that starts at the loader's cursor."""
            self.reset()
            self.remainder, self._tail_keep = _tail_trim(self.loader)
            world_size = int(self.loader.world_size)
            self._tail_gathered_length = world_size * -(-self.remainder // world_size)
            self.gradient_state._add_dataloader(self)

        def __iter__(self) -> Any:
            from shufflepoint._plan import Layout

            loader = self.loader
            layout = Layout(len(loader.dataset), int(loader.world_size), int(loader.batch_size),
                            bool(loader.drop_last))
            batches = layout.batches_per_rank(int(loader.cursor))
            self.begin()
            try:
                received = 0
                for batch in loader:
                    received += 1
                    if received == batches:
                        self.end_of_dataloader = True
                    yield self._to_device(batch)
                if received != batches:
                    raise RuntimeError(
                        f"shufflepoint: the loader gave {received} batches in this pass, expected "
                        f"{batches}; please report this as a bug"
                    )
            finally:
                self.end()

        def _to_device(self, batch: Any) -> Any:
            if self.device is None:
                return batch
            return send_to_device(batch, self.device, non_blocking=self._non_blocking)

        def state_dict(self) -> dict[str, Any]:
            return self.loader.state_dict()

        def load_state_dict(self, state: dict[str, Any]) -> None:
            self.loader.load_state_dict(state)

        def set_epoch(self, epoch: int) -> None:
            self.loader.set_epoch(epoch)

        def __getattr__(self, name: str) -> Any:
            if name == "loader":
                raise AttributeError(name)
            return getattr(self.loader, name)

        def __repr__(self) -> str:
            return f"PreparedDataLoader(device={self.device!s}, loader={self.loader!r})"

    _NATIVE_WRAPPER = PreparedDataLoader
    return PreparedDataLoader
