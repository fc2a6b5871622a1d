"""``PreparedDataLoader``: a shufflepoint.DataLoader as Accelerate sees it. Imports Accelerate, so it
is imported only by the native path, once Accelerate is in use."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from accelerate.data_loader import DataLoaderStateMixin
from accelerate.state import GradientState
from accelerate.utils import send_to_device

from shufflepoint.integrations.accelerate._tail import tail_trim


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

    def __init__(self, loader: Any, device: Any, non_blocking: bool,
                 on_pass_end: Callable[[Any], Any] | None = None) -> None:
        self.loader = loader
        self._on_pass_end = on_pass_end  # the pass's data wait, logged (_data_wait)
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
        self.remainder, self._tail_keep = tail_trim(self.loader)
        world_size = int(self.loader.world_size)
        self._tail_gathered_length = world_size * -(-self.remainder // world_size)
        self.gradient_state._add_dataloader(self)  # private: TOUCH POINT, as Accelerate's own loaders do

    def __iter__(self) -> Any:
        loader = self.loader
        batches = loader.batches_left()
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
            if self._on_pass_end is not None:
                self._on_pass_end(loader)
        finally:
            self.end()

    def _to_device(self, batch: Any) -> Any:
        if self.device is None:
            return batch
        return send_to_device(batch, self.device, non_blocking=self._non_blocking)

    def state_dict(self) -> dict[str, Any]:
        return cast(dict[str, Any], self.loader.state_dict())

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
