"""Token counts: counted once per corpus (in parallel, by shard), kept in the cache folder (per shard, and the
totals) and read back without reading a shard; a ``tokenize`` callable named by its ``tokenizer`` identity,
which keys the counts and joins the fingerprint."""

from __future__ import annotations

import glob
import json
import multiprocessing
import os

import numpy as np
import pytest
import torch

import shufflepoint
from corpus_files import jsonl_documents
from shufflepoint._shards.corpora.packed.packed import Packed
from shufflepoint._shards.counting import token_counts


def corpus(tmp_path, **kwargs):
    return shufflepoint.Shards(str(tmp_path / "data" / "*.jsonl"), cache_dir=str(tmp_path / "cache"),
                               progress=False, **kwargs)


def counts_files(tmp_path):
    """The totals a node keeps, one file per corpus and token source."""
    return sorted(glob.glob(str(tmp_path / "cache" / "tokens-*.json")))


def shard_files(tmp_path):
    """The per-document counts a node keeps, one file per shard it counted or read."""
    return sorted(glob.glob(str(tmp_path / "cache" / "tokens" / "*.npy")))


def all_counts(packed):
    """Every document's token count (bos/eos aside): loads every shard's counts, for the tests' checks."""
    return packed._counts.raw.sizes(np.arange(packed.documents)).tolist()


def refuse_reads(monkeypatch):
    """From now on, reading any row of any ``Shards`` fails."""
    def fail(*args, **kwargs):
        raise AssertionError("a shard was read")

    for name in ("__getitem__", "__getitems__", "read_batch"):
        monkeypatch.setattr(shufflepoint.Shards, name, fail)


def test_counted_once_in_parallel_then_read_back_without_reading_a_shard(tmp_path, monkeypatch):
    tokens = jsonl_documents(str(tmp_path / "data"), 7, rows=(0, 30))
    first = Packed(corpus(tmp_path), 16, count_workers=2)  # two worker processes, a progress bar
    assert first.tokens_per_epoch == len(tokens)
    expected = [len(sample["input_ids"]) for sample in corpus(tmp_path)]
    assert all_counts(first) == expected
    assert len(counts_files(tmp_path)) == 1 and len(shard_files(tmp_path)) == 7  # the totals, and each shard's
    kept = np.concatenate([np.load(f) for f in shard_files(tmp_path)])
    assert kept.dtype == np.int32 and sorted(kept.tolist()) == sorted(expected)  # 4 bytes a document
    refuse_reads(monkeypatch)
    again = Packed(corpus(tmp_path), 16, progress=False)  # a restarted job: a new Shards, a new Packed
    assert all_counts(again) == expected and again.fingerprint == first.fingerprint
    with pytest.raises(AssertionError, match="a shard was read"):  # the refusal would have caught a read
        Packed(corpus(tmp_path), 16, tokens="id", progress=False)


def test_the_counts_are_keyed_by_the_corpus_and_the_tokens(tmp_path):
    jsonl_documents(str(tmp_path / "data"), 3, rows=(2, 5))
    Packed(corpus(tmp_path), 4, progress=False)
    Packed(corpus(tmp_path), 8, eos=1, progress=False)  # the packing is not part of the key
    assert len(counts_files(tmp_path)) == 1
    Packed(corpus(tmp_path), 1, tokenize=lambda s: [s["id"]], tokenizer="id@1", progress=False)
    assert len(counts_files(tmp_path)) == 2
    shard = tmp_path / "data" / "part-00001.jsonl"
    lines = shard.read_text().splitlines()
    shard.write_text("\n".join(lines[:-1] + [json.dumps({"id": 99, "input_ids": [1, 2, 3, 4, 5, 6, 7]})]) + "\n")
    rewritten = Packed(corpus(tmp_path), 4, progress=False)  # the corpus fingerprint changed: counted again
    assert len(counts_files(tmp_path)) == 3 and 7 in all_counts(rewritten)
    assert [len(s["input_ids"]) for s in corpus(tmp_path)] == all_counts(rewritten)


