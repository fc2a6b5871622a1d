"""The data wait of a loader under Accelerate, logged with the run's logger: ``accelerator.log`` where trackers are
set (``Accelerator(log_with=...)`` and ``init_trackers``), else the ``logging`` module (logger ``shufflepoint``).

A prepared ``shufflepoint.DataLoader`` logs each pass's wait at the pass's end; ``log_data_wait`` logs the window
since its last call, at the steps a training loop chooses. Words: docs/glossary.md (data wait, wait share).
"""

from __future__ import annotations

import logging
from typing import Any

from shufflepoint._errors import Plain, refusal
from shufflepoint._loading.loader import DataLoader
from shufflepoint._loading.wait import DataWait

_logger = logging.getLogger("shufflepoint")


def log_data_wait(accelerator: Any, loader: Any, step: int | None = None, *, window: str = "accelerate") -> DataWait:
    """Log this rank's data wait since the last call (of this ``window``) and return it: ``data_wait_share``,
    ``data_wait_s``, ``data_batches``, ``data_prefetch_depth`` through ``accelerator.log(values, step=step)``
    (which logs on the main process), or one ``logging`` line per rank where no tracker is set::

        for step, batch in enumerate(loader):
            ...
            if step % 100 == 0:
                log_data_wait(accelerator, loader, step)
    """
    found = loader if isinstance(loader, DataLoader) else getattr(loader, "loader", None)
    if not isinstance(found, DataLoader):
        raise TypeError(refusal("log_data_wait(loader=)", Plain(type(loader).__name__),
                                "a shufflepoint.DataLoader, or one accelerator.prepare(...) returned",
                                "pass the shufflepoint.DataLoader (prepared or not)",
                                why="only a shufflepoint.DataLoader measures its data wait"))
    wait = found.data_wait(window=window)
    if wait.batches:
        if getattr(accelerator, "trackers", None):  # TOUCH POINT: Accelerator.trackers / Accelerator.log
            accelerator.log(wait.summary(), step=step)
        else:
            _logger.info("data wait%s: %s", "" if step is None else f" at step {step}", wait)
    return wait
