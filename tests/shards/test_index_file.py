"""Index format 3, the columnar file: the same records and the same content hash as the JSON sidecar,
older sidecars still read, and a damaged file refused by name."""

from __future__ import annotations

import hashlib
import json
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shufflepoint._shards.index import index as _index
from shufflepoint._shards.index import index_file, sidecar

# Names and versions as storages spell them: any text, quotes, backslashes, newlines and non-ASCII included.
text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
records = st.lists(st.tuples(text, st.integers(0, 2**62), text, st.integers(0, 2**62),
                             st.sampled_from(["", "sha256:" + "ab" * 32])), max_size=20)
options = st.dictionaries(st.sampled_from(["seq_len", "dtype", "columns"]),
                          st.one_of(st.integers(1, 4096), text, st.lists(text, max_size=3)), max_size=3)


def hash_as_format_2(reader, opts, shards):
    """The content hash as format 2 defined it (shufflepoint 0.3-0.4): what states carry."""
    identity = {"reader": reader, "options": opts, "shards": [[n, s, v, r] for n, s, v, r, _ in shards]}
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()


@settings(max_examples=25, deadline=None)
@given(records, options, st.sampled_from(["s3://bucket/corpus", "/data/corpus", ""]))
def test_the_columnar_file_round_trips_and_hashes_as_the_json_sidecar(shards, opts, root):
    built = _index.CorpusIndex(root, "jsonl", opts, tuple(_index.ShardRecord(*r) for r in shards))
    data = index_file.encode(built)
    read = index_file.decode(data, "the-file.idx")
    assert read == built and list(read.shards) == [_index.ShardRecord(*r) for r in shards]
    assert read.shards.rows.dtype == np.int64 and read.rows.tolist() == [r[3] for r in shards]
    assert read.content_hash == built.content_hash == hash_as_format_2("jsonl", opts, shards)
    assert read.legacy_hash == built.legacy_hash and (read.root, read.options, read.read_as) == (root, opts, 3)
    as_json = _index.CorpusIndex.from_json(json.loads(json.dumps(built.to_json())), "the-file.json")
    assert as_json == read and as_json.content_hash == read.content_hash and as_json.read_as == 2
    assert index_file.encode(as_json) == data  # the same records give the same bytes, whichever file they came from


@settings(max_examples=20, deadline=None)
@given(records, st.data())
def test_a_glob_selects_its_shards_with_the_hash_of_an_index_of_them(shards, data):
    built = _index.CorpusIndex("s3://b/c", "jsonl", {}, tuple(_index.ShardRecord(*r) for r in shards))
    positions = np.array(data.draw(st.lists(st.integers(0, max(0, len(shards) - 1)), unique=True,
                                            max_size=len(shards))) if shards else [], dtype=np.int64)
    read = index_file.decode(index_file.encode(built, {"*.jsonl": positions, "all": np.arange(len(shards))}), "f")
    assert index_file.for_glob(read, "other") is None
    assert index_file.for_glob(read, "all") is read
    chosen = index_file.for_glob(read, "*.jsonl")
    alone = _index.CorpusIndex("s3://b/c", "jsonl", {}, tuple(built.shards[i] for i in positions.tolist()))
    assert chosen == alone and chosen.content_hash == alone.content_hash


def small_index():
    shards = tuple(_index.ShardRecord(f"part-{i}.jsonl", 100 + i, f"v{i}", 10 + i) for i in range(5))
    return _index.CorpusIndex("s3://bucket/corpus", "jsonl", {}, shards)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_any_damage_is_refused_naming_the_file(data):
    good = index_file.encode(small_index())
    at = data.draw(st.integers(0, len(good) - 1))
    kind = data.draw(st.sampled_from(["flip", "truncate", "extend"]))
    damaged = {"flip": good[:at] + bytes([good[at] ^ (1 << data.draw(st.integers(0, 7)))]) + good[at + 1:],
               "truncate": good[:at], "extend": good + b"\0" * (at + 1)}[kind]
    with pytest.raises(ValueError, match=r"^/cache/corpus-k\.idx: found (bytes that do not match their sha256|no "
                                         r"columnar index header)") as refused:
        index_file.decode(damaged, "/cache/corpus-k.idx")
    assert "fix: delete it to rebuild" in str(refused.value)


def resealed(head_change, body_change=lambda body: body):
    """A file whose header or sections were edited, its sha256 made right again: only the fields can tell."""
    good = index_file.encode(small_index())
    magic, rest = good[:len(index_file.MAGIC)], good[len(index_file.MAGIC):-32]
    line, body = rest.split(b"\n", 1)
    head = json.loads(line)
    head_change(head)
    out = magic + json.dumps(head).encode() + b"\n" + body_change(body)
    return out + hashlib.sha256(out).digest()


@pytest.mark.parametrize(("change", "body", "why"), [
    (lambda h: h.update(shards=6), lambda b: b, "columns that are not 6 values each"),
    (lambda h: h.update(version=4), lambda b: b, "version 4, expected 'shufflepoint-index' 3"),
    (lambda h: h.update(content_hash="abc"), lambda b: b, "content_hash 'abc', expected 64 hex digits"),
    (lambda h: h.pop("root"), lambda b: b, "KeyError"),
    (lambda h: h["sections"][0].__setitem__(1, 16), lambda b: b, "sections of"),
    (lambda h: None, lambda b: b[:40] + (-1).to_bytes(8, "little", signed=True) + b[48:], "sizes and rows >= 0"),
])
def test_fields_that_do_not_add_up_are_refused_naming_the_file(change, body, why):
    with pytest.raises(ValueError, match=r"^the/file\.idx: found a damaged corpus index\n") as refused:
        index_file.decode(resealed(change, body), "the/file.idx")
    assert why in str(refused.value) and "expected: a columnar corpus index's fields (format 3)" in str(refused.value)


def test_json_sidecars_of_formats_1_and_2_still_load_with_their_hashes(tmp_path):
    built = small_index()
    two = tmp_path / "corpus-k.json"
    sidecar.write_json(str(two), built.to_json())
    one = built.to_json()
    one.update(version=1, content_hash=built.legacy_hash, shards=[s[:4] for s in one["shards"]])
    sidecar.write_json(str(tmp_path / "index-old.json"), one)
    assert sidecar.load_latest(str(tmp_path), "k", "s3://bucket/corpus") == built
    assert sidecar.read_index(str(two)).read_as == 2 and sidecar.read_index(str(two)).content_hash == built.content_hash
    assert sidecar.load_by_hash(str(tmp_path), "old").read_as == 1
    sidecar.save(built, str(tmp_path), "k")  # the columnar copy is read first from now on
    assert sidecar.load_latest(str(tmp_path), "k", "s3://bucket/corpus").read_as == 3
    assert os.path.exists(tmp_path / f"index-{built.content_hash}.idx")


def test_neither_columnar_nor_json_is_refused_naming_the_file(tmp_path):
    path = tmp_path / "corpus-k.idx"
    path.write_bytes(b"\x00\x01 not an index")
    with pytest.raises(ValueError, match=rf"^{path}: found an unreadable corpus index\n  expected: a corpus index "
                                         r"\(a columnar file starting b'shufflepoint-index 3\\n', or JSON\)"):
        sidecar.load_latest(str(tmp_path), "k", "s3://b")