def test_damaged_kept_counts_are_counted_again_for_those_shards_only(tmp_path, monkeypatch):
    """A node's kept files are its own cache: a damaged one is not refused but counted again (that shard only)."""
    jsonl_documents(str(tmp_path / "data"), 3, rows=(2, 3))
    first = Packed(corpus(tmp_path), 2, progress=False)
    expected = all_counts(first)
    (totals,) = counts_files(tmp_path)
    with open(totals, "w") as f:
        f.write("{not json")
    damaged = shard_files(tmp_path)[1]
    np.save(damaged, np.array([1, 2], dtype=np.float32))
    counted = []
    original = token_counts.count_range
    monkeypatch.setattr(token_counts, "count_range", lambda d, c, a, b: counted.append((a, b)) or original(d, c, a, b))
    again = Packed(corpus(tmp_path), 2, progress=False, count_workers=1)
    assert len(counted) == 1 and all_counts(again) == expected and again.fingerprint == first.fingerprint
    assert np.load(damaged).dtype == np.int32  # written again


def test_a_transform_or_a_list_is_counted_every_time_and_kept_nowhere(tmp_path):
    jsonl_documents(str(tmp_path / "data"), 2, rows=(2, 3))
    doubled = corpus(tmp_path, transform=lambda s: {"input_ids": s["input_ids"] * 2})
    packed = Packed(doubled, 2, progress=False)
    assert all_counts(packed) == [2 * len(s["input_ids"]) for s in corpus(tmp_path)]
    Packed([{"input_ids": [1, 2]}], 1, progress=False)
    assert counts_files(tmp_path) == [] and shard_files(tmp_path) == []


def _construct(folder: str, log: str, queue: multiprocessing.Queue) -> None:
    def tokenize(sample):
        with open(log, "a") as f:
            f.write(f"{sample['id']}\n")
        return sample["input_ids"]

    packed = Packed(shufflepoint.Shards(os.path.join(folder, "data", "*.jsonl"),
                                        cache_dir=os.path.join(folder, "cache"), progress=False),
                    4, tokenize=tokenize, tokenizer="identity@1", progress=False)
    queue.put(all_counts(packed))


def test_ranks_constructing_at_once_count_once(tmp_path):
    jsonl_documents(str(tmp_path / "data"), 4, rows=(3, 6))
    corpus(tmp_path)  # the corpus index first: its own lock is not what this test is about
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    log = str(tmp_path / "tokenized.log")
    processes = [context.Process(target=_construct, args=(str(tmp_path), log, queue)) for _ in range(3)]
    for process in processes:
        process.start()
    found = [queue.get(timeout=60) for _ in processes]
    for process in processes:
        process.join(60)
        assert process.exitcode == 0
    documents = len(corpus(tmp_path))
    assert found[0] == found[1] == found[2] and len(found[0]) == documents
    with open(log) as f:
        assert sorted(map(int, f.read().split())) == list(range(documents))  # each document tokenized once


TEXTS = ["shuffle", "", "point", "exact and elastic", "é", "resume " * 9]


def byte_tokenize(sample):
    return list(sample["text"].encode())


def test_tokenize_packs_the_same_rows_as_the_token_field():
    texts = [{"text": t} for t in TEXTS]
    tokenized = [{"input_ids": torch.tensor(byte_tokenize(t), dtype=torch.int32)} for t in texts]
    by_text = Packed(texts, 5, tokenize=byte_tokenize, tokenizer="bytes@utf-8", eos=256, progress=False)
    by_field = Packed(tokenized, 5, eos=256, progress=False)
    assert all_counts(by_text) == [len(t.encode()) for t in TEXTS]
    for packed in (by_text, by_field):
        packed.epoch_order(3, 0, 4)
    assert len(by_text) == len(by_field) == (sum(len(t.encode()) + 1 for t in TEXTS)) // 5
    for row in range(len(by_text)):
        assert by_text[row]["input_ids"].tolist() == by_field[row]["input_ids"].tolist()
    assert by_text.fingerprint != by_field.fingerprint


