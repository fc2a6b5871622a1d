"""The decode actor: what one of torch's workers does for a batch, in a Ray actor on any node.

A batch is a pure function of its keys (the dataset indices, or ``(epoch, position, index)`` where samples
draw keyed randomness): ``collate(dataset.__getitems__(keys))``, or ``collate([dataset[k] for k in keys])``,
exactly as torch's fetcher reads it in a worker. So any actor computes any batch to the same bytes, and an
actor holds nothing the run's state needs.
"""

from __future__ import annotations

import os
import pickle
import socket
import sys
import traceback
from typing import Any

from shufflepoint._loading.wait import batch_begins


class Failed:
    """A batch's own exception, carried back as a value so that the trainer raises that very exception (its
    type, message and attributes), with where it happened added as a note.

    An exception whose ``__init__`` takes other arguments than its ``args`` (``ShardError(shard, message)``)
    does not survive pickle's rebuild, ``cls(*args)``; it travels as its class, ``args`` and ``__dict__``, and
    is rebuilt without ``__init__``. Only a class the trainer cannot import arrives as a ``RuntimeError``."""

    def __init__(self, error: BaseException, where: str) -> None:
        text = "".join(traceback.format_exception(error))
        self.error: BaseException | None = None
        self.parts: tuple[type[BaseException], tuple[Any, ...], dict[str, Any]] | None = None
        try:
            pickle.loads(pickle.dumps(error))
            self.error = error
        except Exception:  # rebuilt from its parts in the trainer (__setstate__)
            self.parts = (type(error), error.args, dict(vars(error)))
        self.text = f"{type(error).__name__}: {error}"
        self.note = f"raised in a shufflepoint decode actor ({where}); its traceback there:\n{text}"

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        if self.parts is not None:
            try:
                cls, args, attributes = self.parts
                error = cls.__new__(cls, *args)
                error.args = args
                error.__dict__.update(attributes)
                self.error = error
            except Exception:  # its class does not rebuild here: its text is what is left
                self.error = RuntimeError(self.text)

    def raise_it(self) -> None:
        error = self.error if self.error is not None else RuntimeError(self.text)
        if sys.version_info >= (3, 11):
            error.add_note(self.note)
            raise error
        raise error from RuntimeError(self.note)  # Python 3.10: no notes; the actor's traceback as the cause


class BatchReader:
    """Holds the dataset as served and its collate; ``read(keys)`` makes one batch. Made by ``DecodePool``."""

    def __init__(self, dataset: Any, collate: Any) -> None:
        self._dataset, self._collate = dataset, collate
        self._where = f"pid {os.getpid()} on {socket.gethostname()}"

    def ready(self) -> int:
        """The actor's process id, once it is placed and holds the dataset."""
        return os.getpid()

    def read(self, keys: list[Any]) -> Any:
        batch_begins()  # the data wait's read seconds of this batch, not of the actor's life (wait.py)
        try:
            getitems = getattr(self._dataset, "__getitems__", None)
            samples = getitems(keys) if callable(getitems) else [self._dataset[key] for key in keys]
            return self._collate(samples)
        except Exception as error:  # the sample's own error, raised in the trainer (Failed.raise_it)
            return Failed(error, self._where)
