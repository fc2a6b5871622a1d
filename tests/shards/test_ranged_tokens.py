"""Token ``.bin`` shards read by byte range on the local S3 server, as a fresh node reads them by default.

A rank reading densely (a stretch of its own, ``spans``) fetches a chunk's windows joined across the gaps
it reads next anyway (``TilesShards.dense_gap``): a few GETs per shard, not one per window; a rank reading
sparsely fetches its own windows only. The windows equal the whole-download path's.
"""

from __future__ import annotations

import re
import uuid

import numpy as np
import pytest

import shufflepoint
from shufflepoint._shards import ranged

SEQ, TOKENS, SHARDS = 256, 1 << 20, 3  # 2 MiB shards of uint16 ids, 4,095 windows each


@pytest.fixture()
def tokens(s3):
    name = "tokens-" + uuid.uuid4().hex[:8]
    files = {f"web/part-{s}.bin": (np.arange(TOKENS, dtype=np.int64) * 7 + s).astype(np.uint16).tobytes()
             for s in range(SHARDS)}
    s3.put_files(name, files)
    return name


def corpus(s3, name, cache):
    return shufflepoint.Shards(f"s3://{name}/web/*.bin", seq_len=SEQ, storage_options=s3.storage_options,
                               cache_dir=cache, progress=False)


def shard_gets(s3, since: int) -> list[tuple[str, int]]:
    """(shard, bytes) of each GET of a shard after the ``since``-th request."""
    found = []
    for method, path, header in list(s3.faults.log)[since:]:
        if method == "GET" and "/part-" in path:
            span = re.fullmatch(r"bytes=(\d+)-(\d+)", header)
            found.append((path.rsplit("/", 1)[-1], int(span[2]) - int(span[1]) + 1 if span else 2 * TOKENS))
    return found


def batches(data, count: int, **kwargs) -> list[np.ndarray]:
    loader = shufflepoint.DataLoader(data, batch_size=64, seed=11, shuffle_block=1 << 14, **kwargs)
    taken = iter(loader)
    return [next(taken).numpy() for _ in range(count)]


def test_a_dense_rank_fetches_its_first_windows_in_a_few_gets_per_shard(s3, tokens, tmp_path, monkeypatch):
    monkeypatch.setattr(ranged, "ENABLED", False)
    whole = batches(corpus(s3, tokens, str(tmp_path / "whole")), 8)
    monkeypatch.setattr(ranged, "ENABLED", None)  # the default: token shards by range too
    data = corpus(s3, tokens, str(tmp_path / "ranged"))
    start = len(s3.faults.log)
    got = batches(data, 8)
    assert data._ranged_reader()
    assert all(np.array_equal(a, b) for a, b in zip(got, whole, strict=True))
    gets = shard_gets(s3, start)
    # The first chunk's 256 windows lie in every shard: one GET per window was ~256 GETs; joined across the
    # gaps (~1 KiB apart here, far under dense_gap) a shard's missing bytes come in a few GETs.
    per_shard = {shard: sum(1 for s, _ in gets if s == shard) for shard, _ in gets}
    assert len(per_shard) == SHARDS and max(per_shard.values()) <= 12, per_shard
    assert sum(size for _, size in gets) <= 1.05 * SHARDS * 2 * TOKENS  # no byte fetched twice (but a few)


def test_a_sparse_rank_fetches_its_own_windows_not_the_gaps(s3, tokens, tmp_path, monkeypatch):
    """Rank 1 of a global batch split 4 ways (``strided``): the windows between its own are other ranks', so
    they are not joined in (a gap is fetched only where a GET costs more: the mean window size)."""
    monkeypatch.setattr(ranged, "ENABLED", None)
    data = corpus(s3, tokens, str(tmp_path / "c"))
    start = len(s3.faults.log)
    got = batches(data, 2, rank=1, world_size=4, deal="strided")
    assert len(got) == 2 and data._density < 0.5
    assert data._ranged_ahead is not None and data._ranged_ahead.prefetcher.wait(60)
    fetched = sum(size for _, size in shard_gets(s3, start))
    # Two chunks of this rank's indices announced (256 + 1,024 windows of 514 bytes): those windows alone, not
    # the 3 x 3 windows of other ranks around each of them (4x the bytes, the whole corpus here).
    assert 0 < fetched <= 1.1 * (256 + 1024) * (2 * SEQ + 2), fetched