def test_tokenizer_counts_are_kept_per_tokenizer(tmp_path, monkeypatch):
    jsonl_documents(str(tmp_path / "data"), 3, rows=(2, 4))
    calls = []

    def tokenize(sample):
        calls.append(sample["id"])
        return sample["input_ids"][::2]

    first = Packed(corpus(tmp_path), 2, tokenize=tokenize, tokenizer="halves@1", progress=False)
    assert len(calls) == first.documents
    Packed(corpus(tmp_path), 2, tokenize=tokenize, tokenizer="halves@2", progress=False)  # another identity
    assert len(calls) == 2 * first.documents and len(counts_files(tmp_path)) == 2
    refuse_reads(monkeypatch)
    again = Packed(corpus(tmp_path), 2, tokenize=tokenize, tokenizer="halves@1", progress=False)
    assert all_counts(again) == all_counts(first) and len(calls) == 2 * first.documents


def loader(tokenizer, texts=TEXTS):
    packed = Packed([{"text": t} for t in texts], 4, tokenize=byte_tokenize, tokenizer=tokenizer, progress=False)
    return shufflepoint.DataLoader(packed, 2, seed=5, shuffle_block=2, collate_fn=list)


def test_a_resume_with_another_tokenizer_is_refused_naming_it():
    state = loader("bytes@1").state_dict()
    loader("bytes@1").load_state_dict(state)
    with pytest.raises(shufflepoint.StateError, match=r"tokenizer changed: this Packed tokenizes with "
                                                       r"tokenizer='bytes@2'"):
        loader("bytes@2").load_state_dict(state)
    with pytest.raises(shufflepoint.StateError, match="token counts changed"):
        loader("bytes@1", TEXTS[:-1] + ["resume " * 8 + "extra"]).load_state_dict(state)


def test_bad_tokenize_input_names_the_argument_or_the_document():
    texts = [{"text": t} for t in TEXTS]
    with pytest.raises(ValueError, match="tokenizer: found None\n  expected: a non-empty string"):
        Packed(texts, 2, tokenize=byte_tokenize, progress=False)
    with pytest.raises(ValueError, match="tokenizer: found ' '"):
        Packed(texts, 2, tokenize=byte_tokenize, tokenizer=" ", progress=False)
    with pytest.raises(ValueError, match="tokenizer: found 'bytes'\n  expected: None without tokenize"):
        Packed(texts, 2, tokenizer="bytes", progress=False)
    with pytest.raises(ValueError, match=r"tokens, tokenize: found both \(tokens='text'\)"):
        Packed(texts, 2, tokens="text", tokenize=byte_tokenize, tokenizer="bytes", progress=False)
    with pytest.raises(TypeError, match="tokenize: found 'bytes'\n  expected: a callable"):
        Packed(texts, 2, tokenize="bytes", tokenizer="bytes", progress=False)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"tokenize \(tokenizer 'f'\): its output for document 0: found float64"):
        Packed(texts, 2, tokenize=lambda s: [0.5], tokenizer="f", progress=False)
    with pytest.raises(ValueError, match=r"tokenize \(tokenizer 'k'\): found document 1 failed: KeyError"):
        Packed([{"text": "a"}, {"body": "b"}], 1, tokenize=byte_tokenize, tokenizer="k", progress=False)
    with pytest.raises(ValueError, match="count_workers: found 0"):
        Packed(texts, 2, tokenize=byte_tokenize, tokenizer="bytes", count_workers=0, progress=False)
    changing = [{"text": "abcd"}, {"text": "efgh"}]
    packed = Packed(changing, 4, tokenize=byte_tokenize, tokenizer="bytes", progress=False)
    packed.epoch_order(0, 0, 1)
    changing[1]["text"] = "efghi"
    with pytest.raises(ValueError, match=r"tokenize \(tokenizer 'bytes'\): document 1 now holds 5 tokens, 4 when"):
        packed.__getitems__([0, 1])


