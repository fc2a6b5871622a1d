"""Indexing a bucket reads what it must, not the corpus: on the local S3 server, counting GET bytes.

Parquet row counts come from the footers (ranged reads); a JSONL corpus whose index was published
by ``shufflepoint index`` costs one small GET; without one, every shard is downloaded, with a
warning that says so and how to avoid it.
"""

from __future__ import annotations

import json
import os
import random
import uuid
import warnings

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import shufflepoint
from corpus_files import jsonl_corpus
from shufflepoint._shards.index import index_file, sidecar
from shufflepoint._tools.cli import main


def parquet_files(folder, shards=8, rows=3000):
    """Parquet shards big enough that a footer is a small part of each (~60 KB, 3 row groups)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    os.makedirs(folder, exist_ok=True)
    rng = random.Random(0)
    counts = []
    for shard in range(shards):
        n = rows + rng.randint(0, 500)
        text = [rng.randbytes(10).hex() for _ in range(n)]
        path = os.path.join(folder, f"part-{shard:03d}.parquet")
        pq.write_table(pa.table({"id": list(range(n)), "text": text}), path, row_group_size=n // 3 + 1,
                       compression="none")
        counts.append(n)
    return counts


def gets(s3, name):
    """(key, bytes) of every GET of an object of bucket ``name`` (listings excluded), from the proxy's log;
    a GET with no Range counts the whole object."""
    sizes = {o["Key"]: o["Size"] for o in s3.client().list_objects_v2(Bucket=name).get("Contents", [])}
    found = []
    for method, path, byte_range in s3.faults.log:
        key = path.split("?", 1)[0].removeprefix(f"/{name}/")
        if method != "GET" or key not in sizes:
            continue
        if byte_range:
            start, end = byte_range.removeprefix("bytes=").split("-")
            found.append((key, min(int(end), sizes[key] - 1) - int(start) + 1))
        else:
            found.append((key, sizes[key]))
    return found


def test_parquet_is_indexed_from_its_footers(s3, tmp_path):
    import pyarrow.parquet as pq

    name = "pq-" + uuid.uuid4().hex[:8]
    counts = parquet_files(str(tmp_path / "local"))
    s3.upload(name, str(tmp_path / "local"))
    local = sorted((tmp_path / "local").iterdir())
    corpus_bytes = sum(p.stat().st_size for p in local)
    footers = sum(pq.ParquetFile(p).metadata.serialized_size + 8 for p in local)
    s3.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning: nothing is scanned
        corpus = shufflepoint.Shards(f"s3://{name}/*.parquet", storage_options=s3.storage_options,
                                     cache_dir=str(tmp_path / "cache"), progress=False)
    fetched = gets(s3, name)
    assert corpus.shard_rows.tolist() == counts
    assert sum(size for _, size in fetched) == footers  # exactly the footers and their 8-byte trailers
    assert footers <= 0.01 * corpus_bytes
    assert corpus[counts[0] + 5]["id"] == 5  # and the rows read back
    with pytest.raises(shufflepoint.ShardError, match=r"part-000\.parquet: column 'nope' not found"):
        shufflepoint.Shards(f"s3://{name}/*.parquet", columns=["nope"], storage_options=s3.storage_options,
                            cache_dir=str(tmp_path / "cache2"), progress=False)


def test_a_published_index_is_all_a_node_reads(s3, tmp_path):
    name = "pub-" + uuid.uuid4().hex[:8]
    ids = jsonl_corpus(str(tmp_path / "local"), 12, rows=(5, 40))
    s3.upload(name, str(tmp_path / "local"), prefix="web/")
    options = json.dumps(s3.storage_options)
    assert main(["index", f"s3://{name}/web/*", "--storage-options", options, "--cache-dir",
                 str(tmp_path / "publisher")]) == 0
    published = [o["Key"] for o in s3.client().list_objects_v2(Bucket=name)["Contents"] if "shufflepoint" in o["Key"]]
    assert len(published) == 1 and published[0].startswith("web/.shufflepoint-index-")
    s3.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        corpus = shufflepoint.Shards(f"s3://{name}/web/*", storage_options=s3.storage_options,
                                     cache_dir=str(tmp_path / "node"), progress=False)  # the index is no shard
    assert [key for key, _ in gets(s3, name)] == published
    assert len(corpus) == len(ids) and len(corpus.index.shards) == 12
    assert [corpus[i]["id"] for i in range(len(corpus))] == ids
    s3.reset()
    shufflepoint.Shards(f"s3://{name}/web/*", storage_options=s3.storage_options, cache_dir=str(tmp_path / "node"),
                        progress=False)
    assert gets(s3, name) == []  # a restarted node: its own sidecar covers every shard, the published one is not read

    # A shard rewritten since: counted by the node that meets it, the others still from the index.
    s3.put(name, "web/part-00004.jsonl", b'{"id": -1}\n')
    s3.reset()
    with pytest.warns(UserWarning, match=r"indexing downloads 1 shard\(s\) whole, 11 bytes.*published at .* does not "
                                         r"match them"):
        again = shufflepoint.Shards(f"s3://{name}/web/*", storage_options=s3.storage_options,
                                    cache_dir=str(tmp_path / "node2"), progress=False)
    assert sorted(key for key, _ in gets(s3, name)) == sorted([*published, "web/part-00004.jsonl"])
    assert again.shard_rows[4] == 1


def test_without_a_published_index_every_shard_is_scanned_with_a_warning(s3, tmp_path):
    name = "scan-" + uuid.uuid4().hex[:8]
    jsonl_corpus(str(tmp_path / "local"), 6, rows=(5, 10))
    s3.upload(name, str(tmp_path / "local"))
    total = sum(p.stat().st_size for p in (tmp_path / "local").iterdir())
    s3.reset()
    with pytest.warns(UserWarning, match=rf"indexing downloads 6 shard\(s\) whole, {total:,} bytes, on every node "
                                         r"that has no index of them \(jsonl shards keep no row counts\)\. Publish"):
        shufflepoint.Shards(f"s3://{name}/*.jsonl", storage_options=s3.storage_options,
                            cache_dir=str(tmp_path / "cache"), progress=False)
    assert sum(size for _, size in gets(s3, name)) == total


def test_a_format_1_sidecar_spares_the_scan(s3, tmp_path):
    """A sidecar written by shufflepoint 0.2 (index format 1): its rows are reused, no shard is downloaded."""
    name = "v1-" + uuid.uuid4().hex[:8]
    jsonl_corpus(str(tmp_path / "local"), 5, rows=(5, 10))
    s3.upload(name, str(tmp_path / "local"))
    with pytest.warns(UserWarning, match="indexing downloads"):
        built = shufflepoint.Shards(f"s3://{name}/*.jsonl", storage_options=s3.storage_options,
                                    cache_dir=str(tmp_path / "first"), progress=False)
    old = built.index.to_json()
    old.update(version=1, content_hash=built.index.legacy_hash, shards=[s[:4] for s in old["shards"]])
    key = sidecar.corpus_key([built.index.url(i) for i in range(5)], "jsonl", {})
    sidecar.write_json(str(tmp_path / "upgraded" / f"corpus-{key}.json"), old)
    s3.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = shufflepoint.Shards(f"s3://{name}/*.jsonl", storage_options=s3.storage_options,
                                    cache_dir=str(tmp_path / "upgraded"), progress=False)
    assert gets(s3, name) == [] and again.fingerprint == built.fingerprint


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.integers(0, 300), group=st.integers(1, 64), columns=st.sampled_from([None, ["id"], ["text", "id"]]))
def test_parquet_footer_rows_equal_the_opened_rows(tmp_path_factory, rows, group, columns):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from shufflepoint._shards.readers import make_reader

    path = str(tmp_path_factory.mktemp("pq") / "x.parquet")
    pq.write_table(pa.table({"id": list(range(rows)), "text": ["t"] * rows}), path, row_group_size=group)
    data = open(path, "rb").read()
    reader = make_reader("parquet", columns=columns)
    opened = reader.open(path, path)
    assert reader.rows_from_metadata(lambda a, b: data[a:b], len(data), path) == len(opened) == rows
    opened.close()
    for cut in (1, 8, len(data) // 2):
        with pytest.raises(shufflepoint.ShardError, match="found a file that is not readable Parquet\n"
                                                          "  expected: a Parquet file\n  why: .+\n  fix: "):
            reader.rows_from_metadata(lambda a, b, d=data[:-cut]: d[a:b], len(data) - cut, path)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tokens=st.integers(0, 200), seq_len=st.integers(1, 20), dtype=st.sampled_from(["uint16", "uint32", "int64"]),
       wide_header=st.booleans())
def test_npy_header_rows_equal_the_opened_rows(tmp_path_factory, tokens, seq_len, dtype, wide_header):
    import io

    import numpy as np

    from shufflepoint._shards.readers import make_reader

    path = str(tmp_path_factory.mktemp("npy") / "x.npy")
    array = np.arange(tokens, dtype=dtype)
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, array, version=(2, 0) if wide_header else (1, 0))
    data = buffer.getvalue()
    open(path, "wb").write(data)
    reader = make_reader("tokens", seq_len=seq_len, dtype=dtype)
    opened = reader.open(path, path)
    assert reader.rows_from_metadata(lambda a, b: data[a:b], len(data), path) == len(opened) == max(0, (tokens - 1)
                                                                                                      // seq_len)
    opened.close()
    if tokens:
        with pytest.raises(shufflepoint.ShardError, match="truncated"):
            reader.rows_from_metadata(lambda a, b: data[a:b], len(data) - 1, path)
    other = "int32" if dtype != "int32" else "uint16"
    with pytest.raises(shufflepoint.ShardError, match=f"dtype: the .npy holds {dtype}, the reader expects {other}"):
        make_reader("tokens", seq_len=seq_len, dtype=other).rows_from_metadata(lambda a, b: data[a:b], len(data), path)


def test_two_corpora_in_one_folder_share_the_published_file(s3, tmp_path):
    """Publishing one glob keeps the other's records (while its shards are unchanged); a deleted
    shard's record goes at the next publish."""
    name = "two-" + uuid.uuid4().hex[:8]
    jsonl_corpus(str(tmp_path / "local"), 6, rows=(3, 6))
    s3.upload(name, str(tmp_path / "local"))
    options = ["--storage-options", json.dumps(s3.storage_options), "--cache-dir", str(tmp_path / "publisher")]
    first, second = f"s3://{name}/part-0000[0-2].jsonl", f"s3://{name}/part-0000[3-5].jsonl"
    assert main(["index", first, *options, "--json", os.devnull]) == 0
    assert main(["index", second, *options, "--json", os.devnull]) == 0
    for pattern in (first, second):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # neither node scans
            shufflepoint.Shards(pattern, storage_options=s3.storage_options, cache_dir=str(tmp_path / pattern[-12:]),
                                progress=False)
    s3.delete(name, "part-00004.jsonl")
    s3.delete(name, "part-00001.jsonl")
    assert main(["inspect", "--verify", first, *options, "--json", str(tmp_path / "first.json")]) == 1
    report = json.loads((tmp_path / "first.json").read_text())  # only this glob's shards, the deleted one too
    assert report["shards"] == 3 and [(f["shard"], f["kind"]) for f in report["findings"]] == [
        ("part-00001.jsonl", "missing")]
    s3.put(name, "part-00001.jsonl", b'{"id": 1}\n')
    assert main(["index", first, *options, "--json", os.devnull]) == 0
    key = next(o["Key"] for o in s3.client().list_objects_v2(Bucket=name)["Contents"] if "shufflepoint" in o["Key"])
    published = index_file.decode(s3.client().get_object(Bucket=name, Key=key)["Body"].read(), key)
    assert published.shards.names == [f"part-0000{i}.jsonl" for i in (0, 1, 2, 3, 5)]
    # The first glob lists from it; the second's record went with its deleted shard: it is listed again.
    assert {p: v.tolist() for p, v in published.globs.items()} == {"part-0000[0-2].jsonl": [0, 1, 2]}
