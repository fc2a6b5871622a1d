"""``Packed``'s documents laid along the ``spans`` deal's stretches, so a node reads the same shards every epoch.

Under ``spans`` rank r of an epoch's first world of W ranks reads rows ``[a_r, a_{r+1})`` (``spans.py``'s
near-equal stretches of the epoch's rows): tokens ``[a_r * L, a_{r+1} * L)`` of the epoch's stream. Laid out
by the ``blocks`` order, that stream is a new permutation of the shards every epoch, so the rank's rows
come from other shards each epoch and a node downloads about 0.4 of its share again each epoch (measured,
``make bench-locality ONLY=Packed``). Laid along the stretches instead (``StretchBlockOrder`` over the
documents): the shards keep one layout, their own order, cut into W stretches at the shard boundaries
nearest the tokens ``a_r * L`` (by the per-shard token totals: O(shards), no per-document count), so rank r
holds a run of consecutive shards, the run ``count_share`` has it count (by bytes, before any seed is known);
each epoch permutes the shards inside each stretch and the documents inside each block. So rank r reads
the tokens of its own stretch's shards every epoch, give or take half a shard at each end of its rows; that
half shard is always the same one, as each stretch's first and last shard stay at its ends, each a block of
its own (``pinned_ends``): a node's cache that holds its share (and those edge shards) serves every epoch.

A laid epoch's rows depend on W, so W is in the index: row p of epoch e laid along W stretches is index
``((e + 1) * WORLDS + W - 1) * rows_per_epoch + p``; an unlaid epoch's is ``e * rows_per_epoch + p`` (e below
WORLDS, so the two never meet). A row is then the same wherever it is read, a DataLoader worker included,
with no state beyond the index, and a loader may ask for both (its construction checks an unlaid epoch 0).

Words: docs/glossary.md (stretch, stretch order, share, document).
"""

from __future__ import annotations

import numpy as np

STRETCHED_VERSION = 2  # the packed order laid along the spans stretches (the unlaid one is packed_rows.VERSION)
WORLDS = 2**20  # a laid epoch's key in the index: epoch * WORLDS + stretches
# Laid along every run of documents (each shard a stretch of its own, never moved, its documents permuted inside
# it): a ``Mixture`` reads a sharded Packed source's passes so, the same rows on the same shards in every pass,
# whatever the world (``mixture/passes.py``). Its key is stretches = WORLDS, which no world of ranks reaches.
EVERY_RUN = WORLDS


def table_key(epoch: int, stretches: int | None) -> int:
    """What an epoch's indices are counted from, in rows per epoch: the epoch, or (epoch, W) laid."""
    return epoch if stretches is None else (epoch + 1) * WORLDS + stretches - 1


def epoch_of(key: int) -> tuple[int, int | None]:
    """``table_key``'s inverse: (epoch, stretches or None)."""
    if key < WORLDS:
        return key, None
    epoch, stretches = divmod(key, WORLDS)
    return epoch - 1, stretches + 1


def document_edges(rows: np.ndarray, tokens: np.ndarray, stretches: int, row_count: int, seq_len: int) -> np.ndarray:
    """The ``stretches + 1`` document edges (along the shards in their order, ``rows`` documents each, ``tokens``
    framed tokens each) at the shard boundaries nearest the first token of each rank's rows; ``EVERY_RUN``: every
    shard's boundaries."""
    rows, tokens = np.asarray(rows, np.int64), np.asarray(tokens, np.int64)
    if stretches == EVERY_RUN:
        every: np.ndarray = np.concatenate(([0], np.cumsum(rows))).astype(np.int64)
        return every
    laid = np.flatnonzero(rows > 0)
    documents = np.concatenate(([0], np.cumsum(rows[laid]))).astype(np.int64)
    laid_tokens = np.concatenate(([0], np.cumsum(tokens[laid]))).astype(np.int64)
    base, extra = divmod(row_count, stretches)
    ranks = np.arange(stretches + 1, dtype=np.int64)
    targets = (ranks * base + np.minimum(ranks, extra)) * seq_len
    after = np.clip(np.searchsorted(laid_tokens, targets, side="left"), 1, laid.size)
    nearer = np.where(targets - laid_tokens[after - 1] <= laid_tokens[after] - targets, after - 1, after)
    nearer = np.maximum.accumulate(nearer)
    nearer[0], nearer[-1] = 0, laid.size
    found: np.ndarray = documents[nearer]
    return found