def test_the_counts_module_reads_the_field_as_before():
    source = token_counts.TokenSource.checked(None, None, None)
    assert source.field == "input_ids" and source.count({"input_ids": np.arange(3, dtype=np.uint8)}, 0) == 3


def test_a_refused_resume_names_what_changed_in_the_packing():
    def loader(texts=TEXTS, seq_len=4, eos=None, shuffle_block=2, tokens=None):
        docs = [{"text": t, "input_ids": byte_tokenize({"text": t})} for t in texts]
        packed = (Packed(docs, seq_len, tokens=tokens, eos=eos, progress=False) if tokens else
                  Packed(docs, seq_len, tokenize=byte_tokenize, tokenizer="bytes", eos=eos, progress=False))
        return shufflepoint.DataLoader(packed, 2, seed=5, shuffle_block=shuffle_block, collate_fn=list)

    state = loader().state_dict()
    for changed, expected in [(dict(seq_len=3), "packing parameter seq_len: saved 4, now 3"),
                              (dict(eos=0), "packing parameter eos: saved None, now 0"),
                              (dict(shuffle_block=3), r"'shuffle_block': found 2\n  expected: 3"),
                              (dict(tokens="input_ids"), "the tokens changed: this Packed reads the field "
                                                         "'input_ids', the state was taken with another field "
                                                         "or a tokenizer")]:
        with pytest.raises(shufflepoint.StateError, match=expected):
            loader(**changed).load_state_dict(state)


def test_a_bad_document_counted_in_a_worker_process_is_named(tmp_path):
    jsonl_documents(str(tmp_path / "data"), 3, rows=(2, 3))
    shard = tmp_path / "data" / "part-00002.jsonl"
    shard.write_text(shard.read_text() + json.dumps({"id": 7, "input_ids": [1.5]}) + "\n")
    documents = len(corpus(tmp_path))
    with pytest.raises(TypeError, match=f"field 'input_ids' of document {documents - 1}: found float64"):
        Packed(corpus(tmp_path), 2, count_workers=2, progress=False)
    assert counts_files(tmp_path) == []  # nothing half-written


def test_kept_counts_open_in_O_shards_and_framing_makes_no_copy(tmp_path, monkeypatch):
    """A Packed over a corpus whose totals are kept reads no per-document count to open, with or without
    bos/eos (no shifted prefix sums); its rows and fingerprint are those of the first construction."""
    jsonl_documents(str(tmp_path / "data"), 4, rows=(1, 20))
    first = Packed(corpus(tmp_path), 8, progress=False)
    framed = Packed(corpus(tmp_path), 8, bos=0, eos=1, progress=False)
    monkeypatch.setattr(token_counts, "count_range", lambda *a: pytest.fail("a shard was counted again"))
    again = Packed(corpus(tmp_path), 8, progress=False)
    framed_again = Packed(corpus(tmp_path), 8, bos=0, eos=1, progress=False)
    for packed in (again, framed_again):
        assert not packed._counts.framed._kept  # no shard's per-document counts loaded: O(shards) to open
    assert again.fingerprint == first.fingerprint and framed_again.fingerprint == framed.fingerprint
    assert framed_again.tokens_per_epoch == first.tokens_per_epoch + 2 * first.documents

    def first_rows(packed):
        return [b.tolist() for b in shufflepoint.DataLoader(packed, 2, seed=3, collate_fn=lambda b: b[0]["input_ids"])]

    for a, b in ((again, first), (framed_again, framed)):
        rows = [first_rows(a), first_rows(b)]
        assert rows[0] == rows[1] and len(rows[0]) == -(-len(b) // 2)
