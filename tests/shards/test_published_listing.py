"""A glob that ``shufflepoint index`` published is listed from its index: no LIST, one GET per node, and a
shard rewritten, deleted or added since is never read as if it were the published one (local S3 server)."""

from __future__ import annotations

import json
import re
import uuid

import pytest

import shufflepoint
from corpus_files import jsonl_corpus
from shufflepoint._tools.cli import main


def requests(s3, name):
    """(kind, key) of every request to bucket ``name``: LIST, HEAD or GET."""
    found = []
    for method, path, _ in s3.faults.log:
        key, _, query = path.partition("?")
        key = key.removeprefix(f"/{name}").lstrip("/")
        found.append(("LIST" if method == "GET" and ("list-type" in query or not key) else method, key))
    return found


def test_a_published_glob_is_read_from_its_index_not_listed(s3, tmp_path):
    name = "listing-" + uuid.uuid4().hex[:8]
    ids = jsonl_corpus(str(tmp_path / "local"), 6, rows=(3, 8))
    s3.upload(name, str(tmp_path / "local"))
    glob, options = f"s3://{name}/*.jsonl", {"storage_options": s3.storage_options, "progress": False}
    publisher = ["--storage-options", json.dumps(s3.storage_options), "--cache-dir", str(tmp_path / "pub")]
    assert main(["index", glob, *publisher, "--json", str(tmp_path / "published.json")]) == 0
    published = json.loads((tmp_path / "published.json").read_text())
    key = published["published"].removeprefix(f"s3://{name}/")
    assert key.startswith(".shufflepoint-index-") and key.endswith(".idx")

    s3.reset()
    corpus = shufflepoint.Shards(glob, cache_dir=str(tmp_path / "node"), **options)
    seen = requests(s3, name)
    assert {k for _, k in seen} == {key} and [m for m, _ in seen].count("GET") == 1  # no LIST, none per shard
    assert corpus.fingerprint == published["fingerprint"] and [corpus[i]["id"] for i in range(len(corpus))] == ids
    s3.reset()
    again = shufflepoint.Shards(glob, cache_dir=str(tmp_path / "node"), **options)  # another rank of the node
    assert {m for m, _ in requests(s3, name)} == {"HEAD"} and again.fingerprint == corpus.fingerprint
    cached = next((tmp_path / "node").glob("published-*.idx"))  # the node's copy, damaged on its disk
    data = bytearray(cached.read_bytes())
    data[len(data) // 2] ^= 1
    cached.write_bytes(bytes(data))
    with pytest.warns(UserWarning, match=re.escape(str(cached)) + r" is not readable .*found bytes that do not "
                                         r"match their sha256"):
        listed = shufflepoint.Shards(glob, cache_dir=str(tmp_path / "node"), **options)
    assert listed.fingerprint == corpus.fingerprint and not cached.exists()  # listed; fetched again next time

    # Added since: not in the corpus until published again. Rewritten since: refused when read, by name.
    s3.put(name, "part-00006.jsonl", b'{"id": 1000}\n')
    s3.put(name, "part-00002.jsonl", b'{"id": -1}\n')
    fresh = shufflepoint.Shards(glob, cache_dir=str(tmp_path / "fresh"), **options)
    assert len(fresh) == len(ids) and fresh.fingerprint == corpus.fingerprint
    first_of_2 = int(fresh._starts[2])
    with pytest.raises(shufflepoint.ShardError, match="part-00002.jsonl"):
        fresh[first_of_2]
    assert main(["index", glob, *publisher, "--json", str(tmp_path / "again.json")]) == 0  # the tool lists
    republished = shufflepoint.Shards(glob, cache_dir=str(tmp_path / "fresh"), **options)
    assert len(republished.index.shards) == 7 and republished[first_of_2] == {"id": -1}
    assert republished[len(republished) - 1] == {"id": 1000}
    assert republished.fingerprint == json.loads((tmp_path / "again.json").read_text())["fingerprint"]
    assert len(list((tmp_path / "fresh").glob("published-*.idx"))) == 1  # the node keeps the newest copy only


def test_a_glob_that_was_not_published_is_listed(s3, tmp_path):
    name = "other-" + uuid.uuid4().hex[:8]
    jsonl_corpus(str(tmp_path / "local"), 4, rows=(3, 5))
    s3.upload(name, str(tmp_path / "local"))
    publisher = ["--storage-options", json.dumps(s3.storage_options), "--cache-dir", str(tmp_path / "pub")]
    assert main(["index", f"s3://{name}/part-0000[0-1].jsonl", *publisher, "--json", str(tmp_path / "p.json")]) == 0
    s3.reset()
    with pytest.warns(UserWarning, match=r"indexing downloads 2 shard\(s\)"):  # the other two: counted here
        corpus = shufflepoint.Shards(f"s3://{name}/*.jsonl", cache_dir=str(tmp_path / "node"),
                                     storage_options=s3.storage_options, progress=False)
    assert ("LIST", "") in requests(s3, name) and len(corpus.index.shards) == 4
