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
from shufflepoint._shards.storage import ranged_ahead

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
    monkeypatch.setenv("SHUFFLEPOINT_RANGED_READS", "0")
    whole = batches(corpus(s3, tokens, str(tmp_path / "whole")), 8)
    monkeypatch.delenv("SHUFFLEPOINT_RANGED_READS", raising=False)  # the default: token shards by range too
    data = corpus(s3, tokens, str(tmp_path / "ranged"))
    start = len(s3.faults.log)
    got = batches(data, 8)
    assert data._access.ranged_reader()
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
    monkeypatch.delenv("SHUFFLEPOINT_RANGED_READS", raising=False)
    data = corpus(s3, tokens, str(tmp_path / "c"))
    start = len(s3.faults.log)
    got = batches(data, 2, rank=1, world_size=4, deal="strided")
    assert len(got) == 2 and data._access._density < 0.5
    assert data._access._ranged_ahead is not None and data._access._ranged_ahead.prefetcher.wait(60)
    fetched = sum(size for _, size in shard_gets(s3, start))
    # Two chunks of this rank's indices announced (256 + 1,024 windows of 514 bytes): those windows alone, not
    # the 3 x 3 windows of other ranks around each of them (4x the bytes, the whole corpus here).
    assert 0 < fetched <= 1.1 * (256 + 1024) * (2 * SEQ + 2), fetched


class _Partial:
    """A partial shard that records what read-ahead asks it to hold."""

    size = 64 << 20

    def __init__(self) -> None:
        self.asked: list[tuple[list, bool]] = []

    def ensure(self, spans, join=True) -> None:
        self.asked.append(([tuple(s) for s in spans], join))

    def held_bytes(self) -> int:
        return 0


@pytest.mark.parametrize("at_once", [True, False])
def test_the_first_chunk_is_fetched_narrowly_and_later_ones_widely(at_once):
    """Windows 512 KiB apart in a 64 MiB shard: the pass's first chunk (read at once) fetches each window alone
    (the first batch waits for its rows); a later chunk joins the gaps it reads next (``dense_gap``, 1 MiB)."""
    rows = np.arange(0, 64, 2, dtype=np.int64)  # windows of 256 KiB, every other one
    [job] = ranged_ahead.jobs(np.zeros(rows.size, np.int64), rows, [0], 1.0, np.array([256]), at_once)
    assert job.at_once is at_once and job.dense and (job.whole is not at_once)  # 32 of 256 rows: 1/8, "whole"
    job.whole = False  # the plan's path: what a chunk reading less of the shard fetches
    ahead = ranged_ahead.RangedAhead(None, lambda ranged, url: lambda r: [(int(x) << 18, (int(x) + 1) << 18)
                                                                          for x in r], True, 1 << 20)
    partial = _Partial()
    ahead._fetch(job, partial, None, "s3://b/0.bin")
    [(spans, join)] = partial.asked
    assert len(spans) == (32 if at_once else 1) and join is not at_once, spans[:3]
    ahead.close()


def test_a_later_chunks_read_ahead_starts_once_the_first_chunks_is_done():
    """The first batch has the links and the entry locks to itself: jobs of a later chunk wait for the first
    chunk's jobs (read at once), never the other way round."""
    import threading
    import time
    from types import SimpleNamespace

    corpus = SimpleNamespace(ranged_shard=lambda shard: True, index=SimpleNamespace(rows=np.full(4, 10_000)))
    ahead = ranged_ahead.RangedAhead(corpus, lambda ranged, url: None, True, 1 << 20)
    release, ran = threading.Event(), []

    def run_job(job) -> None:
        ran.append((job.shard, job.at_once, release.is_set()))
        if job.at_once:
            release.wait(10)
    ahead._run_job = run_job
    shards = np.array([0, 1, 0, 1])
    ahead.announce([0, 1], shards, np.array([1, 2, 3, 4]), 1.0, at_once=True)
    ahead.announce([2, 3], np.array([2, 3]), np.array([5, 6]), 1.0)
    time.sleep(0.3)
    assert sorted(ran) == [(0, True, False), (1, True, False)]  # the later chunk's jobs wait
    release.set()
    assert ahead.prefetcher.wait(10)
    assert sorted(ran)[2:] == [(2, False, True), (3, False, True)]
    ahead.close()
