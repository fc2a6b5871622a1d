"""Accelerator.save_state / load_state: one loader state file per rank, next to the legacy single file."""

from __future__ import annotations

import inspect
import os
from typing import Any, cast

from shufflepoint.integrations.accelerate._native import _is_native
from shufflepoint.integrations.accelerate._order import _apply_order, _order_state, _parse_order_state

# Per-rank loader state files written by the patched Accelerator.save_state, next to the legacy
# name that stock Accelerate writes from every rank (upstream #4164: last writer wins).
_LEGACY_NAME = "dl_state_dict.bin"


def _rank_file_name(index: int, rank: int) -> str:
    return f"dl_state_dict_rank{rank}.bin" if index == 0 else f"dl_state_dict_{index}_rank{rank}.bin"


def _legacy_file_name(index: int) -> str:
    return _LEGACY_NAME if index == 0 else f"dl_state_dict_{index}.bin"



def _loader_checkpoint_state(loader: Any) -> dict[str, Any] | None:
    from accelerate.data_loader import DataLoaderDispatcher, DataLoaderShard

    if _is_native(loader):
        return cast(dict[str, Any], loader.state_dict())
    if type(loader) not in (DataLoaderShard, DataLoaderDispatcher):
        return None
    if getattr(loader, "use_stateful_dataloader", False):
        return cast(dict[str, Any], loader.state_dict())
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
