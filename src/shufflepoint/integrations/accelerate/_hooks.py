"""The replaced methods of Accelerate's prepared loaders: state_dict, load_state_dict, begin, end,
and skip_first_batches. Each wraps the original and names the Accelerate source it replaces."""

from __future__ import annotations

import weakref
from typing import Any

from shufflepoint.integrations.accelerate._native import _refuse_skipping_native
from shufflepoint.integrations.accelerate._order import (
    BLOCK_KEY,
    ITERATION_KEY,
    _apply_order,
    _encode_generator,
    _ensure_generator,
    _leaf_sampler,
    _order_source,
    _order_state,
    _parse_order_state,
    _tracker,
    _warn_position_only,
)


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
    if getattr(base, "num_workers", 0) > 0 and getattr(base, "_initial_iter_for_state_dict", False):  # private: TOUCH
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
