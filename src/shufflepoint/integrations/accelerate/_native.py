"""The native path: ``accelerator.prepare(shufflepoint.DataLoader(...))`` wraps the loader instead of
re-sharding it, and ``gather_for_metrics`` trims the padded tail by position (``_tail.tail_trim`` says
which positions; the wrapper, ``_prepared.PreparedDataLoader``, keeps them for the pass)."""

from __future__ import annotations

import functools
from typing import Any

from shufflepoint._errors import Plain, refusal
from shufflepoint._loading.agreement import watch_gloo_exit
from shufflepoint.integrations.accelerate._data_wait import log_data_wait


def _is_native(loader: Any) -> bool:
    return getattr(loader, "_shufflepoint_native", False) is True  # private: _prepared's class marks its loaders



def _make_prepare_data_loader(original: Any) -> Any:
    def prepare_data_loader(self: Any, data_loader: Any, device_placement: Any = None,
                            slice_fn_for_dispatch: Any = None) -> Any:
        # TOUCH POINT: wraps Accelerator.prepare_data_loader (accelerate/accelerator.py), which
        # re-shards any DataLoader. A shufflepoint.DataLoader already shards itself.
        # Accelerator(...) started the process group by now: a finished run on Gloo settles Gloo's worker
        # threads at exit (_loading/agreement.py). A stock loader runs no collective of ours, so without this
        # nothing registers that release, and accelerator.gather's last all_gather aborted 2 of 20 runs at exit.
        watch_gloo_exit()
        if isinstance(data_loader, _native_loader_class()):
            return _prepare_native(self, data_loader, device_placement)
        return original(self, data_loader, device_placement=device_placement,
                        slice_fn_for_dispatch=slice_fn_for_dispatch)

    prepare_data_loader.__doc__ = original.__doc__
    return prepare_data_loader


def _native_loader_class() -> Any:
    from shufflepoint._loading.loader import DataLoader

    return DataLoader


def _prepare_native(accelerator: Any, loader: Any, device_placement: Any) -> Any:
    """Wrap a shufflepoint.DataLoader for Accelerate without re-sharding it.

    Refuses what cannot hold: a loader built for another rank and world size than the Accelerator's (built
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
        raise ValueError(refusal(
            "accelerator.prepare(shufflepoint.DataLoader)", Plain(f"a loader that shards for rank {found[0]} of "
                                                                  f"{found[1]}"),
            f"rank {expected[0]} of {expected[1]}, this Accelerator's process",
            "build the loader after Accelerator(...), or pass rank=accelerator.process_index, "
            "world_size=accelerator.num_processes",
            why="likely the loader was built before Accelerator(...) started the process group"))
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
            raise ValueError(refusal(
                "accelerator.prepare(shufflepoint.DataLoader)", Plain(f"DataLoaderConfiguration({option})"),
                "the option unset", f"drop the option ({fix})",
                why="a shufflepoint.DataLoader does its own sharding and batching and cannot honour it"))
    if device_placement is None:
        device_placement = accelerator.device_placement and accelerator.distributed_type != DistributedType.XLA
    prepared = _native_wrapper_class()(
        loader, device=accelerator.device if device_placement else None,
        non_blocking=bool(getattr(accelerator, "non_blocking", False)),
        on_pass_end=functools.partial(log_data_wait, accelerator, window="accelerate pass"))
    accelerator._dataloaders.append(prepared)  # private: TOUCH POINT, what Accelerator.prepare_data_loader does
    return prepared


def _make_gather_for_metrics(original: Any) -> Any:
    def gather_for_metrics(self: Any, input_data: Any, use_gather_object: bool = False) -> Any:
        # TOUCH POINT: wraps Accelerator.gather_for_metrics (accelerate/accelerator.py), which at the
        # end of a dataloader keeps the first GradientState.remainder gathered samples. That is exact
        # for a shufflepoint tail whenever at most one rank is padded (always with 2 processes);
        # otherwise the padding sits at the end of several ranks' parts, and the real samples are
        # picked by position (tail_trim). The gather itself is the original's code path.
        active = self.gradient_state.active_dataloader
        keep = active._tail_keep if _is_native(active) and active.end_of_dataloader else None  # private: _prepared's
        if keep is None:
            return original(self, input_data, use_gather_object=use_gather_object)
        from accelerate.utils import gather_object, recursively_apply

        try:
            recursively_apply(lambda x: x, input_data, error_on_other_type=True)
            all_tensors = True
        except TypeError:
            all_tensors = False
        gathered_length = active._tail_gathered_length  # private: _prepared's tail, not the user's attribute

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
        raise TypeError(refusal(
            "skip_first_batches", Plain("a shufflepoint.DataLoader"), "an Accelerate-prepared torch DataLoader",
            "drop the skip_first_batches call and iterate the loader itself",
            why="its position is part of its state: accelerator.load_state() (or loader.load_state_dict()) already "
            "puts it at the next batch, so skipping on top would skip those batches twice"))


def _native_wrapper_class() -> Any:
    """The wrapper class, imported on first use: it subclasses Accelerate's DataLoaderStateMixin."""
    from shufflepoint.integrations.accelerate._prepared import PreparedDataLoader

    return PreparedDataLoader
