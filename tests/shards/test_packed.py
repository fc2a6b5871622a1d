"""``Packed``: every token of an epoch once, rows of exactly seq_len, positions restarting at each
document, the worked example pinned, and the resume contract (same world exact, another world each
row once) through ``shufflepoint.DataLoader``."""

from __future__ import annotations

import types
from collections import Counter

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import shufflepoint
from resume_contract import Component, assert_resume_contract, run_epochs, served_across_a_resize
from shufflepoint._shards.corpora.mixture.mixture import Mixture
from shufflepoint._shards.corpora.packed.packed import IGNORE_INDEX, Packed
from shufflepoint._shards.corpora.packed.stretches import table_key

BOS, EOS = 10**6 + 1, 10**6 + 2


def documents(lengths):
    """Document d holds tokens d*1000 .. d*1000+len-1: every token of the corpus is unique."""
    return [{"input_ids": list(range(d * 1000, d * 1000 + n))} for d, n in enumerate(lengths)]


class ShardedDocuments(torch.utils.data.Dataset):
    """A sharded corpus as the loader sees one (``shard_rows``, ``fingerprint``), rows of tokens."""

    def __init__(self, lengths, rows):
        self.rows, self.shard_rows, self.fingerprint = documents(lengths), np.asarray(rows), "shards:test"

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, index):
        return self.rows[index]


def rows_of(batch):
    return [tuple(row.tolist()) for row in batch["input_ids"]]


def expected_stream(packed, seed, epoch, shuffle_block):
    """The epoch's stream built the slow way: every document in the epoch's order, framed, end to end."""
    packed.epoch_order(seed, epoch, shuffle_block)
    table = packed._table(epoch)
    order = table._order.take(np.arange(packed.documents)).tolist()
    assert sorted(order) == list(range(packed.documents))  # each document once per epoch
    stream = []
    for d in order:
        ids = packed.dataset[d]["input_ids"]
        head = [packed.bos] if packed.bos is not None else []
        stream += head + ids + ([packed.eos] if packed.eos is not None else [])
    return stream


def test_the_worked_example_in_the_docstring():
    packed = Packed(documents([3, 5, 2, 4]), 4, progress=False)
    packed.epoch_order(0, 0, 2)
    assert packed._table(0)._order.take(np.arange(4)).tolist() == [2, 1, 3, 0]
    assert packed._table(0).block_token_start.tolist() == [0, 7]
    assert len(packed) == 3 and packed.tokens_per_epoch == 14
    assert [packed.segments(row) for row in range(3)] == [
        [(2, 0, 2), (1, 0, 2)], [(1, 2, 5), (3, 0, 1)], [(3, 1, 4), (0, 0, 1)]]
    row = packed[1]
    assert row["input_ids"].tolist() == [1002, 1003, 1004, 3000]
    assert row["position_ids"].tolist() == [0, 1, 2, 0]
    assert row["labels"].tolist() == [IGNORE_INDEX, 1003, 1004, IGNORE_INDEX]
    assert packed[3 + 1]["input_ids"].dtype == torch.int64  # index 4: epoch 1, row 1
    batch = Packed.varlen_collate([packed[0], packed[1]])
    assert batch["cu_seqlens"].tolist() == [0, 2, 4, 7, 8] and batch["cu_seqlens"].dtype == torch.int32
    assert batch["max_seqlen"] == 3 and batch["input_ids"].shape == (2, 4)


LENGTHS = st.lists(st.one_of(st.integers(0, 3), st.integers(0, 40), st.integers(100, 160)), min_size=1,
                   max_size=30)


@settings(max_examples=150, deadline=None)
@given(lengths=LENGTHS, seq_len=st.integers(1, 16), seed=st.integers(0, 2**64 - 1), epoch=st.integers(0, 3),
       shuffle_block=st.integers(1, 20), frame=st.sampled_from([(None, None), (BOS, None), (None, EOS), (BOS, EOS)]),
       sharded=st.booleans())
