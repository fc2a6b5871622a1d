"""What a debugger shows of ``Shards``, ``Packed`` and ``Mixture``: the facts a user needs (format, counts,
fingerprint, packing, weights, the sources), read from memory: no I/O, nothing that grows with the rows."""

from __future__ import annotations

import os

import shufflepoint
from corpus_files import jsonl_corpus


def test_shards_shows_its_format_shards_rows_fingerprint_and_root_without_reading_a_shard(tmp_path):
    folder = str(tmp_path / "web")
    ids = jsonl_corpus(folder, 12, rows=(90, 100))
    corpus = shufflepoint.Shards(os.path.join(folder, "part-*"), cache_dir=str(tmp_path / "cache"), progress=False)
    for name in os.listdir(folder):  # a repr that read a shard would fail now
        os.remove(os.path.join(folder, name))
    shown = repr(corpus)
    assert shown.startswith("Shards(jsonl, 12 shards, ") and f"{len(ids):,} rows" in shown and len(ids) >= 1_000
    assert f"fingerprint='{corpus.fingerprint[:15]}…'" in shown and corpus.fingerprint.startswith("shards:")
    assert f"root={corpus.index.root!r}" in shown


def test_packed_shows_its_packing_its_counts_and_its_dataset_not_its_samples():
    documents = [{"input_ids": list(range(d % 7 + 1))} for d in range(10_000)]
    packed = shufflepoint.Packed(documents, 16, eos=2, progress=False)
    shown = repr(packed)
    assert shown.startswith("Packed(seq_len=16, documents=10,000, ")
    assert f"tokens={packed.tokens_per_epoch:,}, rows={len(packed):,}, field='input_ids', bos=None, eos=2" in shown
    assert shown.endswith("dataset=list of 10,000 rows)") and len(shown) < 200  # not the documents themselves
    packed.epoch_order(seed=7, epoch=0, shuffle_block=64)
    assert ", seed=7, shuffle_block=64, dataset=" in repr(packed)


def test_mixture_shows_its_sources_weights_counts_and_schedule():
    mixture = shufflepoint.Mixture([(list(range(10)), 3), (list(range(100, 104)), 1)], samples_per_epoch=8)
    assert repr(mixture) == ("Mixture(2 sources, weights=[3.0, 1.0], counts=[6, 2], samples_per_epoch=8, rows=14, "
                             "schedule=None, sources=[list of 10 rows, list of 4 rows])")
    annealed = shufflepoint.Mixture([list(range(10)), list(range(100, 104))], samples_per_epoch=8,
                                    schedule=[(0, [3, 1]), (6, [0, 1])])
    assert "weights=[0.75, 0.25], counts=[5, 3]" in repr(annealed) and "schedule=2 phases" in repr(annealed)
    nested = shufflepoint.Mixture([(shufflepoint.Packed([{"input_ids": [1, 2, 3]}] * 4, 2, progress=False), 1)])
    assert "sources=[Packed(seq_len=2, documents=4, " in repr(nested)
