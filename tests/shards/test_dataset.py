"""``shufflepoint.Shards`` on local files: a map-style dataset, indexed once, refusing a changed corpus."""

from __future__ import annotations

import json
import os
import pickle

import numpy as np
import pytest

import shufflepoint
from corpus_files import jsonl_corpus, parquet_corpus
from resume_contract import Component, assert_resume_contract
from shufflepoint._order.blocks import StretchBlockOrder


@pytest.fixture()
def web(tmp_path):
    folder = str(tmp_path / "web")
    ids = jsonl_corpus(folder, 40, gz_every=4)
    return folder, ids, str(tmp_path / "cache")


def test_rows_in_shard_order_by_glob_list_and_manifest(web, tmp_path):
    folder, ids, cache = web
    corpus = shufflepoint.Shards(os.path.join(folder, "part-*"), cache_dir=cache, progress=False)
    assert len(corpus) == len(ids)
    assert [corpus[i]["id"] for i in range(len(corpus))] == ids
    assert corpus.shard_rows.sum() == len(ids) and len(corpus.shard_rows) == 40
    names = sorted(os.listdir(folder))
    listed = shufflepoint.Shards([os.path.join(folder, n) for n in names if not n.startswith(".")],
                                 cache_dir=cache, progress=False)
    manifest = tmp_path / "web.txt"
    manifest.write_text("# the corpus\n" + "".join(f"web/{n}\n" for n in names if not n.startswith(".")))
    from_manifest = shufflepoint.Shards(str(manifest), cache_dir=cache, progress=False)
    assert listed.fingerprint == from_manifest.fingerprint == corpus.fingerprint
    assert corpus.fingerprint.startswith("shards:")
    assert any(n.startswith(".shufflepoint-index-") for n in os.listdir(folder))  # the sidecar beside the data
    with pytest.raises(IndexError):
        corpus[len(ids)]
    with pytest.raises(TypeError):
        corpus["0"]


def test_other_formats_through_the_same_door(tmp_path):
    ids = parquet_corpus(str(tmp_path / "pq"), 7)
    pq = shufflepoint.Shards(str(tmp_path / "pq" / "*.parquet"), columns=["id"], progress=False,
                             cache_dir=str(tmp_path / "c"))
    assert [row["id"] for row in (pq[i] for i in range(len(pq)))] == ids
    tokens = tmp_path / "tok"
    tokens.mkdir()
    for shard in range(3):
        np.save(tokens / f"{shard}.npy", np.arange(shard * 1000, shard * 1000 + 101, dtype=np.uint16))
    windows = shufflepoint.Shards(str(tokens / "*.npy"), seq_len=10, progress=False, cache_dir=str(tmp_path / "c"))
    assert len(windows) == 30 and windows[10].tolist() == list(range(1000, 1011))
    import datasets

    saved = str(tmp_path / "hf")
    datasets.Dataset.from_dict({"id": list(range(50))}).save_to_disk(saved, num_shards=3)
    hf = shufflepoint.Shards(saved, progress=False, cache_dir=str(tmp_path / "c"))
    assert [hf[i]["id"] for i in range(50)] == list(range(50)) and len(hf.shard_rows) == 3


def test_bad_sources_and_options_name_the_field(tmp_path, web):
    folder, _, cache = web
    with pytest.raises(ValueError, match="sources"):
        shufflepoint.Shards(str(tmp_path / "nothing-*.jsonl"), cache_dir=cache, progress=False)
    with pytest.raises(ValueError, match="seq_len"):
        shufflepoint.Shards(os.path.join(folder, "part-*"), seq_len=4, cache_dir=cache, progress=False)
    with pytest.raises(ValueError, match="format"):
        shufflepoint.Shards(os.path.join(folder, "part-*"), format="csv", cache_dir=cache, progress=False)


def loader(folder, cache, **kwargs):
    corpus = shufflepoint.Shards(os.path.join(folder, "part-*"), cache_dir=cache, progress=False)
    return shufflepoint.DataLoader(corpus, 4, seed=3, shuffle_block=16, **kwargs)


def test_the_loader_reads_a_corpus_in_the_blocks_order_and_resumes(web):
    folder, ids, cache = web
    first = loader(folder, cache)
    served = [i for batch in first for i in batch["id"].tolist()]
    corpus = first.dataset
    assert first.deal == "spans"  # a corpus's default: one stretch per rank, laid along by the order
    order = StretchBlockOrder(corpus.shard_rows, 3, 0, 16, stretches=1).take(np.arange(len(corpus)))
    assert served == [ids[i] for i in order]

    def run(ld, first_epoch, epochs):
        for epoch in range(first_epoch, epochs):
            ld.set_epoch(epoch)
            for batch in ld:
                yield "item", epoch, batch["id"].tolist()
            yield "epoch_end", epoch, None

    component = Component("Shards", lambda: loader(folder, cache, world_size=2, rank=1), run, lambda s: s["epoch"])
    assert assert_resume_contract(component, epochs=2, every=3) >= 4


def test_workers_read_the_same_batches(web):
    folder, _, cache = web
    alone = [b["id"].tolist() for b in loader(folder, cache)]
    with_workers = [b["id"].tolist() for b in loader(folder, cache, num_workers=2)]
    assert alone == with_workers
    assert pickle.loads(pickle.dumps(loader(folder, cache).dataset))[5] == loader(folder, cache).dataset[5]


def test_a_changed_corpus_is_refused_naming_the_shard(web):
    folder, _, cache = web
    state = loader(folder, cache).state_dict()
    with open(os.path.join(folder, "part-00002.jsonl"), "a") as f:
        f.write(json.dumps({"id": -1}) + "\n")
    changed = loader(folder, cache)
    with pytest.raises(shufflepoint.StateError, match=r"part-00002\.jsonl changed"):
        changed.load_state_dict(state)


def test_a_shard_that_changed_or_vanished_under_a_job_is_an_error_naming_it(web):
    folder, _, cache = web
    corpus = shufflepoint.Shards(os.path.join(folder, "part-*"), cache_dir=cache, progress=False)
    shard = corpus.index.url(5)
    start = int(corpus.shard_rows[:5].sum())
    with open(shard, "a") as f:
        f.write(json.dumps({"id": -1}) + "\n")
    with pytest.raises(shufflepoint.ShardError,
                       match=r"part-00005\.jsonl: rewritten since it was indexed: the object is \d+ bytes now, \d+ in "
                             r"the index"):
        corpus[start]
    gone = corpus.index.url(6)
    os.unlink(gone)
    with pytest.raises(shufflepoint.ShardError, match=r"part-00006\.jsonl.*vanished"):
        corpus[int(corpus.shard_rows[:6].sum())]
