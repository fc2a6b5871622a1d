"""The token counts a ``Packed`` packs by: every document's tokens, counted once, and the rows they make.

A ``Shards`` corpus (without a transform) is counted by its per-shard totals, published beside it, kept
in its cache folder or counted here (``counting/count_share``): where some are still to count in a process
group, each process counts its share once the loader says it (``take_share``: the shards it reads under
``spans``) and the totals are exchanged; asked before (a ``Mixture`` asks the length when built), the
processes split the shards in contiguous runs. Any other dataset is counted here, document by document.
"""

from __future__ import annotations

from typing import Any

from shufflepoint._core.capabilities import ShardedCorpus
from shufflepoint._errors import refusal
from shufflepoint._shards.counting import token_counts
from shufflepoint._shards.counting.count_share import Resolver, Share, distributed
from shufflepoint._shards.counting.shard_counts import FullCounts, ShardCounts
from shufflepoint._shards.counting.token_counts import TokenSource

Counts = ShardCounts | FullCounts


class PackedCounts:
    """Every document's token count (``raw``, as read; ``framed``, bos/eos counted), the tokens and the rows of
    ``seq_len`` tokens per epoch. Counts still to take by share (``pending``) are taken when first asked."""

    def __init__(self, dataset: Any, source: TokenSource, seq_len: int, framing: int, workers: int | None,
                 progress: bool) -> None:
        self._seq_len, self._framing = seq_len, framing  # framing: tokens around each document (bos, eos)
        self._resolver: Resolver | None = None
        if token_counts.cacheable(dataset):
            resolver = Resolver(dataset, source.count, source.identity, workers, progress)
            if resolver.complete or not distributed():
                self._set(resolver.finish(None))
            else:
                self._resolver = resolver
        elif isinstance(dataset, ShardedCorpus):
            self._set(FullCounts(token_counts.count_shards(dataset, source.count, workers, progress)))
        else:
            self._set(FullCounts(token_counts.count_all(dataset, source.count, progress)))

    def _set(self, counts: Counts) -> None:
        self._raw, self._framed = counts, counts.framed(self._framing)
        self._tokens, self._resolver = self._framed.tokens, None
        self._rows = self._tokens // self._seq_len
        if self._rows == 0:
            raise ValueError(refusal("seq_len", self._seq_len, f"at most {self._tokens}, the corpus's tokens "
                                     "(with bos/eos): one full row", "use a smaller seq_len or more documents"))

    @property
    def pending(self) -> bool:
        """Whether counts are still to take by share (a ``repr`` takes no collective)."""
        return self._resolver is not None

    def take_share(self, rank: int, world_size: int) -> None:
        """The loader's rank and world size, before it asks the length: counts still to take are taken now, this
        process counting its run of shards (the one it reads under spans) and exchanging the totals."""
        if self._resolver is not None:
            self._set(self._resolver.finish(Share(rank, world_size)))

    def _resolved(self) -> None:
        """Counts asked before a loader said the share: contiguous runs of shards per process, exchanged."""
        if self._resolver is not None:
            self._set(self._resolver.finish(Share.of_this_process()))

    @property
    def raw(self) -> Counts:
        """Every document's token count as read (bos/eos aside)."""
        self._resolved()
        return self._raw

    @property
    def framed(self) -> Counts:
        """Every document's token count in the stream (bos/eos counted)."""
        self._resolved()
        return self._framed

    @property
    def tokens(self) -> int:
        """Tokens per epoch, bos and eos counted."""
        self._resolved()
        return self._tokens

    @property
    def rows(self) -> int:
        """Rows of ``seq_len`` tokens per epoch."""
        self._resolved()
        return self._rows
