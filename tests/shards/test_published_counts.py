"""Token counts published beside the corpus (``shufflepoint index SOURCES --tokens FIELD``): a node reads the
per-shard totals and, by byte range, the counts of the shards it reads only; the same rows and fingerprint as
counting; a stale, missing or damaged part is counted again for those shards only, or refused by name."""

from __future__ import annotations

import glob
import json
import os

import numpy as np
import pytest

import shufflepoint
from corpus_files import jsonl_documents
from shufflepoint._shards.corpora.packed.packed import Packed
from shufflepoint._shards.counting import count_files, token_counts
from shufflepoint._tools.cli import main


def corpus(tmp_path, cache="cache", **kwargs):
    return shufflepoint.Shards(str(tmp_path / "data" / "*.jsonl"), cache_dir=str(tmp_path / cache), progress=False,
                               **kwargs)


def publish(tmp_path, capsys, *more):
    code = main(["index", str(tmp_path / "data" / "*.jsonl"), "--tokens", "input_ids", "--cache-dir",
                 str(tmp_path / "publisher"), "--count-workers", "1", *more])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def published(tmp_path):
    return sorted(glob.glob(str(tmp_path / "data" / ".shufflepoint-index-tokens-*")))


def counted_shards(monkeypatch):
    """From now on, the document ranges counted from the corpus."""
    counted = []
    original = token_counts.count_range
    monkeypatch.setattr(token_counts, "count_range",
                        lambda d, c, a, b: counted.append((a, b)) or original(d, c, a, b))
    from shufflepoint._shards.counting import shard_counts
    monkeypatch.setattr(shard_counts, "count_range", token_counts.count_range)
    return counted


def rows_of(packed, world=2):
    return [[b.tolist() for b in shufflepoint.DataLoader(packed, 2, seed=9, shuffle_block=6, rank=r, world_size=world,
                                                         collate_fn=lambda b: b[0]["input_ids"])] for r in range(world)]


def reference(tmp_path, **kwargs):
    """Every count in memory, counted here (a transform keeps a Shards from per-shard counts): the old way."""
    return Packed(corpus(tmp_path, "reference", transform=lambda s: s), 16, progress=False, **kwargs)


def test_published_counts_are_read_by_shard_and_give_the_rows_of_counting(tmp_path, capsys, monkeypatch):
    jsonl_documents(str(tmp_path / "data"), 6, rows=(3, 9))
    counting = Packed(corpus(tmp_path, "counting"), 16, eos=0, progress=False)  # counted by this process
    out = publish(tmp_path, capsys)
    assert "tokens     :" in out and len(published(tmp_path)) == 2  # the totals and the counts
    counted = counted_shards(monkeypatch)
    reads = []
    original = count_files.read_range
    monkeypatch.setattr(count_files, "read_range", lambda *a: reads.append(a[4]) or original(*a))
    packed = Packed(corpus(tmp_path), 16, eos=0, progress=False)
    assert counted == [] and reads == [] and not packed._counts.framed._kept  # opened from the totals alone: O(shards)
    assert packed.fingerprint == counting.fingerprint  # the same counts digest, published or counted
    old = reference(tmp_path, eos=0)
    assert len(packed) == len(old)
    assert rows_of(packed) == rows_of(old)
    assert 0 < len(reads) <= 6 and len(set(reads)) == len(reads)  # each shard's counts read once, by range


def test_a_stale_or_missing_shard_is_counted_again_alone(tmp_path, capsys, monkeypatch):
    jsonl_documents(str(tmp_path / "data"), 4, rows=(3, 6))
    publish(tmp_path, capsys)
    shard = tmp_path / "data" / "part-00002.jsonl"
    lines = shard.read_text().splitlines()
    shard.write_text("\n".join(lines[:-1] + [json.dumps({"id": 99, "input_ids": list(range(77))})]) + "\n")
    (tmp_path / "data" / "part-00009.jsonl").write_text(json.dumps({"id": 100, "input_ids": [5, 6]}) + "\n")
    counted = counted_shards(monkeypatch)
    with pytest.warns(UserWarning, match=r"do not match 2 shard\(s\) \(e.g. part-00002.jsonl, part-00009.jsonl"):
        packed = Packed(corpus(tmp_path), 16, progress=False, count_workers=1)
    starts = np.concatenate(([0], np.cumsum(packed.dataset.shard_rows)))
    assert sorted(counted) == [(int(starts[2]), int(starts[3])), (int(starts[4]), int(starts[5]))]
    assert rows_of(packed) == rows_of(reference(tmp_path))


