"""What one ``iter(ResumableSampler)`` has yielded, counted without a Python call per index."""

from __future__ import annotations

from collections.abc import Iterator

from shufflepoint._core.cut import Cut


class Progress:
    """How many indices one ``iter(sampler)`` has yielded, read without a Python call per index.

    The indices reach torch through ``itertools.chain`` over list iterators (C speed); the count is
    the finished chunks plus what the current chunk's iterator has given out (its length minus its
    ``__length_hint__``). It does not hold the chain, so there is no reference cycle.
    """

    __slots__ = ("epoch", "cut", "_current", "_current_size", "_done_before")

    def __init__(self, epoch: int, start: Cut) -> None:
        self.epoch, self.cut = epoch, start
        self._current: Iterator[int] = iter(())
        self._current_size = 0
        self._done_before = 0  # indices yielded from earlier chunks

    @property
    def yielded(self) -> int:
        left = int(self._current.__length_hint__())  # type: ignore[attr-defined]
        return self._done_before + self._current_size - left

    def track(self, chunks: Iterator[list[int]]) -> Iterator[Iterator[int]]:
        for chunk in chunks:
            self._done_before += self._current_size
            self._current, self._current_size = iter(chunk), len(chunk)
            yield self._current
        self._done_before += self._current_size
        self._current, self._current_size = iter(()), 0
