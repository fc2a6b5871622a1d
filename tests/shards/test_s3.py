"""Shards from a real S3-compatible server (moto, over HTTP through s3fs), with injected faults.

500s and connections dropped mid-shard are retried and yield byte-identical shards; a shard that
keeps failing, vanished or changed under a running job is a ShardError naming it. Never a gap.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import uuid

import pytest

import shufflepoint
from corpus_files import jsonl_corpus
from shufflepoint._shards.storage.cache import NodeCache
from shufflepoint._shards.storage.storage import Storage


@pytest.fixture()
def bucket(s3, tmp_path):
    name = "corpus-" + uuid.uuid4().hex[:8]
    ids = jsonl_corpus(str(tmp_path / "local"), 12, rows=(5, 40))
    s3.upload(name, str(tmp_path / "local"), prefix="web/")
    return name, ids, str(tmp_path / "cache")


def shards(s3, name, cache, **kwargs):
    return shufflepoint.Shards(f"s3://{name}/web/*.jsonl", storage_options=s3.storage_options, cache_dir=cache,
                               progress=False, **kwargs)


def test_a_bucket_reads_like_a_folder(s3, bucket, tmp_path):
    name, ids, cache = bucket
    corpus = shards(s3, name, cache)
    assert [corpus[i]["id"] for i in range(len(corpus))] == ids
    local = shufflepoint.Shards(str(tmp_path / "local" / "*.jsonl"), cache_dir=cache, progress=False)
    # The same rows under other versions (ETags here, mtimes there): another fingerprint, explained.
    assert corpus.fingerprint != local.fingerprint and corpus.index.legacy_hash == local.index.legacy_hash
    assert "every shard has another version: the corpus was copied or moved" in \
        corpus._loader_hooks().explain_fingerprint(local.fingerprint)
    cached = NodeCache(os.path.join(cache, "shards"))
    assert len(cached.entries()) == 12 and cached.bytes_used() == sum(s.size for s in corpus.index.shards)
    requests = s3.faults.requests
    again = shards(s3, name, cache)  # a restarted job: the sidecar and the node cache: only a listing
    assert [again[i]["id"] for i in range(len(again))] == ids
    assert s3.faults.requests - requests <= 5  # a few listing calls, none per shard


def test_500s_and_dropped_connections_are_retried_into_identical_shards(s3, bucket, tmp_path):
    name, _, cache = bucket
    storage = Storage(s3.storage_options, retries=5, backoff=0.01)
    url = f"s3://{name}/web/part-00003.jsonl"
    expected = open(tmp_path / "local" / "part-00003.jsonl", "rb").read()
    s3.fail_next(3)
    info = storage.info(url)
    assert info.size == len(expected)
    s3.drop_next(2)
    storage.fetch(url, str(tmp_path / "got"), info.size)
    assert open(tmp_path / "got", "rb").read() == expected
    assert s3.faults.injected == {"fail": 3, "drop": 2}
    s3.fail_next(1)
    s3.drop_next(1)
    corpus = shards(s3, name, str(tmp_path / "cache2"))
    assert len(corpus) == len(bucket[1])


def test_a_shard_that_keeps_failing_is_an_error_naming_it(s3, bucket, tmp_path):
    name, _, _ = bucket
    storage = Storage(s3.storage_options, retries=2, backoff=0.01)
    url = f"s3://{name}/web/part-00001.jsonl"
    size = storage.info(url).size
    s3.fail_next(100)
    with pytest.raises(shufflepoint.ShardError, match=r"part-00001\.jsonl: downloading failed after 3 attempts"):
        storage.fetch(url, str(tmp_path / "got"), size)


def test_a_shard_deleted_or_rewritten_under_a_running_job_is_an_error_naming_it(s3, bucket):
    name, _, cache = bucket
    corpus = shards(s3, name, cache + "-cold", retries=1)
    corpus_rows = corpus.shard_rows
    # a fresh cache, so the job must download again: the shard is gone from the bucket by then
    corpus._access._cache = NodeCache(os.path.join(cache + "-empty", "shards"))
    s3.delete(name, "web/part-00004.jsonl")
    with pytest.raises(shufflepoint.ShardError, match=r"part-00004\.jsonl: vanished"):
        corpus[int(corpus_rows[:4].sum())]
    s3.put(name, "web/part-00005.jsonl", json.dumps({"id": -1}).encode() + b"\n")
    with pytest.raises(shufflepoint.ShardError, match=r"part-00005\.jsonl"):
        corpus[int(corpus_rows[:5].sum())]


def test_the_node_cache_keeps_its_byte_limit_and_never_shows_half_a_shard(tmp_path):
    cache = NodeCache(str(tmp_path / "c"), max_bytes=250)
    for i in range(5):
        path = cache.path_for(f"s3://b/{i}", "v", 100, lambda dest: open(dest, "wb").write(b"x" * 100))
        assert os.path.getsize(path) == 100
    assert cache.bytes_used() <= 250 and len(cache.entries()) == 2
    cache.release("s3://b/4", "v")
    cache.path_for("s3://b/9", "v", 100, lambda dest: open(dest, "wb").write(b"y" * 100))
    assert not os.path.exists(cache.entry("s3://b/4", "v"))  # released first, though used last
    assert os.path.exists(cache.entry("s3://b/3", "v"))

    def broken(dest):
        open(dest, "wb").write(b"z" * 40)
        raise ConnectionError("dropped")

    with pytest.raises(ConnectionError):
        cache.path_for("s3://b/half", "v", 100, broken)
    assert not os.path.exists(cache.entry("s3://b/half", "v"))
    assert not [n for n in os.listdir(tmp_path / "c") if n.startswith(".tmp-")]
    with pytest.raises(shufflepoint.ShardError, match="downloaded 40 bytes, the index says 100"):
        cache.path_for("s3://b/short", "v", 100, lambda dest: open(dest, "wb").write(b"z" * 40))


def _fetch_same(directory, log, barrier):
    cache = NodeCache(directory)
    barrier.wait()

    def fetch(dest):
        with open(log, "a") as f:
            f.write("fetch\n")
        with open(dest, "wb") as f:
            for _ in range(100):
                f.write(b"a" * 1000)

    path = cache.path_for("s3://b/shared", "v1", 100_000, fetch)
    assert open(path, "rb").read() == b"a" * 100_000


def test_processes_sharing_the_cache_fetch_a_shard_once(tmp_path):
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(4)
    log = str(tmp_path / "log")
    processes = [context.Process(target=_fetch_same, args=(str(tmp_path / "c"), log, barrier)) for _ in range(4)]
    for p in processes:
        p.start()
    for p in processes:
        p.join(30)
        assert p.exitcode == 0
    assert open(log).read() == "fetch\n"


def test_token_shards_are_indexed_without_downloading_them(s3, tmp_path):
    """A .bin shard's windows follow from its size: the index needs a listing and sizes, no GET
    of a shard; the first read fetches it, and every window is the one the file holds."""
    import numpy as np

    name = "tokens-" + uuid.uuid4().hex[:8]
    local = tmp_path / "tokens"
    local.mkdir()
    streams = [np.arange(start, start + size, dtype=np.uint16) for start, size in ((0, 41), (100, 9), (200, 2))]
    for shard, tokens in enumerate(streams):
        tokens.tofile(local / f"part-{shard}.bin")
    s3.upload(name, str(local))
    before = len(s3.faults.log)
    corpus = shufflepoint.Shards(f"s3://{name}/*.bin", seq_len=4, storage_options=s3.storage_options,
                                 cache_dir=str(tmp_path / "cache"), progress=False)
    indexing = list(s3.faults.log)[before:]
    assert not [path for method, path, _ in indexing if method == "GET" and path.endswith(".bin")], indexing
    assert corpus.shard_rows.tolist() == [10, 2, 0]  # (41 - 1) // 4, (9 - 1) // 4, (2 - 1) // 4
    assert corpus[11].tolist() == [104, 105, 106, 107, 108]  # shard 1, window 1, read from the server
