"""A shard that changed under the index is never read in silence: on the local S3 server and on local files.

Rewritten with the same size before its first read or after it was cached, deleted, truncated: a
read is a ShardError naming the shard and what changed (and no byte of a rewritten shard lands in
the cache), a resume over the changed corpus is a StateError naming the shard. Where the storage
reports no version (plain HTTP), verify="checksum" catches what sizes cannot.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import threading
import time
import uuid
import warnings

import numpy as np
import pytest

import shufflepoint
from corpus_files import jsonl_corpus
from shufflepoint._shards.index import index as _index
from shufflepoint._shards.index import sidecar

SEQ = 4


def token_files(folder, shards=4, tokens=41):
    """``part-<i>.bin`` with ``tokens`` uint16 ids each, shard i holding i*1000 + 0..tokens-1."""
    os.makedirs(folder, exist_ok=True)
    for shard in range(shards):
        ids = np.arange(shard * 1000, shard * 1000 + tokens, dtype=np.uint16)
        ids.tofile(os.path.join(folder, f"part-{shard}.bin"))


@pytest.fixture()
def bucket(s3, tmp_path):
    name = "integrity-" + uuid.uuid4().hex[:8]
    token_files(str(tmp_path / "local"))
    s3.upload(name, str(tmp_path / "local"))
    return name, str(tmp_path / "cache")


def open_bucket(s3, name, cache):
    return shufflepoint.Shards(f"s3://{name}/*.bin", seq_len=SEQ, storage_options=s3.storage_options, cache_dir=cache,
                               progress=False, retries=1)


def same_size_other_bytes(shard):
    return np.arange(shard * 1000 + 500, shard * 1000 + 541, dtype=np.uint16).tobytes()


def loader_state(corpus):
    loader = shufflepoint.DataLoader(corpus, batch_size=2, seed=3, shuffle_block=16, rank=0, world_size=1)
    next(iter(loader))
    return json.loads(json.dumps(loader.state_dict()))


def settled(s3, quiet_s=0.3, limit_s=10.0):
    """Wait until the server has seen no request for ``quiet_s``: a job's read-ahead threads may still fetch
    after its first batch, and their GETs must not be counted as the next read's."""
    deadline, seen = time.monotonic() + limit_s, -1
    while time.monotonic() < deadline and len(s3.faults.log) != seen:
        seen = len(s3.faults.log)
        time.sleep(quiet_s)


def resume(corpus, state):
    shufflepoint.DataLoader(corpus, batch_size=2, seed=3, shuffle_block=16, rank=0, world_size=1).load_state_dict(state)


@pytest.mark.parametrize("whole", [True, False], ids=["whole", "by-range"])
def test_rewritten_with_the_same_size_before_its_first_read(s3, bucket, monkeypatch, whole):
    if whole:
        monkeypatch.setenv("SHUFFLEPOINT_RANGED_READS", "0")
    else:
        monkeypatch.delenv("SHUFFLEPOINT_RANGED_READS", raising=False)  # the default
    name, cache = bucket
    corpus = open_bucket(s3, name, cache)
    state = loader_state(open_bucket(s3, name, cache + "-elsewhere"))  # that job's reads fill its own cache
    settled(s3)  # its read-ahead done: the GETs counted below are corpus[10]'s own
    s3.put(name, "part-1.bin", same_size_other_bytes(1))
    s3.reset()
    with pytest.raises(shufflepoint.ShardError, match=r"part-1\.bin: rewritten since it was indexed: its "
                                                      r"version is \w+ now, \w+ in the "
                                                      r"index \(the same 82 bytes, other content\); no byte of it"):
        corpus[10]  # shard 1, row 0
    gets = [(path, span) for method, path, span in s3.faults.log
            if method == "GET" and path.split("?")[0].endswith("part-1.bin")]
    if whole:
        assert gets == []  # the HEAD said enough: no byte of the new content was fetched
    else:  # one ranged GET, refused by its own response's ETag, its body dropped unread
        assert len(gets) == 1 and gets[0][1].startswith("bytes="), gets
    folder = os.path.join(cache, "shards")
    assert not [n for n in os.listdir(folder) if os.path.isfile(os.path.join(folder, n))
                and same_size_other_bytes(1) in open(os.path.join(folder, n), "rb").read()]
    with pytest.raises(shufflepoint.StateError, match=r"part-1\.bin was rewritten \(version \w+ when saved, \w+ now; "
                                                      r"the same size and rows, other bytes\)"):
        resume(open_bucket(s3, name, cache), state)


