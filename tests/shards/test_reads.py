"""A shuffled block asks for its rows in any order: each shard is opened, and each Parquet row group
decoded, once per block, not once per sample (the cost that made Parquet rows 25x slower)."""

from __future__ import annotations

import glob
import os

import pyarrow.parquet as pq
import pytest

import shufflepoint
from corpus_files import parquet_corpus


@pytest.fixture()
def corpus(tmp_path):
    folder = str(tmp_path / "parquet")
    ids = parquet_corpus(folder, 40, rows=(8, 12))  # 2-3 row groups each, 20 shards per block below
    return os.path.join(folder, "*.parquet"), ids, str(tmp_path / "cache")


def counted(shards):
    """Count the shard opens and row-group decodes of ``shards`` (this process, num_workers=0)."""
    counts = {"open": 0, "decode": 0, "groups": 0}
    reader_open = shards._access.reader.open

    def open_counted(path, url):
        counts["open"] += 1
        opened = reader_open(path, url)
        read_row_groups = opened._file.read_row_groups

        def decode(groups, **kwargs):
            counts["decode"] += 1
            counts["groups"] += len(groups)
            return read_row_groups(groups, **kwargs)

        opened._file.read_row_groups = decode
        return opened

    shards._access.reader.open = open_counted
    return counts


def test_a_block_opens_each_shard_and_decodes_each_row_group_once(corpus):
    pattern, ids, cache = corpus
    shards = shufflepoint.Shards(pattern, cache_dir=cache, progress=False)
    loader = shufflepoint.DataLoader(shards, 8, seed=3, shuffle_block=200)
    counts = counted(shards)
    seen = [int(i) for batch in loader for i in batch["id"]]
    assert sorted(seen) == ids
    assert counts["open"] == 40  # each shard once in the epoch
    groups = sum(pq.ParquetFile(path).metadata.num_row_groups for path in glob.glob(pattern))
    assert groups > 80 and counts["groups"] == groups  # each row group once
    assert counts["decode"] == 40  # a shard's small groups decoded together (one unit of < 1,024 rows)


def test_an_explicit_max_open_is_kept(corpus):
    pattern, ids, cache = corpus
    shards = shufflepoint.Shards(pattern, cache_dir=cache, progress=False, max_open=2)
    loader = shufflepoint.DataLoader(shards, 8, seed=3, shuffle_block=200)
    counts = counted(shards)
    assert sorted(int(i) for batch in loader for i in batch["id"]) == ids  # still right, only slower
    assert counts["open"] > 40


def test_a_corpus_of_at_most_32_shards_is_opened_once_not_once_per_epoch(tmp_path):
    """Reopening a Parquet shard costs its footer and its kept ids' key (~0.6 ms): at 20 shards of 1M tokens
    it was 9% of a ``Packed`` epoch, so the default keeps 32 shards open, whatever the block."""
    folder = str(tmp_path / "parquet")
    ids = parquet_corpus(folder, 20, rows=(8, 12))
    shards = shufflepoint.Shards(os.path.join(folder, "*.parquet"), cache_dir=str(tmp_path / "cache"), progress=False)
    loader = shufflepoint.DataLoader(shards, 8, seed=3, shuffle_block=16)  # a block spans 2-3 shards
    counts = counted(shards)
    for epoch in range(3):
        loader.set_epoch(epoch)
        assert sorted(int(i) for batch in loader for i in batch["id"]) == ids
    assert counts["open"] == 20  # each shard once, in the first epoch