def test_damaged_published_counts_are_refused_by_name(tmp_path, capsys):
    jsonl_documents(str(tmp_path / "data"), 3, rows=(3, 6))
    publish(tmp_path, capsys)
    totals, counts = sorted(published(tmp_path), key=lambda p: p.endswith(".bin"))
    data = bytearray(open(counts, "rb").read())
    data[0] ^= 0xFF  # one count of shard 0 changed
    open(counts, "wb").write(bytes(data))
    packed = Packed(corpus(tmp_path), 4, progress=False)  # the totals hold: it opens
    with pytest.raises(ValueError, match=r"tokens-.*\.bin: found the counts of shard part-00000.jsonl do not "
                                         r"match their digest\n.*\n  why: the counts file is damaged"):
        rows_of(packed)
    head, body = open(totals, "rb").read().split(b"\n", 1)
    value = json.loads(body)
    value["tokens"][1] += 1  # a shard's total edited
    open(totals, "wb").write(head + b"\n" + json.dumps(value).encode())
    with pytest.raises(ValueError, match=r"tokens-.*\.json: found damaged token totals\n.*\n  why: its records do "
                                         r"not match their check.*\n  fix: re-run `shufflepoint index"):
        Packed(corpus(tmp_path, "other"), 4, progress=False)
    open(totals, "w").write("{")
    with pytest.raises(ValueError, match=r"found damaged token totals"):
        Packed(corpus(tmp_path, "other"), 4, progress=False)


def test_counts_of_another_token_source_are_not_used(tmp_path, capsys, monkeypatch):
    jsonl_documents(str(tmp_path / "data"), 3, rows=(2, 4))
    publish(tmp_path, capsys)
    counted = counted_shards(monkeypatch)
    Packed(corpus(tmp_path), 1, tokens="input_ids", progress=False)
    assert counted == []
    Packed(corpus(tmp_path), 1, tokenize=lambda s: [s["id"]], tokenizer="id@1", progress=False, count_workers=1)
    assert len(counted) == 3  # another key: no published counts for this tokenizer, counted here


def test_the_index_command_publishes_counts_of_a_tokenizer(tmp_path, capsys, monkeypatch):
    jsonl_documents(str(tmp_path / "data"), 3, rows=(2, 4))
    (tmp_path / "tok_module.py").write_text("def ids(sample):\n    return [sample['id'], 1, 2]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import tok_module

    out = publish(tmp_path, capsys)  # the field's counts, then the tokenizer's beside them
    code = main(["index", str(tmp_path / "data" / "*.jsonl"), "--tokenize", "tok_module:ids", "--tokenizer", "ids@1",
                 "--cache-dir", str(tmp_path / "publisher")])
    out = capsys.readouterr()[0]
    assert code == 0 and "tokenizer" in out and len(published(tmp_path)) == 4
    counted = counted_shards(monkeypatch)
    packed = Packed(corpus(tmp_path), 3, tokenize=tok_module.ids, tokenizer="ids@1", progress=False)
    assert counted == [] and packed.tokens_per_epoch == 3 * packed.documents
    assert main(["index", str(tmp_path / "data" / "*.jsonl"), "--tokenize", "tok_module", "--tokenizer", "x"]) == 2
    assert "expected MODULE:FUNCTION" in capsys.readouterr()[1]


def test_a_remote_corpus_reads_its_counts_by_range(s3, s3_bucket, tmp_path, capsys, monkeypatch):
    jsonl_documents(str(tmp_path / "data"), 4, rows=(3, 6))
    s3.upload(s3_bucket, str(tmp_path / "data"), prefix="docs/")
    options = ["--storage-options", json.dumps(s3.storage_options)]
    code = main(["index", f"s3://{s3_bucket}/docs/*.jsonl", "--tokens", "input_ids", "--cache-dir",
                 str(tmp_path / "publisher"), *options])
    assert code == 0, capsys.readouterr()[1]
    s3.reset()
    remote = shufflepoint.Shards(f"s3://{s3_bucket}/docs/*.jsonl", cache_dir=str(tmp_path / "node"), progress=False,
                                 storage_options=s3.storage_options)
    packed = Packed(remote, 16, progress=False)
    gets = [(path, ranged) for method, path, ranged in s3.faults.log if method == "GET"]
    assert not any("/part-" in path for path, _ in gets), gets  # no shard downloaded to open it
    assert rows_of(packed) == rows_of(reference(tmp_path))
    ranged = [r for _, path, r in s3.faults.log if "tokens" in path and path.endswith(".bin") and r]
    assert ranged and all(r.startswith("bytes=") for r in ranged)
    assert os.listdir(tmp_path / "node" / "tokens")  # kept for the next start