def test_rewritten_after_it_was_cached_the_job_keeps_the_indexed_bytes_and_a_resume_is_refused(s3, bucket):
    name, cache = bucket
    corpus = open_bucket(s3, name, cache)
    before = [corpus[i].tolist() for i in range(10, 20)]
    state = loader_state(corpus)
    s3.put(name, "part-1.bin", same_size_other_bytes(1))
    assert [corpus[i].tolist() for i in range(10, 20)] == before  # the cached copy is the indexed version
    again = open_bucket(s3, name, cache)
    assert again.fingerprint != corpus.fingerprint
    assert again[10].tolist() == list(range(1500, 1505))  # a new job reads the new version, indexed as such
    with pytest.raises(shufflepoint.StateError, match=r"part-1\.bin was rewritten"):
        resume(again, state)


def test_deleted_and_truncated_shards(s3, bucket):
    name, cache = bucket
    corpus = open_bucket(s3, name, cache)
    state = loader_state(open_bucket(s3, name, cache + "-elsewhere"))
    s3.delete(name, "part-2.bin")
    with pytest.raises(shufflepoint.ShardError, match=r"part-2\.bin: vanished"):
        corpus[20]
    s3.put(name, "part-3.bin", same_size_other_bytes(3)[:40])
    with pytest.raises(shufflepoint.ShardError, match=r"part-3\.bin: rewritten since it was indexed: the object "
                                                      r"is 40 bytes now, 82 in the index \(truncated\)"):
        corpus[30]
    with pytest.raises(shufflepoint.StateError, match=r"part-3\.bin changed \(10 rows, 82 bytes -> 4 rows, 40 bytes\)"
                                                      r".*part-2\.bin is gone"):
        resume(open_bucket(s3, name, cache), state)


def test_local_files_rewritten_in_place(tmp_path):
    folder = str(tmp_path / "local")
    token_files(folder)
    cache = str(tmp_path / "cache")
    corpus = shufflepoint.Shards(os.path.join(folder, "*.bin"), seq_len=SEQ, cache_dir=cache, progress=False)
    state = loader_state(shufflepoint.Shards(os.path.join(folder, "*.bin"), seq_len=SEQ, cache_dir=cache,
                                             progress=False))  # another process: ``corpus`` opened no shard yet
    path = os.path.join(folder, "part-1.bin")
    stat = os.stat(path)
    with open(path, "wb") as f:
        f.write(same_size_other_bytes(1))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    with pytest.raises(shufflepoint.ShardError, match=r"part-1\.bin: rewritten since it was indexed: its "
                                                      r"version is \d+ now, \d+ in the "
                                                      r"index"):
        corpus[10]
    again = shufflepoint.Shards(os.path.join(folder, "*.bin"), seq_len=SEQ, cache_dir=cache, progress=False)
    with pytest.raises(shufflepoint.StateError, match=r"part-1\.bin was rewritten"):
        resume(again, state)


