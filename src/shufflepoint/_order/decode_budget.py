"""The ``blocks`` order's default block, sized to what the process may keep decoded.

The rows of a block come in any order, so a row group is decoded once per epoch only while the
decoded groups of a whole block fit the process's budget (``SHUFFLEPOINT_DECODED_BYTES``, see
``readers/_decoded``); past it, the least recently used groups go and come back again and again
(1 KiB text rows, a budget of 8 MiB, a block of 65,536 rows: every group decoded ~65 times an epoch,
6.2k rows/s). Wide rows reach it at the default budget: 100 KiB rows (images in Parquet) fill
256 MiB with 2,600 rows, a 25th of the default block.

So the default block is the largest power of two of rows whose decoded bytes fill half the budget,
capped at ``DEFAULT_SHUFFLE_BLOCK`` (unchanged for the usual corpora: 1 KiB rows fit 116,000).
Worked: 1 KiB text rows (~1,090 bytes decoded), budget 8 MiB: 4 MiB / 1,090 = 3,848 -> 2,048 rows.

The bytes per row come from a Parquet footer (the same on every machine); the budget is the
process's own, and may differ on the machine that resumes. The block joins the corpus fingerprint
(``...:blocks=N``), and a loader whose block was left to this default adopts the block a state
records (``OrderCache.for_state``): a resumed run keeps its order, and ``warn_if_redecoding`` says
with the numbers when that block no longer fits the budget here.

Words: docs/glossary.md (shuffle block, block, decode budget, row group).
"""

from __future__ import annotations

import warnings

from shufflepoint._order.blocks import DEFAULT_SHUFFLE_BLOCK
from shufflepoint._settings import DECODED_BYTES as ENV


def fitting_block(row_bytes: int | None, limit: int) -> int:
    """The default ``shuffle_block`` for rows of ``row_bytes`` decoded bytes under ``limit`` bytes.

    >>> fitting_block(1090, 8 << 20), fitting_block(1090, 256 << 20), fitting_block(None, 8 << 20)
    (2048, 65536, 65536)
    """
    if not row_bytes or row_bytes <= 0:
        return DEFAULT_SHUFFLE_BLOCK  # a format decoded per row (tokens, JSON Lines): no budget to fit
    fit = limit // 2 // row_bytes
    if fit >= DEFAULT_SHUFFLE_BLOCK:
        return DEFAULT_SHUFFLE_BLOCK
    return 1 << (max(fit, 1).bit_length() - 1)


def _mib(value: float) -> str:
    return f"{value / 2**20:,.1f} MiB"


def warn_if_redecoding(shuffle_block: int, largest_shard: int, total: int, row_bytes: int | None, limit: int) -> None:
    """A ``UserWarning`` with the numbers when a block's decoded rows exceed the budget: a block
    holds about ``shuffle_block`` rows, or a whole shard larger than that (blocks never split a
    shard), at most the ``total`` rows of the corpus, and each of its row groups is then decoded about
    (block bytes / budget) times an epoch."""
    if not row_bytes or row_bytes <= 0:
        return
    rows = min(max(shuffle_block, largest_shard), total)
    block_bytes = rows * row_bytes
    if block_bytes <= limit:
        return
    fit = fitting_block(row_bytes, limit)
    shard_note = ""
    if largest_shard * row_bytes > limit:
        shard_note = (f"; a shard of {largest_shard:,} rows is a block of its own whatever shuffle_block says, so "
                      f"also write shards of <= {max(limit // 2 // row_bytes, 1):,} rows")
    warnings.warn(
        f"{ENV}: the process may keep {_mib(limit)} of decoded rows, but a block of this loader holds up to "
        f"{rows:,} rows of ~{row_bytes:,} bytes decoded ({_mib(block_bytes)}): its row groups are decoded "
        f"~{block_bytes / limit:.0f}x each an epoch instead of once. Raise {ENV} to >= {_mib(2 * block_bytes)}, "
        f"or pass shuffle_block={fit} for a new run{shard_note}. (The block is part of the order: a resumed run "
        "keeps the one it started with.)",
        UserWarning, stacklevel=4,
    )
