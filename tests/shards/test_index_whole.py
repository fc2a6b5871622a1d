"""A kept or published index that records every listed shard, in order, with the same size and version is the
index as a whole (issue 33.5: no lookup per shard at 1e5 shards); anything else takes the shard-by-shard path,
which recounts only what changed."""

from __future__ import annotations

from shufflepoint._shards.index import index as _index

ROOT = "s3://bucket/corpus"
URLS = [f"{ROOT}/s{i}.bin" for i in range(5)]


def _kept(checksum: str = "") -> _index.CorpusIndex:
    records = tuple(_index.ShardRecord(f"s{i}.bin", 100 + i, f"v{i}", 10 + i, checksum) for i in range(5))
    return _index.CorpusIndex(ROOT, "tokens", {"seq_len": 4}, records)


def _build(known, info, checksums=False):
    counted = []

    def count(url, size, version):
        counted.append(url)
        return 99, "sha256:x" if checksums else ""

    built = _index.build(URLS, reader="tokens", options={"seq_len": 4}, info=info, count=count, known=known,
                         checksums=checksums, progress=False)
    return built, counted


def test_an_index_of_every_listed_shard_is_taken_whole():
    kept = _kept()
    built, counted = _build([kept], lambda url: (100 + URLS.index(url), f"v{URLS.index(url)}"))
    assert built is kept and not counted


def test_a_rewritten_shard_is_recounted_alone_and_the_rest_reused():
    kept = _kept()
    info = lambda url: (100 + URLS.index(url), "new" if url.endswith("s3.bin") else f"v{URLS.index(url)}")  # noqa: E731
    built, counted = _build([kept], info)
    assert built is not kept and counted == [f"{ROOT}/s3.bin"]
    assert [s.rows for s in built.shards] == [10, 11, 12, 99, 14]
    assert built.content_hash != kept.content_hash


def test_checksums_kept_only_where_asked_for():
    with_sums = _kept("sha256:abc")
    built, counted = _build([with_sums], lambda url: (100 + URLS.index(url), f"v{URLS.index(url)}"))
    assert built is not with_sums and not counted and all(s.checksum == "" for s in built.shards)
    built, counted = _build([_kept()], lambda url: (100 + URLS.index(url), f"v{URLS.index(url)}"), checksums=True)
    assert len(counted) == 5  # an index without checksums cannot serve a checksummed one
