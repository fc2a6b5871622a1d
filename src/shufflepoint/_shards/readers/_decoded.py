"""The decoded Parquet row groups of a process, under one byte budget for all its open files.

A shuffled block asks for its rows in any order, so a decoded group is worth keeping while the
block lasts (keeping only the last one decoded one group per sample: 74 µs for 100 rows of 1 KiB).
Up to 0.3 each open file kept 32 MiB, so a process with its default two blocks of small shards open
(up to 512 files) could hold gigabytes. Now every file of the process shares ``limit`` bytes
(``SHUFFLEPOINT_DECODED_BYTES``, default 256 MiB), least recently used group out first; a group
larger than the whole budget is decoded for its read and not kept. A forked DataLoader worker
starts with an empty cache (its parent's groups are the parent's).

Words: docs/glossary.md (decode budget, row group, block).
"""

from __future__ import annotations

import itertools
import os
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from shufflepoint import _settings as settings
from shufflepoint._errors import refusal

ENV = settings.DECODED_BYTES


class DecodedGroups:
    """(owner, group) -> decoded table, at most ``limit`` bytes in all (``table.nbytes``)."""

    def __init__(self, limit: int | None = None) -> None:
        self._limit = limit  # None: ``SHUFFLEPOINT_DECODED_BYTES``, read at first use (never at import)
        self.held = 0
        self._tables: OrderedDict[tuple[int, int], Any] = OrderedDict()
        self._owners = itertools.count()
        self._pid = os.getpid()

    @property
    def limit(self) -> int:
        """The byte budget: the one set, else ``SHUFFLEPOINT_DECODED_BYTES`` (read once, at first use)."""
        if self._limit is None:
            self._limit = settings.decoded_bytes()
        return self._limit

    def set_limit(self, limit: int) -> None:
        """A new budget, applied at once (least recently used groups out until it holds)."""
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise ValueError(refusal("limit", limit, "a number of bytes >= 0", "pass a number of bytes"))
        self._limit = limit
        self._evict_until(limit)

    def _evict_until(self, budget: int) -> None:
        while self._tables and self.held > budget:
            self._let_go(self._tables.popitem(last=False)[1])

    def _let_go(self, table: Any) -> None:
        """Stop counting ``table``; tell whoever laid its values out elsewhere (``release``)."""
        self.held -= int(table.nbytes)
        release = getattr(table, "release", None)
        if callable(release):
            release()

    def __contains__(self, key: tuple[int, int]) -> bool:
        """Whether (owner, group) is kept (a group larger than the budget is decoded, not kept)."""
        return key in self._tables

    def owner(self) -> int:
        """A key for one open file's groups."""
        return next(self._owners)

    def get(self, owner: int, group: int, decode: Callable[[], Any]) -> Any:
        """The decoded group, from the cache or ``decode()`` (then kept if it fits the budget)."""
        if os.getpid() != self._pid:
            self._tables.clear()
            self.held, self._pid = 0, os.getpid()
        key = (owner, group)
        table = self._tables.get(key)
        if table is not None:
            self._tables.move_to_end(key)
            return table
        table = decode()
        size = int(table.nbytes)
        if size <= self.limit:
            self._evict_until(self.limit - size)
            self._tables[key] = table
            self.held += size
        return table

    def drop(self, owner: int) -> None:
        """Forget the groups of a file being closed."""
        for key in [k for k in self._tables if k[0] == owner]:
            self._let_go(self._tables.pop(key))


GROUPS = DecodedGroups()
