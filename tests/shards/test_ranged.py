"""Remote Parquet shards read by byte range (``_shards/storage/ranged``), on the local S3 server (moto).

A fresh node's first batch GETs about the row groups it reads plus the footers, not whole shards;
read-ahead fetches the ranges of the rows a chunk will read, and the reads then GET nothing;
reading the same rows again GETs nothing; the rows equal those of the whole-download path; a shard
rewritten under the job is a ShardError; the partial entries count toward the cache limit.
"""

from __future__ import annotations

import json
import os
import re
import uuid

import numpy as np
import pytest

import shufflepoint
from shufflepoint import _settings as settings
from shufflepoint._shards.storage import ranged
from shufflepoint._shards.storage.cache import NodeCache
from shufflepoint._tools.cli import main

SHARDS, GROUPS, GROUP_ROWS, BATCH = 3, 24, 1100, 8  # groups past _UNIT_ROWS: a unit each


@pytest.fixture()
def corpus(s3, tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    name = "ranged-" + uuid.uuid4().hex[:8]
    rng = np.random.default_rng(0)
    files = {}
    for s in range(SHARDS):
        rows = GROUPS * GROUP_ROWS
        table = pa.table({"id": np.arange(s * rows, (s + 1) * rows),
                          "text": [rng.bytes(40).hex() for _ in range(rows)]})
        path = tmp_path / f"part-{s}.parquet"
        pq.write_table(table, path, row_group_size=GROUP_ROWS, compression="none")
        files[f"web/part-{s}.parquet"] = path.read_bytes()
    s3.put_files(name, files)
    return name, sum(len(b) for b in files.values())


def got_bytes(s3, since: int, sizes: dict[str, int]) -> int:
    """GET bytes of shards (``/part-``) logged after the ``since``-th request, from the Range headers."""
    total = 0
    for method, path, header in list(s3.faults.log)[since:]:
        if method != "GET" or "/part-" not in path:
            continue
        found = re.fullmatch(r"bytes=(\d+)-(\d+)", header)
        total += int(found[2]) - int(found[1]) + 1 if found else sizes[path.split("?")[0].rsplit("/", 1)[-1]]
    return total


def shards(s3, name, cache, **kwargs):
    return shufflepoint.Shards(f"s3://{name}/web/*.parquet", storage_options=s3.storage_options, cache_dir=cache,
                               progress=False, **kwargs)


def first_batch(corpus):
    loader = shufflepoint.DataLoader(corpus, batch_size=BATCH, seed=3, shuffle_block=GROUP_ROWS)
    return next(iter(loader))


@pytest.fixture(autouse=True)
def ranged_on(monkeypatch):
    """Parquet is read by range by default, .bin shards with SHUFFLEPOINT_RANGED_READS=1; these tests read
    every format that can by range unless they say."""
    monkeypatch.setenv("SHUFFLEPOINT_RANGED_READS", "1")


def test_a_fresh_node_gets_the_row_groups_it_reads_then_nothing(s3, corpus, tmp_path, monkeypatch):
    name, total = corpus
    monkeypatch.setenv("SHUFFLEPOINT_RANGED_READS", "0")
    before = shards(s3, name, str(tmp_path / "whole"))
    sizes = {before.index.url(s).rsplit("/", 1)[-1]: r.size for s, r in enumerate(before.index.shards)}
    start = len(s3.faults.log)
    whole = first_batch(before)
    downloaded = got_bytes(s3, start, sizes)
    monkeypatch.setenv("SHUFFLEPOINT_RANGED_READS", "1")
    data = shards(s3, name, str(tmp_path / "cache"), prefetch=0)  # the reads alone (read-ahead: below)
    start = len(s3.faults.log)
    batch = first_batch(data)
    fresh = got_bytes(s3, start, sizes)
    assert batch["id"].tolist() == whole["id"].tolist() and batch["text"] == whole["text"]
    # A block is one shard here: the batch's BATCH rows lie in at most BATCH of its GROUPS row groups.
    group = max(sizes.values()) / GROUPS
    print(f"first batch, fresh node: {downloaded} bytes whole, {fresh} by range (corpus {total})")
    assert 0 < fresh <= BATCH * group + 3 * (64 << 10) and fresh < downloaded / 2, (fresh, downloaded, total)
    start = len(s3.faults.log)
    again = first_batch(shards(s3, name, str(tmp_path / "cache"), prefetch=0))  # a restart on the same node
    assert got_bytes(s3, start, sizes) == 0
    assert again["id"].tolist() == whole["id"].tolist()
    # Every row, read by range, is the row read whole.
    everything = [data[i]["id"] for i in range(0, len(data), 97)]
    assert everything == list(range(0, len(data), 97))
    cache = NodeCache(os.path.join(str(tmp_path / "cache"), "shards"))
    assert 0 < cache.bytes_used() <= total + 4096 * SHARDS * GROUPS


def test_a_shard_rewritten_under_the_job_is_a_shard_error(s3, corpus, tmp_path):
    name, _ = corpus
    data = shards(s3, name, str(tmp_path / "cache"), retries=0)
    assert data[0]["id"] == 0  # its first row group and footer are held now
    key = data.index.url(0).split(f"s3://{name}/", 1)[1]
    body = bytearray(s3.client().get_object(Bucket=name, Key=key)["Body"].read())
    body[len(body) // 2] ^= 1  # the same size, another version
    s3.put(name, key, bytes(body))
    assert data[1]["id"] == 1  # held: read locally, as a whole cached shard would be
    with pytest.raises(shufflepoint.ShardError, match=r"part-0\.parquet"):
        data[GROUP_ROWS * (GROUPS - 1)]  # a range not held: fetched at the recorded version, or refused


def test_a_token_bin_shard_gets_the_windows_it_reads(s3, tmp_path, monkeypatch):
    name, seq = "tokens-" + uuid.uuid4().hex[:8], 64
    tokens = {f"web/part-{s}.bin": (np.arange(1 << 16) + s).astype(np.uint16).tobytes() for s in range(2)}
    s3.put_files(name, tokens)
    sizes = {key.rsplit("/", 1)[-1]: len(data) for key, data in tokens.items()}

    def batch(cache):
        data = shufflepoint.Shards(f"s3://{name}/web/*.bin", seq_len=seq, storage_options=s3.storage_options,
                                   cache_dir=str(tmp_path / cache), progress=False, prefetch=0)
        start = len(s3.faults.log)
        found = next(iter(shufflepoint.DataLoader(data, batch_size=BATCH, seed=5)))
        return found, got_bytes(s3, start, sizes)

    monkeypatch.setenv("SHUFFLEPOINT_RANGED_READS", "0")
    whole, downloaded = batch("whole")
    monkeypatch.setenv("SHUFFLEPOINT_RANGED_READS", "1")
    windows, fresh = batch("cache")
    assert windows.tolist() == whole.tolist()
    print(f"tokens, first batch, fresh node: {downloaded} bytes whole, {fresh} by range")
    assert 0 < fresh <= BATCH * (256 << 10) and fresh < downloaded / 2, (fresh, downloaded)
    again, none = batch("cache")
    assert again.tolist() == whole.tolist() and none == 0


def test_partial_entries_count_toward_the_cache_limit_and_are_evicted_whole(tmp_path):
    import contextlib

    blob = np.random.default_rng(1).bytes(1 << 20)
    asked: list[tuple[int, int]] = []

    @contextlib.contextmanager
    def read_ranges():
        yield lambda start, end: asked.append((start, end)) or blob[start:end]

    cache = NodeCache(str(tmp_path / "c"), max_bytes=300 << 10)
    first = ranged.PartialShard(cache, "s3://b/0.bin", "v1", len(blob), read_ranges)
    assert first.pread(10, 20) == blob[10:20] and first.pread(100_000, 200_000) == blob[100_000:200_000]
    assert first.pread(12, 18) == blob[12:18] and len(asked) == 2  # held: nothing fetched again
    shared = ranged.PartialShard(cache, "s3://b/0.bin", "v1", len(blob), read_ranges)  # another process's view
    assert shared.pread(150_000, 160_000) == blob[150_000:160_000] and len(asked) == 2
    assert shared.held() == [(10, 20), (100_000, 200_000)]
    second = ranged.PartialShard(cache, "s3://b/1.bin", "v1", len(blob), read_ranges)
    assert second.pread(0, 250 << 10) == blob[: 250 << 10]
    assert cache.bytes_used() <= 300 << 10  # the first entry (LRU) was evicted to make room
    data, record, _ = cache.partial("s3://b/0.bin", "v1")
    assert not os.path.exists(data) and not os.path.exists(record)
    assert first.pread(100_000, 100_010) == blob[100_000:100_010]  # its own copy stays readable
    assert first.pread(500_000, 500_010) == blob[500_000:500_010]  # a new range: a new entry, fetched
    for shard in (first, shared, second):
        shard.close()


def test_read_ahead_fetches_a_chunks_ranges_and_the_reads_fetch_nothing(s3, corpus, tmp_path):
    name, total = corpus
    data = shards(s3, name, str(tmp_path / "cache"))
    sizes = {data.index.url(s).rsplit("/", 1)[-1]: r.size for s, r in enumerate(data.index.shards)}
    start = len(s3.faults.log)
    batches = iter(shufflepoint.DataLoader(data, batch_size=BATCH, seed=3, shuffle_block=GROUP_ROWS))
    first = next(batches)  # the first chunk (256 rows) and the next (1,024) are announced: read ahead
    assert data._access._ranged_ahead is not None and data._access._ranged_ahead.prefetcher.wait(60)
    assert not data._access._ranged_ahead.prefetcher.errors
    ahead = got_bytes(s3, start, sizes)
    print(f"first batch and two chunks read ahead, fresh node: {ahead} bytes (corpus {total})")
    assert 0 < ahead < total / 2, (ahead, total)  # row groups, not whole shards
    start = len(s3.faults.log)
    rest = [next(batches)["id"] for _ in range(256 // BATCH - 1)]  # the first chunk's other batches: held
    assert got_bytes(s3, start, sizes) == 0 and len(first["id"]) == BATCH and all(len(r) == BATCH for r in rest)
    # Rows scattered over 12 row groups of the three shards: announced, fetched, then read with no GET.
    rows = np.arange(5, len(data), 3 * GROUP_ROWS + 7)[:12]
    data.prefetch(rows)
    assert data._access._ranged_ahead.prefetcher.wait(60) and not data._access._ranged_ahead.prefetcher.errors
    assert got_bytes(s3, start, sizes) > 0
    start = len(s3.faults.log)
    assert [data[int(i)]["id"] for i in rows] == rows.tolist()
    assert got_bytes(s3, start, sizes) == 0


def test_read_ahead_of_a_rewritten_shard_leaves_the_read_a_shard_error(s3, corpus, tmp_path):
    name, _ = corpus
    data = shards(s3, name, str(tmp_path / "cache"), retries=0)
    assert data[0]["id"] == 0  # its footer and first row group are held
    key = data.index.url(0).split(f"s3://{name}/", 1)[1]
    body = bytearray(s3.client().get_object(Bucket=name, Key=key)["Body"].read())
    body[len(body) // 2] ^= 1
    s3.put(name, key, bytes(body))
    last = GROUP_ROWS * (GROUPS - 1)
    data.prefetch([last])
    assert data._access._ranged_ahead is not None and data._access._ranged_ahead.prefetcher.wait(60)
    assert list(data._access._ranged_ahead.prefetcher.errors.values())  # kept for the read, not raised
    with pytest.raises(shufflepoint.ShardError, match=r"part-0\.parquet"):
        data[last]


def test_the_default_reads_parquet_and_token_shards_by_range(s3, corpus, tmp_path, monkeypatch):
    name, _ = corpus
    monkeypatch.delenv("SHUFFLEPOINT_RANGED_READS", raising=False)  # SHUFFLEPOINT_RANGED_READS unset
    assert shards(s3, name, str(tmp_path / "p"))._access.ranged_reader()
    tokens = "tokens-" + uuid.uuid4().hex[:8]
    s3.put_files(tokens, {"web/part-0.bin": np.arange(1 << 12, dtype=np.uint16).tobytes()})
    data = shufflepoint.Shards(f"s3://{tokens}/web/*.bin", seq_len=64, storage_options=s3.storage_options,
                               cache_dir=str(tmp_path / "t"), progress=False)
    assert data._access.ranged_reader()
    monkeypatch.setenv("SHUFFLEPOINT_RANGED_READS", "0")  # SHUFFLEPOINT_RANGED_READS=0
    assert not shards(s3, name, str(tmp_path / "p"))._access.ranged_reader() and not data._access.ranged_reader()


@pytest.mark.parametrize(("text", "found"), [("", None), ("1", True), ("0", False), (" 1 ", True)])
def test_the_setting_is_read_from_the_environment(monkeypatch, text, found):
    monkeypatch.setenv("SHUFFLEPOINT_RANGED_READS", text)
    assert settings.ranged_reads() is found


def test_a_setting_other_than_0_or_1_is_refused(monkeypatch):
    monkeypatch.setenv("SHUFFLEPOINT_RANGED_READS", "yes")
    with pytest.raises(ValueError, match=r"(?s)SHUFFLEPOINT_RANGED_READS.*yes.*1 \(every format"):
        settings.ranged_reads()


def test_a_range_is_one_get_checked_by_its_own_response(s3, corpus):
    """On S3 a range is one GET, checked against the index by its own response (Content-Range: the
    object's size, ETag: its version), not by an object look-up first (s3fs's open: a round trip per
    range fetched, on a fresh node). Another version or size is a ShardError."""
    s3fs = pytest.importorskip("s3fs")
    from shufflepoint._shards.storage.storage import Storage

    name, _ = corpus
    s3fs.S3FileSystem.clear_instance_cache()  # a fresh process: nothing listed, nothing cached
    storage = Storage(storage_options=s3.storage_options, retries=0)
    url = f"s3://{name}/web/part-0.parquet"
    head = s3.client().head_object(Bucket=name, Key="web/part-0.parquet")
    size, version = head["ContentLength"], head["ETag"].strip('"')
    start = len(s3.faults.log)
    with storage.ranges(url, size, version) as read:
        assert read(size - 4, size) == b"PAR1" and read(0, 4) == b"PAR1"
    assert [method for method, path, _ in list(s3.faults.log)[start:] if "/part-0" in path] == ["GET", "GET"]
    with pytest.raises(shufflepoint.ShardError, match="rewritten"), storage.ranges(url, size, "0" * 32) as read:
        read(0, 4)
    with pytest.raises(shufflepoint.ShardError, match=str(size + 1)), storage.ranges(url, size + 1, version) as read:
        read(0, 4)


def test_forked_workers_read_by_range_the_rows_read_whole(s3, corpus, tmp_path, monkeypatch):
    """DataLoader workers (forked: each opens its own partial copies, maps and read-ahead) share the node
    cache with the parent and each other: their batches by range are the batches read whole."""
    name, _ = corpus

    def batches(cache: str) -> list[list[int]]:
        data = shards(s3, name, str(tmp_path / cache))
        loader = shufflepoint.DataLoader(data, batch_size=64, seed=11, shuffle_block=GROUP_ROWS, num_workers=2)
        found = []
        for batch in loader:
            found.append(batch["id"].tolist())
            if len(found) == 12:
                return found
        return found

    monkeypatch.setenv("SHUFFLEPOINT_RANGED_READS", "0")
    whole = batches("whole")
    monkeypatch.delenv("SHUFFLEPOINT_RANGED_READS", raising=False)  # the default: Parquet by range
    assert batches("ranged") == whole and len(whole) == 12
    kept = [name for _, _, names in os.walk(tmp_path / "ranged") for name in names]
    assert any(name.endswith(".part") for name in kept)  # read by range: partial copies in the node cache


@pytest.mark.parametrize(("deal", "dense"), [("strided", False), ("spans", True)])
def test_a_rank_reading_sparsely_fetches_its_windows_and_one_reading_densely_the_gaps_too(s3, tmp_path, monkeypatch,
                                                                                          deal, dense):
    """By default (SHUFFLEPOINT_RANGED_READS unset) a .bin shard is read by range. A rank reading the order
    sparsely (``strided`` over 4 ranks: a quarter of the positions its reads span; a global batch split after a
    resize) fetches its own windows; one reading a stretch of its own (``spans``) joins the gaps between them in
    (it reads them next): a few GETs per shard. The loader tells ``Shards`` its density before the pass
    (``ReadsAtDensity``); no read-ahead here (``prefetch=0``): the read's own fetch joins them."""
    monkeypatch.delenv("SHUFFLEPOINT_RANGED_READS", raising=False)
    name, seq = "sparse-" + uuid.uuid4().hex[:8], 64
    tokens = {f"web/part-{s}.bin": (np.arange(1 << 16) + s).astype(np.uint16).tobytes() for s in range(2)}
    s3.put_files(name, tokens)
    sizes = {key.rsplit("/", 1)[-1]: len(data) for key, data in tokens.items()}
    data = shufflepoint.Shards(f"s3://{name}/web/*.bin", seq_len=seq, storage_options=s3.storage_options,
                               cache_dir=str(tmp_path / "c"), progress=False, prefetch=0)
    loader = shufflepoint.DataLoader(data, batch_size=BATCH, seed=5, rank=1, world_size=4, deal=deal)
    start = len(s3.faults.log)
    next(iter(loader))
    fetched = got_bytes(s3, start, sizes)
    gets = sum(1 for method, path, _ in list(s3.faults.log)[start:] if method == "GET" and "/part-" in path)
    assert data._access.ranged_reader() and (data._access._density >= ranged.DENSE) is dense
    if dense:  # BATCH windows of a shard of 128 KiB: ~16 KiB apart, joined
        assert gets <= 2 * len(sizes), gets
    else:  # a batch's windows alone
        assert fetched <= BATCH * (seq + 1) * 2 and gets >= BATCH // 2, (fetched, gets)


@pytest.mark.parametrize("replacement", ["shorter", "same size"])
def test_a_shard_replaced_after_its_index_was_published_is_named_rewritten_on_a_fresh_node(s3, corpus, tmp_path,
                                                                                          replacement):
    """Issue 44, a user trial: a shard replaced after the index was built, read by a fresh node (an empty cache),
    was "not readable Parquet ... InvalidRange ... replace the shard with a good copy". It is rewritten since it was
    indexed, whatever the new size, and said so before any row of it is served."""
    name, _ = corpus
    publisher = ["--storage-options", json.dumps(s3.storage_options), "--cache-dir", str(tmp_path / "publisher")]
    assert main(["index", f"s3://{name}/web/*.parquet", *publisher]) == 0
    indexed = shards(s3, name, str(tmp_path / "first"))
    assert indexed[0]["id"] == 0
    key = indexed.index.url(0).split(f"s3://{name}/", 1)[1]
    body = bytearray(s3.client().get_object(Bucket=name, Key=key)["Body"].read())
    if replacement == "shorter":
        pq, pa = pytest.importorskip("pyarrow.parquet"), pytest.importorskip("pyarrow")
        path = tmp_path / "short.parquet"
        pq.write_table(pa.table({"id": np.arange(10), "text": ["x"] * 10}), path)
        body = bytearray(path.read_bytes())
    else:
        body[len(body) // 2] ^= 1
    s3.put(name, key, bytes(body))
    fresh = shards(s3, name, str(tmp_path / "fresh"), retries=0)  # the same index, a node with no copy yet
    assert fresh.fingerprint == indexed.fingerprint
    loader = shufflepoint.DataLoader(fresh, batch_size=BATCH, seed=3, shuffle_block=GROUP_ROWS, shuffle=False)
    with pytest.raises(shufflepoint.ShardError, match=r"part-0\.parquet: rewritten since it was indexed") as raised:
        next(iter(loader))
    assert "not readable" not in str(raised.value) and "replace the shard" not in str(raised.value)