def test_checksums_catch_what_sizes_and_versions_cannot(tmp_path):
    """A rewrite that keeps size and mtime: invisible to verify="version", a ShardError with "checksum"."""
    folder = str(tmp_path / "local")
    token_files(folder)
    path = os.path.join(folder, "part-1.bin")
    checked = shufflepoint.Shards(os.path.join(folder, "*.bin"), seq_len=SEQ, cache_dir=str(tmp_path / "c1"),
                                  progress=False, verify="checksum")
    assert all(s.checksum.startswith("sha256:") for s in checked.index.shards)
    plain = shufflepoint.Shards(os.path.join(folder, "*.bin"), seq_len=SEQ, cache_dir=str(tmp_path / "c2"),
                                progress=False)
    assert plain.fingerprint == checked.fingerprint  # the checksum is a check, not part of the identity
    stat = os.stat(path)
    with open(path, "wb") as f:
        f.write(same_size_other_bytes(1))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert plain[10].tolist() == list(range(1500, 1505))  # the documented limit of versions
    with pytest.raises(shufflepoint.ShardError, match=r"part-1\.bin: content changed: the copy .* hashes to sha256:"):
        checked[10]
    with pytest.raises(ValueError, match=r"verify: found 'md5'\n  expected: one of 'version', 'checksum'"):
        shufflepoint.Shards(os.path.join(folder, "*.bin"), seq_len=SEQ, progress=False, verify="md5")


@pytest.fixture()
def http_folder(tmp_path):
    """A plain HTTP server (no ETag) over a folder of JSONL shards."""
    folder = tmp_path / "www"
    jsonl_corpus(str(folder), 3, rows=(3, 5))

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(folder)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield folder, f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


