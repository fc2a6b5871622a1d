"""``Packed`` rows sliced from a token window (``packed_rows.TokenWindow``, issue 28.4) are the rows
the per-document path builds: the same tokens, positions and labels, with and without bos/eos,
across window, block and epoch edges, and the same refusals (a changed document, a doubled BOS)."""

from __future__ import annotations

import json
import types

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import shufflepoint
from shufflepoint._shards.corpora.packed import packed as packed_module
from shufflepoint._shards.corpora.packed.packed import Packed
from shufflepoint._shards.corpora.packed.stretches import table_key
from shufflepoint._shards.corpora.shards.shards import ShardsHooks

BOS, EOS = 10**6 + 1, 10**6 + 2


def documents(lengths):
    return [{"input_ids": list(range(d * 1000, d * 1000 + n))} for d, n in enumerate(lengths)]


class FlatDocuments(torch.utils.data.Dataset):
    """Documents that can be read many at once as arrays, as ``Shards`` of Parquet can."""

    def __init__(self, lengths):
        self.rows = documents(lengths)
        self.reads = 0

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, index):
        return self.rows[index]

    def _loader_hooks(self):  # as Shards offers it: ReadsIdsAscending, behind the hooks
        return types.SimpleNamespace(read_ids_ascending=self.read_ids_ascending)

    def read_ids_ascending(self, indices, column):
        assert list(indices) == sorted(indices)
        self.reads += 1
        return [np.asarray(self.rows[i][column], dtype=np.int32) for i in np.asarray(indices).tolist()]


def as_arrays(batch):
    return {key: batch[key].numpy() for key in ("input_ids", "position_ids", "labels")}


def test_the_worked_example_in_the_module_docstring():
    packed = Packed(FlatDocuments([3, 5, 2, 4]), 4, progress=False)
    packed.epoch_order(0, 0, 2)
    rows = packed.read_batch([0, 1, 2]).collate()
    window = packed._window
    assert window is not None and (window.begin, window.end) == (0, 12)
    assert window.offsets.tolist() == [0, 1, 0, 1, 2, 3, 4, 0, 1, 2, 3, 0]  # d0[1:3] is the dropped tail
    assert rows["input_ids"][1].tolist() == [1002, 1003, 1004, 3000]
    assert window.offsets[4:8].tolist() == [2, 3, 4, 0] and rows["position_ids"][1].tolist() == [0, 1, 2, 0]


@settings(max_examples=80, deadline=None)
@given(lengths=st.lists(st.integers(0, 30), min_size=1, max_size=25), seq_len=st.integers(1, 12),
       framing=st.sampled_from([(None, None), (BOS, None), (None, EOS), (BOS, EOS)]), block=st.integers(1, 9),
       window=st.integers(1, 40), runs=st.lists(st.tuples(st.integers(0, 10**6), st.integers(1, 6)), min_size=1,
                                                 max_size=6))
def test_rows_from_the_window_are_the_rows_the_documents_make(lengths, seq_len, framing, block, window, runs):
    extra = sum(f is not None for f in framing)
    if sum(lengths) + extra * len(lengths) < seq_len:
        return
    bos, eos = framing
    flat = Packed(FlatDocuments(lengths), seq_len, bos=bos, eos=eos, progress=False)
    plain = Packed(documents(lengths), seq_len, bos=bos, eos=eos, progress=False)
    for packed in (flat, plain):
        packed.epoch_order(3, 0, block)
    total = 2 * len(flat)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(packed_module, "_WINDOW_TOKENS", window)  # windows of a few rows: many edges crossed
        for start, size in runs:
            start %= total
            indices = list(range(start, min(start + size, total)))
            got = as_arrays(flat.read_batch(indices).collate())
            expected = as_arrays(plain.read_batch(indices).collate())
            epoch, row = flat._decode(indices[0])
            if row + len(indices) <= len(flat):  # a run inside one epoch is read from the window
                assert flat._window.covers(epoch, row * seq_len, (row + len(indices)) * seq_len)
            for key in expected:
                assert np.array_equal(got[key], expected[key]), key
                assert got[key].dtype == np.int64