def test_rows_cut_the_epoch_stream_every_seq_len_tokens(lengths, seq_len, seed, epoch, shuffle_block, frame,
                                                         sharded):
    bos, eos = frame
    if sharded:  # shards of 1-3 documents, the last one taking the rest
        cuts = sorted({min(i * 3, len(lengths)) for i in range(len(lengths) // 3 + 1)} | {len(lengths)})
        dataset = ShardedDocuments(lengths, np.diff([0] + cuts).tolist())
    else:
        dataset = documents(lengths)
    total = sum(lengths) + len(lengths) * ((bos is not None) + (eos is not None))
    if total < seq_len:
        with pytest.raises(ValueError, match="seq_len: found"):
            Packed(dataset, seq_len, bos=bos, eos=eos, progress=False)
        return
    packed = Packed(dataset, seq_len, bos=bos, eos=eos, progress=False)
    stream = expected_stream(packed, seed, epoch, shuffle_block)
    rows = len(packed)
    assert rows == total // seq_len
    served = packed.__getitems__([epoch * rows + p for p in range(rows)])
    for p, row in enumerate(served):
        ids, positions, labels = (row[k].tolist() for k in ("input_ids", "position_ids", "labels"))
        assert ids == stream[p * seq_len:(p + 1) * seq_len]  # so every token once, the tail dropped
        assert positions[0] == 0
        starts = [0] + list(np.cumsum([stop - start for _, start, stop in packed.segments(epoch * rows + p)]))
        assert starts[-1] == seq_len
        assert positions == [i - s for s, e in zip(starts, starts[1:], strict=False) for i in range(s, e)]
        for segment_start, (document, offset, _) in zip(starts, packed.segments(epoch * rows + p), strict=False):
            assert offset == 0 or segment_start == 0  # only a row's first piece continues a document
            if offset == 0 and bos is not None:
                assert ids[segment_start] == BOS
            assert document < len(lengths)
        assert labels == [IGNORE_INDEX if q == 0 else t for q, t in zip(positions, ids, strict=True)]
    assert len(stream) - rows * seq_len < seq_len


def collate_rows(batch):
    return [tuple(row["input_ids"].tolist()) for row in batch]


LENGTHS_FIXED = [0, 7, 3, 25, 1, 0, 12, 9, 4, 30, 2, 6, 0, 11, 5, 8, 15, 3]


def packed_component(rank, world_size, batch_size=2):
    def make():
        return shufflepoint.DataLoader(Packed(documents(LENGTHS_FIXED), 5, eos=EOS, progress=False), batch_size,
                                       seed=4, rank=rank, world_size=world_size, collate_fn=collate_rows,
                                       shuffle_block=4)

    return Component(name=f"packed W={world_size}", make=make, run=run_epochs, resume_epoch=lambda s: s["epoch"])


@pytest.mark.parametrize("world_size,rank", [(1, 0), (2, 1), (3, 2)])
def test_loader_over_packed_rows_honours_the_resume_contract(world_size, rank):
    assert assert_resume_contract(packed_component(rank, world_size), epochs=3) >= 10


@pytest.mark.parametrize("first,then", [((2, 2), (3, 3)), ((3, 2), (2, 5)), ((2, 3), (1, 1))])
def test_another_world_or_batch_size_serves_every_row_of_the_epoch_once(first, then):
    """(world, batch) `first` stops in epoch 1; fresh loaders at `then` load its state and finish: every row of
    epoch 1 as the first world laid it (under spans the rows follow the epoch's first world: packed_layout)."""
    packed = Packed(documents(LENGTHS_FIXED), 5, eos=EOS, progress=False)
    order = packed.epoch_order(4, 1, 4, stretches=first[0])
    expected = Counter(collate_rows(packed.__getitems__(order.take(np.arange(len(packed))).tolist())))
    assert sum(expected.values()) == len(packed) and len(expected) == len(packed)
    seen = served_across_a_resize(lambda r, w, b: packed_component(r, w, b).make(), first, then, steps=3)
    assert seen == expected


def test_workers_serve_the_same_rows():
    def loader(workers):
        return shufflepoint.DataLoader(Packed(documents(LENGTHS_FIXED), 5, progress=False), 3, seed=9,
                                       shuffle_block=4, num_workers=workers)

    plain = [row for batch in loader(0) for row in rows_of(batch)]
    assert [row for batch in loader(2) for row in rows_of(batch)] == plain
    assert len(plain) == sum(LENGTHS_FIXED) // 5


def test_the_state_names_the_packed_order_and_refuses_another_packing():
    loader = packed_component(0, 1).make()
    state = loader.state_dict()
    assert state["order"] == "packed" and state["dataset_fingerprint"].startswith("packed:")
    other = shufflepoint.DataLoader(Packed(documents(LENGTHS_FIXED), 5, eos=EOS - 1, progress=False), 2, seed=4,
                                    collate_fn=collate_rows, shuffle_block=4)
    assert len(other) == len(loader)  # the same rows per epoch: only the fingerprint tells them apart
    with pytest.raises(shufflepoint.StateError, match="dataset_fingerprint"):
        other.load_state_dict(state)


def test_bad_input_names_the_field_or_the_document():
    with pytest.raises(ValueError, match=r"tokens: document 1: found no field 'input_ids' \(keys \['text'\]\)"):
        Packed([{"input_ids": [1, 2]}, {"text": "hello"}], 1, progress=False)
    with pytest.raises(ValueError, match="document 0: found no field 'ids'"):
        Packed(documents([3]), 1, tokens="ids", progress=False)
    with pytest.raises(TypeError, match="field 'input_ids' of document 2: found float64"):
        Packed([{"input_ids": [1]}, {"input_ids": []}, {"input_ids": [1.5, 2.0]}], 1, progress=False)
    with pytest.raises(TypeError, match="document 0: found <U"):
        Packed([{"input_ids": ["a", "b"]}], 1, progress=False)
    with pytest.raises(TypeError, match="document 0: found bool"):
        Packed([{"input_ids": [True]}], 1, progress=False)
    for seq_len in (0, -3):
        with pytest.raises(ValueError, match=f"seq_len: found {seq_len}"):
            Packed(documents([3]), seq_len, progress=False)
    with pytest.raises(TypeError, match="seq_len: found '4'"):
        Packed(documents([3]), "4", progress=False)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"seq_len: found 8\n  expected: at most 7, the corpus's tokens"):
        Packed(documents([3, 4]), 8, progress=False)
    with pytest.raises(ValueError, match="eos: found -1"):
        Packed(documents([3]), 1, eos=-1, progress=False)
    with pytest.raises(TypeError, match="found a Mixture with its own epoch order\n"):
        Packed(Mixture([(documents([3, 4]), 1)]), 2, progress=False)


def test_misuse_gets_a_clear_error():
    packed = Packed(documents([3, 5, 2, 4]), 4, progress=False)
    with pytest.raises(RuntimeError, match="Packed: found no order yet\n"):
        packed[0]
    shufflepoint.DataLoader(packed, 2, seed=1, shuffle_block=2)
    with pytest.raises(ValueError, match=r"found \(2, 2\)\n  expected: \(1, 2\), what this Packed serves"):
        shufflepoint.DataLoader(packed, 2, seed=2, shuffle_block=2)
    with pytest.raises(IndexError, match="Packed index: found -1\n  expected: an int >= 0"):
        packed[-1]
    with pytest.raises(ValueError, match="shuffle: found False"):
        shufflepoint.DataLoader(Packed(documents([3, 5]), 4, progress=False), 2, shuffle=False)
    changing = documents([3, 5, 2, 4])
    packed = Packed(changing, 4, progress=False)
    packed.epoch_order(0, 0, 2)
    changing[2]["input_ids"].append(7)
    with pytest.raises(ValueError, match="document 2 now holds 3 tokens, 2 when counted"):
        packed[0]


class ReadAhead(torch.utils.data.Dataset):
    """Documents that record what was announced to ``prefetch`` and what was read."""

    def __init__(self, lengths):
        self.rows, self.announced, self.read = documents(lengths), [], []

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, index):
        self.read.append(index)
        return self.rows[index]

    def prefetch(self, indices):
        self.announced.extend(np.asarray(indices).tolist())


def test_upcoming_documents_are_announced_before_they_are_read():
    corpus = ReadAhead(LENGTHS_FIXED)
    loader = shufflepoint.DataLoader(Packed(corpus, 5, progress=False), 2, seed=3, shuffle_block=4)
    corpus.read.clear()  # counting the tokens read every document once
    for _ in loader:
        assert set(corpus.read) <= set(corpus.announced)
    assert corpus.read and set(corpus.announced) == set(corpus.read)


def test_parquet_shards_and_a_resumable_sampler_under_a_plain_torch_loader(tmp_path):
    pa, pq = pytest.importorskip("pyarrow"), pytest.importorskip("pyarrow.parquet")
    for shard in range(3):
        rows = [list(range(shard * 10**5 + d * 1000, shard * 10**5 + d * 1000 + 3 + 2 * d)) for d in range(4)]
        pq.write_table(pa.table({"input_ids": rows}), str(tmp_path / f"part-{shard}.parquet"))
    corpus = shufflepoint.Shards(str(tmp_path / "*.parquet"), progress=False)
    ours = shufflepoint.DataLoader(Packed(corpus, 8, progress=False), 2, seed=1, shuffle_block=4)
    served = [row for batch in ours for row in rows_of(batch)]
    assert len(served) == len(ours.dataset) == (3 * (3 + 5 + 7 + 9)) // 8
    assert len({t for row in served for t in row}) == len(served) * 8  # no token twice
    sampler = shufflepoint.ResumableSampler(Packed(corpus, 8, progress=False), num_replicas=1, rank=0, seed=1,
                                            shuffle_block=4)
    plain = torch.utils.data.DataLoader(sampler.dataset, batch_size=2, sampler=sampler)
    assert [row for batch in plain for row in rows_of(batch)] == served


def test_a_sharded_corpus_keeps_the_shards_of_a_block_open():
    """As the loader does for the blocks order: measured 6x more rows/s on Parquet (benchmarks/packing.py)."""
    corpus = ShardedDocuments([3, 5, 2, 4, 7, 1], [2, 2, 2])
    sizes = []
    corpus._loader_hooks = lambda: types.SimpleNamespace(keep_open_for=sizes.append)  # KeepsShardsOpen, as Shards
    shufflepoint.DataLoader(Packed(corpus, 4, progress=False), 2, seed=1, shuffle_block=3)
    assert sizes == [3]


@settings(max_examples=25, deadline=None)
@given(lengths=st.lists(st.integers(0, 40), min_size=1, max_size=30), kind=st.sampled_from(["int16", "int32", "int64"]),
       group=st.integers(1, 7), seq_len=st.integers(1, 24))
def test_parquet_token_lists_read_as_arrays_give_the_rows_the_documents_make(tmp_path_factory, lengths, kind, group,
                                                                             seq_len):
    """Packed reads a Parquet list column as numpy views of the decoded group (``ShardsHooks.read_ids``):
    every row is still the documents' tokens its segments name, over shards of several row groups."""
    pa, pq = pytest.importorskip("pyarrow"), pytest.importorskip("pyarrow.parquet")
    if sum(lengths) < seq_len:
        return
    root = tmp_path_factory.mktemp("ids")
    docs = [list(range(1000 * d, 1000 * d + n)) for d, n in enumerate(lengths)]
    for shard, part in enumerate((docs[: len(docs) // 2], docs[len(docs) // 2:])):
        if part:
            column = pa.array(part, type=pa.list_(getattr(pa, kind)()))
            pq.write_table(pa.table({"input_ids": column}), str(root / f"{shard}.parquet"), row_group_size=group)
    corpus = shufflepoint.Shards(str(root / "*.parquet"), progress=False, cache_dir=str(root / "c"))
    packed = Packed(corpus, seq_len, progress=False)
    loader = shufflepoint.DataLoader(packed, 3, seed=2, shuffle_block=4)
    batches = list(loader)
    assert {batch[key].dtype for batch in batches for key in ("input_ids", "position_ids", "labels")} == {torch.int64}
    served = [row for batch in batches for row in rows_of(batch)]
    laid = table_key(0, 1) * len(packed)  # one process under spans: epoch 0 laid along 1 stretch
    expected = [tuple(t for d, a, b in packed.segments(laid + i) for t in docs[d][a:b]) for i in range(len(packed))]
    assert sorted(served) == sorted(expected) and len(served) == len(packed)
    hooks = corpus._loader_hooks()  # what Packed reads a Shards with (ReadsIds, ReadsIdsAscending, ...)
    arrays = hooks.read_ids(list(range(len(docs)))[::-1], "input_ids")
    assert arrays is not None and [a.tolist() for a in arrays] == docs[::-1]
    assert all(not a.flags.writeable for a in arrays)  # views of the decoded group: read-only
    picked = sorted(set(range(0, len(docs), 2)) | {len(docs) - 1})  # rows of several groups, some skipped
    ascending = hooks.read_ids_ascending(picked, "input_ids")
    assert ascending is not None and [a.tolist() for a in ascending] == [docs[d] for d in picked]
    spans = hooks.read_id_spans_ascending(picked, "input_ids")  # what Packed's token windows read
    assert spans is not None
    held, source, starts, stops = spans
    assert [held[i][a:b].tolist() for i, a, b in zip(source, starts, stops, strict=True)] == [docs[d] for d in picked]
    assert all(not a.flags.writeable for a in held)
    if len(picked) > 1:
        for read in (hooks.read_ids_ascending, hooks.read_id_spans_ascending):
            with pytest.raises(ValueError, match="found indices out of order\n  expected: ascending indices"):
                read(picked[::-1], "input_ids")


@settings(max_examples=60, deadline=None)
@given(lengths=LENGTHS, seq_len=st.integers(1, 16), picks=st.lists(st.integers(0, 10**6), min_size=1, max_size=12),
       consecutive=st.booleans())
def test_rows_read_together_are_the_rows_read_one_by_one(lengths, seq_len, picks, consecutive):
    """A batch's rows are found by one walk per run of consecutive rows (``rows_segments``), across
    epoch edges too: the same pieces as one walk per row."""
    if sum(lengths) < seq_len:
        return
    packed = Packed(documents(lengths), seq_len, progress=False)
    packed.epoch_order(5, 0, 3)
    total = 3 * len(packed)
    indices = [picks[0] % total + k for k in range(len(picks))] if consecutive else [p % total for p in picks]
    indices = [i for i in indices if i < total]
    assert packed.rows_segments(indices) == [packed.segments(i) for i in indices]


@pytest.mark.parametrize("changed, named", [
    (dict(seq_len=6), r"packing parameter seq_len: saved 5, now 6; build the Packed with seq_len=5 to resume"),
    (dict(eos=EOS - 1), rf"packing parameter eos: saved {EOS}, now {EOS - 1}; build the Packed with eos={EOS}"),
    (dict(bos=BOS), rf"packing parameter bos: saved None, now {BOS}; build the Packed with bos=None"),
    (dict(seq_len=4, bos=BOS), r"packing parameter seq_len: saved 5, now 4, bos: saved None, now \d+; build the "
                               r"Packed with seq_len=5, bos=None to resume this run"),
])
def test_a_resume_with_another_packing_names_the_parameter_and_both_values(changed, named):
    def loader(seq_len=5, bos=None, eos=EOS):
        packed = Packed(documents(LENGTHS_FIXED), seq_len, bos=bos, eos=eos, progress=False)
        return shufflepoint.DataLoader(packed, 2, seed=4, collate_fn=collate_rows, shuffle_block=4)

    saved = loader()
    next(iter(saved))
    state = saved.state_dict()
    with pytest.raises(shufflepoint.StateError, match=named) as refused:
        loader(**changed).load_state_dict(state)
    assert "resume with the same dataset" not in str(refused.value)


def test_a_mixture_of_packed_sources_resumed_with_another_seq_len_names_it():
    """The mixture's fingerprint hashes its sources' (and ``n`` is checked first): the rows an epoch the saved
    run had name the seq_len that makes them (issue 44, a user trial)."""
    def loader(seq_len):
        sources = [Packed(documents(LENGTHS_FIXED), seq_len, eos=EOS, progress=False),
                   Packed(documents(LENGTHS_FIXED[:9]), seq_len, eos=EOS, progress=False)]
        return shufflepoint.DataLoader(Mixture([(sources[0], 0.5), (sources[1], 0.5)]), 2, seed=4,
                                       collate_fn=collate_rows)

    saved = loader(5)
    next(iter(saved))
    state = saved.state_dict()
    with pytest.raises(shufflepoint.StateError, match=r"packing parameter seq_len: saved 5, now 6 \(the mixture's "
                       r"Packed sources make \d+ rows an epoch at the saved seq_len, \d+ now\); build the Packed "
                       r"sources with seq_len=5 to resume this run"):
        loader(6).load_state_dict(state)
    loader(5).load_state_dict(state)  # the same packing resumes


def test_a_state_of_shufflepoint_0_3_without_the_packing_in_clear_is_named_and_resumes_with_strict_false():
    def loader(seq_len=5):
        packed = Packed(documents(LENGTHS_FIXED), seq_len, eos=EOS, progress=False)
        return shufflepoint.DataLoader(packed, 2, seed=4, collate_fn=collate_rows, shuffle_block=4)

    first = loader()
    batches = iter(first)
    next(batches)
    state = first.state_dict()
    clear = "-seq_len=5,bos=None,eos=" + str(EOS)
    assert state["dataset_fingerprint"].endswith(clear) and state["shuffle_block"] == 4
    old = {k: v for k, v in state.items()
           if k not in ("shuffle_block", "grid", "phases", "ramp", "buckets")}  # as 0.3 wrote it:
    old.update(version=3, dataset_fingerprint=state["dataset_fingerprint"].replace(clear, "") + ":blocks=4")
    with pytest.raises(shufflepoint.StateError, match="saved by shufflepoint 0.3.*load with strict=False"):
        loader().load_state_dict(old)
    resumed = loader()
    with pytest.warns(shufflepoint.ResumeWarning):
        resumed.load_state_dict(old, strict=False)
    assert next(iter(resumed)) == next(batches)
    with pytest.raises(shufflepoint.StateError, match="the packing changed: now seq_len=6.*holds a digest"):
        loader(6).load_state_dict(old)


def test_a_doubled_bos_or_eos_is_refused_with_the_fix():
    tokenizer_adds = [{"input_ids": [BOS, *range(d * 1000, d * 1000 + n), EOS]} for d, n in enumerate([4, 6, 3, 5])]
    for framing, named in ((dict(bos=BOS), rf"bos: found documents that already start with bos={BOS}"),
                           (dict(eos=EOS), rf"eos: found documents that already end with eos={EOS}")):
        packed = Packed(tokenizer_adds, 4, progress=False, **framing)
        packed.epoch_order(0, 0, 2)
        with pytest.raises(ValueError, match=named) as refused:
            packed[0]
        assert "add_special_tokens=False" in str(refused.value) and "documents [" in str(refused.value)
        with pytest.raises(ValueError, match=named):  # refused again, not only once
            packed[1]
    # one document that happens to start with bos among others that do not: not a tokenizer's doing
    mixed = [{"input_ids": [BOS, 1, 2]}] + documents([4, 6, 3, 5])[1:]
    packed = Packed(mixed, 4, bos=BOS, progress=False)
    packed.epoch_order(0, 0, 8)
    rows = packed.__getitems__(list(range(len(packed))))  # all documents read at once, the first check
    assert [int(row["input_ids"][0]) for row in rows].count(BOS) >= 1


def test_a_rows_pieces_keep_their_0_4_names():
    """``segments`` now means only the state's [world_size, taken] pairs; Packed's (document, start, stop)
    pieces are ``pieces``/``rows_pieces``, and the 0.4 names still answer the same."""
    packed = Packed(documents([3, 5, 2, 4]), 4, progress=False)
    packed.epoch_order(0, 0, 2)
    assert Packed.segments is Packed.pieces and Packed.rows_segments is Packed.rows_pieces
    assert packed.rows_pieces([0, 1, 2]) == [packed.pieces(row) for row in range(3)] == packed.rows_segments([0, 1, 2])