def test_plain_http_with_checksums(http_folder, tmp_path):
    pytest.importorskip("aiohttp")
    folder, base = http_folder
    urls = [f"{base}/part-{i:05d}.jsonl" for i in range(3)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(UserWarning, match=r"indexing downloads 3 shard\(s\) whole"):
            shufflepoint.Shards(urls, cache_dir=str(tmp_path / "c0"), progress=False)
    corpus = shufflepoint.Shards(urls, cache_dir=str(tmp_path / "cache"), progress=False, verify="checksum")
    first = [corpus[i] for i in range(len(corpus))]
    stat = os.stat(folder / "part-00002.jsonl")
    data = (folder / "part-00002.jsonl").read_bytes()
    (folder / "part-00002.jsonl").write_bytes(data.replace(b'"id": 1', b'"id": 9'))
    os.utime(folder / "part-00002.jsonl", ns=(stat.st_atime_ns, stat.st_mtime_ns))  # Last-Modified unchanged
    fresh = shufflepoint.Shards(urls, cache_dir=str(tmp_path / "cache"), progress=False, verify="checksum")
    fresh._access.cache_dir = str(tmp_path / "cold")  # a node whose cache is empty: it must download again
    with pytest.raises(shufflepoint.ShardError, match=r"part-00002\.jsonl: content changed: the copy .* hashes to"):
        fresh[len(corpus) - 1]
    assert [corpus[i] for i in range(len(corpus))] == first  # the cached, checked copy


def test_an_index_of_format_1_still_loads_and_a_state_of_0_2_is_explained(s3, bucket):
    """A 0.2 sidecar (format 1, no versions in its hash): its rows are reused (no shard read), it is
    rewritten as format 3; a 0.2 state (format 1) resumes; 0.2's fingerprint in a current state is named
    as such, and strict=False accepts it."""
    name, cache = bucket
    corpus = open_bucket(s3, name, cache)
    old = corpus.index.to_json()
    old.update(version=1, content_hash=corpus.index.legacy_hash, shards=[s[:4] for s in old["shards"]])
    fresh = cache + "-fresh"
    key = sidecar.corpus_key([corpus.index.url(i) for i in range(4)], "tokens", corpus.index.options)
    sidecar.write_json(os.path.join(fresh, f"corpus-{key}.json"), old)
    assert _index.CorpusIndex.from_json(old, "old").shards == corpus.index.shards
    again = open_bucket(s3, name, fresh)
    assert again.fingerprint == corpus.fingerprint
    assert sidecar.read_index(os.path.join(fresh, f"corpus-{key}.idx")).read_as == 3  # rewritten, columnar
    state = loader_state(corpus)
    state["dataset_fingerprint"] = "shards:" + corpus.index.legacy_hash
    with pytest.raises(shufflepoint.StateError, match=r"saved by shufflepoint 0\.2, whose corpus fingerprint did not "
                                                      r"cover shard versions.*load with strict=False"):
        resume(again, state)  # a current-format state never carries 0.2's fingerprint
    loader = shufflepoint.DataLoader(again, batch_size=2, seed=3, shuffle_block=16, rank=0, world_size=1)
    with pytest.warns(shufflepoint.ResumeWarning, match="the dataset changed since the checkpoint"):
        loader.load_state_dict(state, strict=False)
    # A state as 0.2 wrote it (format 1, strided, 0.2's fingerprint) resumes as it is: the same corpus
    # by 0.2's measure, read strided as 0.2 read it.
    written_by_0_2 = {k: v for k, v in state.items() if k not in ("deal", "segments", "steps", "history", "excluded",
                                                                   "handed", "excluded_at", "shuffle_block", "grid",
                                                                   "phases", "ramp", "buckets")}
    written_by_0_2.update(version=1, cursor=2, dataset_fingerprint=state["dataset_fingerprint"] + ":blocks=16")
    loader = shufflepoint.DataLoader(again, batch_size=2, seed=3, shuffle_block=16, rank=0, world_size=1)
    loader.load_state_dict(written_by_0_2)
    assert loader.deal == "strided" and loader.cursor == 2
    assert loader.state_dict()["dataset_fingerprint"] == again.fingerprint
    assert loader.state_dict()["shuffle_block"] == 16


def test_rewritten_between_the_head_and_the_body(s3, bucket, tmp_path):
    """The object changes after a download looked it up and before its body came: s3fs reads If-Match the
    looked-up ETag, the server refuses, the retry looks again and the new version is a ShardError."""
    from shufflepoint._shards.storage.storage import Storage

    name, _ = bucket
    storage = Storage(s3.storage_options, retries=2, backoff=0.01)
    url = f"s3://{name}/part-1.bin"
    indexed = storage.info(url)
    seen = []
    take = s3.faults.take

    def rewrite_before_the_first_body(kind, path):
        if kind == "fail" and path.split("?")[0].endswith("part-1.bin"):
            seen.append(path)
            if len(seen) == 2:  # the HEAD of the download went through; its GET comes now
                s3.put(name, "part-1.bin", same_size_other_bytes(1))
        return take(kind, path)

    s3.faults.take = rewrite_before_the_first_body
    try:
        with pytest.raises(shufflepoint.ShardError,
                           match=r"part-1\.bin: rewritten since it was indexed: its version is \w+ now"):
            storage.fetch(url, str(tmp_path / "got"), indexed.size, indexed.version)
    finally:
        s3.faults.take = take
    assert len(seen) >= 3 and not (tmp_path / "got").exists()


def test_a_damaged_cached_copy_is_caught_with_checksums(s3, bucket):
    name, cache = bucket
    corpus = shufflepoint.Shards(f"s3://{name}/*.bin", seq_len=SEQ, storage_options=s3.storage_options,
                                 cache_dir=cache, progress=False, verify="checksum")
    entry = corpus._access.node_cache().entry(corpus.index.url(2), corpus.index.shards[2].version)
    with open(entry, "r+b") as f:  # the node's copy damaged on disk, its size kept
        f.write(b"\xff\xff")
    again = shufflepoint.Shards(f"s3://{name}/*.bin", seq_len=SEQ, storage_options=s3.storage_options,
                                cache_dir=cache, progress=False, verify="checksum")
    with pytest.raises(shufflepoint.ShardError, match=r"part-2\.bin: content changed: the copy .* hashes to"):
        again[20]
    assert again[10].tolist() == [1000, 1001, 1002, 1003, 1004]  # the other copies are fine