def test_the_loader_reads_windows_and_serves_every_row_once(monkeypatch):
    monkeypatch.setattr(packed_module, "_WINDOW_TOKENS", 160)  # 10 rows: 3 batches of 3 rows a window
    lengths = [int(n) for n in np.random.default_rng(1).integers(0, 60, size=80)]
    corpus = FlatDocuments(lengths)
    packed = Packed(corpus, 16, eos=EOS, progress=False)
    served = [row for batch in shufflepoint.DataLoader(packed, 3, seed=2, shuffle_block=8)
              for row in map(tuple, batch["input_ids"].tolist())]
    expected = Packed(documents(lengths), 16, eos=EOS, progress=False)
    laid = expected.epoch_order(2, 0, 8, stretches=1).take(np.arange(len(expected)))  # the loader's: spans, 1 rank
    assert served == [tuple(expected[int(row)]["input_ids"].tolist()) for row in laid]
    batches = -(-len(packed) // 3)
    # the first batch is read alone (no reading on yet), then one read per window of 3 batches, not per batch
    assert corpus.reads == 1 + -(-(batches - 1) // 3)


def test_a_read_elsewhere_reads_only_its_rows_and_reading_on_reads_a_whole_window(monkeypatch):
    monkeypatch.setattr(packed_module, "_WINDOW_TOKENS", 160)
    packed = Packed(FlatDocuments([int(n) for n in np.random.default_rng(2).integers(1, 60, size=80)]), 16,
                    progress=False)
    packed.epoch_order(0, 0, 8)
    packed.read_batch([100, 101])
    assert (packed._window.begin, packed._window.end) == (1600, 1632)  # random access: its own two rows
    packed.read_batch([102, 103])  # reading on: a whole window of 10 rows
    assert (packed._window.begin, packed._window.end) == (1632, 1792)
    packed.read_batch([20])  # elsewhere again
    assert (packed._window.begin, packed._window.end) == (320, 336)


def test_a_changed_document_or_a_doubled_bos_is_refused_from_the_window_too():
    corpus = FlatDocuments([5, 9, 3, 7])
    packed = Packed(corpus, 4, progress=False)
    packed.epoch_order(0, 0, 4)
    corpus.rows[2]["input_ids"].append(7)
    with pytest.raises(ValueError, match="tokens: document 2 now holds 4 tokens, 3 when counted"):
        packed.read_batch(list(range(len(packed))))
    with_bos = FlatDocuments([5, 9, 3, 7])
    for row in with_bos.rows:
        row["input_ids"].insert(0, BOS)
    packed = Packed(with_bos, 4, bos=BOS, progress=False)
    packed.epoch_order(0, 0, 4)
    with pytest.raises(ValueError, match=f"bos: found documents that already start with bos={BOS} .*\n"
                                         f"  expected: documents without "
                                         "their own BOS.*\n.*\n  fix: tokenize with add_special_tokens=False"):
        packed.read_batch(list(range(len(packed))))


def test_a_corpus_whose_reader_holds_no_arrays_is_asked_once(tmp_path, monkeypatch):
    """JSON Lines shards: ``read_id_spans_ascending`` (what ``Packed`` reads a ``Shards`` window with) says
    None; the rows come document by document."""
    lengths = [5, 9, 3, 14, 2, 7]
    for shard, part in enumerate((lengths[:3], lengths[3:])):
        first = 0 if shard == 0 else 3
        rows = [{"input_ids": list(range((first + d) * 1000, (first + d) * 1000 + n))} for d, n in enumerate(part)]
        (tmp_path / f"part-{shard}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    corpus = shufflepoint.Shards(str(tmp_path / "*.jsonl"), progress=False, cache_dir=str(tmp_path / "c"))
    asked = []
    read = ShardsHooks.read_id_spans_ascending
    monkeypatch.setattr(ShardsHooks, "read_id_spans_ascending", lambda *args: asked.append(args) or read(*args))
    packed = Packed(corpus, 4, progress=False)
    served = [row for batch in shufflepoint.DataLoader(packed, 2, seed=1, shuffle_block=2)
              for row in map(tuple, batch["input_ids"].tolist())]
    docs = [row["input_ids"] for row in documents(lengths)]
    laid = table_key(0, 1) * len(packed)  # one process under spans: epoch 0 laid along 1 stretch
    assert served == [tuple(t for d, a, b in packed.segments(laid + row) for t in docs[d][a:b])
                      for row in range(len(packed))]
    assert len(asked) == 1 and packed._window is None


def test_bad_indices_get_the_per_document_errors():
    packed = Packed(FlatDocuments([5, 9, 3, 7]), 4, progress=False)
    packed.epoch_order(0, 0, 4)
    for bad in ([1.5, 2.5], [True], [-1, 0]):
        with pytest.raises(IndexError, match="Packed index: found"):
            packed.read_batch(bad)
