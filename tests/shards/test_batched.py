"""Batched reads (``__getitems__``) and the columnar collate equal the per-row path, for every format.

The per-row path (``[corpus[i] for i in indices]`` and ``default_collate`` of it) is the reference;
``same`` compares types, dtypes, shapes and values, recursively, so an int64 that became an int32 or
a list that became a tuple fails.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import tarfile

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.utils.data import default_collate

import shufflepoint
from shufflepoint._shards.corpora.shards.batch import Columns, Rows, Stacked

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def same(found, expected, where="sample"):
    assert type(found) is type(expected), f"{where}: {type(found).__name__} != {type(expected).__name__}"
    if isinstance(expected, torch.Tensor):
        assert found.dtype == expected.dtype and found.shape == expected.shape, where
        assert torch.equal(found, expected), where
        assert found.is_contiguous() == expected.is_contiguous(), where
    elif isinstance(expected, dict):
        assert list(found) == list(expected), f"{where}: keys {list(found)} != {list(expected)}"
        for key in expected:
            same(found[key], expected[key], f"{where}[{key!r}]")
    elif isinstance(expected, (list, tuple)):
        assert len(found) == len(expected), where
        for k, (a, b) in enumerate(zip(found, expected, strict=True)):
            same(a, b, f"{where}[{k}]")
    else:
        assert found == expected, f"{where}: {found!r} != {expected!r}"


def _rows(shard, count):
    """Parquet/Arrow rows of many column types; nulls in two of them."""
    rows = []
    for r in range(count):
        i = shard * 1000 + r
        rows.append({"id": i, "small": np.int32(i % 7).item(), "u8": i % 200, "f32": i / 4, "f64": i / 3,
                     "flag": i % 3 == 0, "text": f"row {i}", "blob": bytes([i % 256]) * (i % 4),
                     "maybe": None if i % 5 == 0 else i, "vec": [i, i + 1], "label": None if i % 2 else "x"})
    return rows


def _table(shard, count):
    schema = pa.schema([("id", pa.int64()), ("small", pa.int32()), ("u8", pa.uint8()), ("f32", pa.float32()),
                        ("f64", pa.float64()), ("flag", pa.bool_()), ("text", pa.string()), ("blob", pa.binary()),
                        ("maybe", pa.int64()), ("vec", pa.list_(pa.int64())), ("label", pa.string())])
    return pa.Table.from_pylist(_rows(shard, count), schema=schema)


SIZES = [7, 1, 12, 5]


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    root = tmp_path_factory.mktemp("batched")
    cache = str(root / "cache")
    made = {}
    (root / "pq").mkdir()
    for shard, count in enumerate(SIZES):
        pq.write_table(_table(shard, count), root / "pq" / f"{shard}.parquet", row_group_size=3)
    made["parquet"] = shufflepoint.Shards(str(root / "pq" / "*.parquet"), cache_dir=cache, progress=False)
    made["parquet-columns"] = shufflepoint.Shards(str(root / "pq" / "*.parquet"), columns=["text", "id", "f32"],
                                                  cache_dir=cache, progress=False)
    (root / "arrow").mkdir()
    for shard, count in enumerate(SIZES):
        table = _table(shard, count)
        with pa.ipc.new_stream(str(root / "arrow" / f"{shard}.arrow"), table.schema) as writer:
            for batch in table.to_batches(max_chunksize=4):
                writer.write_batch(batch)
    made["arrow"] = shufflepoint.Shards(str(root / "arrow" / "*.arrow"), cache_dir=cache, progress=False)
    (root / "jsonl").mkdir()
    for shard, count in enumerate(SIZES):
        lines = "".join(json.dumps({"id": shard * 1000 + r, "x": [r, 0.5], "s": "é"}) + "\n\n" for r in range(count))
        (root / "jsonl" / f"{shard}.jsonl").write_text(lines, encoding="utf-8")
    made["jsonl"] = shufflepoint.Shards(str(root / "jsonl" / "*.jsonl"), cache_dir=cache, progress=False)
    (root / "tar").mkdir()
    for shard, count in enumerate(SIZES):
        with tarfile.open(root / "tar" / f"{shard}.tar", "w") as tar:
            for r in range(count):
                for field, data in (("txt", f"t{shard}-{r}".encode()), ("cls", bytes([r]))):
                    info = tarfile.TarInfo(f"s{shard}/{r:04d}.{field}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
    made["webdataset"] = shufflepoint.Shards(str(root / "tar" / "*.tar"), cache_dir=cache, progress=False)
    (root / "tok").mkdir()
    for shard, count in enumerate(SIZES):
        np.arange(shard * 5000, shard * 5000 + count * 4 + 1, dtype=np.uint16).tofile(root / "tok" / f"{shard}.bin")
    made["tokens"] = shufflepoint.Shards(str(root / "tok" / "*.bin"), seq_len=4, cache_dir=cache, progress=False)
    made["tokens-3"] = shufflepoint.Shards(str(root / "tok" / "*.bin"), seq_len=3, cache_dir=cache, progress=False)
    return made


FORMATS = ["parquet", "parquet-columns", "arrow", "jsonl", "webdataset", "tokens", "tokens-3"]
indices_of = st.lists(st.integers(0, sum(SIZES) - 1), max_size=40)


def _collated(collate, samples):
    try:
        return collate(samples)
    except Exception as e:  # noqa: BLE001 - both paths must fail alike (an empty batch, a None)
        return type(e)


@pytest.mark.parametrize("name", FORMATS)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_batch_read_at_once_is_the_per_row_batch(corpora, name, data):
    corpus = corpora[name]
    indices = data.draw(st.lists(st.integers(0, len(corpus) - 1), max_size=40))
    expected = [corpus[i] for i in indices]
    found = corpus.__getitems__(indices)
    assert type(found) is list
    same(found, expected)
    batch = corpus.columnar().__getitems__(indices)
    same(list(batch), expected)
    kind = {"parquet": Columns, "parquet-columns": Columns, "arrow": Columns, "tokens": Stacked, "tokens-3": Stacked}
    assert not indices or isinstance(batch, kind.get(name, Rows))  # the columnar path is the one taken
    same(_collated(shufflepoint.collate, batch), _collated(default_collate, expected), "collated")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(indices=st.lists(st.integers(0, 2 * sum(SIZES) + 2), max_size=40))
def test_a_mixture_batch_is_the_per_row_batch(corpora, indices):
    plain = [{"id": k} for k in range(3)]
    mixture = shufflepoint.Mixture([(corpora["parquet-columns"], 2), (plain, 1), (corpora["arrow"], 1)])
    indices = [i % mixture.rows for i in indices]
    expected = [mixture[i] for i in indices]
    same(mixture.__getitems__(indices), expected)
    same(_collated(shufflepoint.collate, mixture.columnar().__getitems__(indices)),
         _collated(default_collate, expected), "collated")
    tokens = shufflepoint.Mixture([(corpora["tokens"], 1), (corpora["tokens-3"], 1)])
    both = [i % tokens.rows for i in indices]
    same(tokens.__getitems__(both), [tokens[i] for i in both])


def test_bad_indices_fail_as_the_per_row_read_does(corpora):
    corpus = corpora["parquet"]
    with pytest.raises(IndexError, match="out of range"):
        corpus.__getitems__([0, len(corpus)])
    with pytest.raises(IndexError, match="out of range"):
        corpus.__getitems__([-1])
    with pytest.raises(TypeError, match=r"found \w+ of shape \(.*\)\n  expected: a list of ints"):
        corpus.__getitems__([0.5])
    assert corpus.__getitems__([]) == []


def test_the_corpus_transform_sees_one_sample_at_a_time(corpora, tmp_path):
    seen = []

    def transform(sample):
        seen.append(sample)
        return {"id2": sample["id"] * 2}

    corpus = shufflepoint.Shards(os.path.join(os.path.dirname(corpora["parquet"].index.url(0)), "*.parquet"),
                                 columns=["id"], transform=transform, cache_dir=str(tmp_path), progress=False)
    indices = [5, 0, 5, 20]
    got = corpus.__getitems__(indices)
    assert seen == [{"id": corpus.shard_of(i)[0] * 1000 + corpus.shard_of(i)[1]} for i in indices]
    assert got == [{"id2": 2 * s["id"]} for s in seen]
    assert shufflepoint.collate(corpus.columnar().__getitems__(indices))["id2"].tolist() == [s["id2"] for s in got]


class PerRow(torch.utils.data.Dataset):
    """The corpus without ``__getitems__``: torch fetches it one ``[i]`` at a time."""

    def __init__(self, corpus):
        self.corpus, self.shard_rows = corpus, corpus.shard_rows

    def __len__(self):
        return len(self.corpus)

    def __getitem__(self, index):
        return self.corpus[index]


@pytest.mark.parametrize("seed_per_sample", [False, True])
def test_loader_augmentation_is_unchanged_by_batched_reads(corpora, seed_per_sample):
    corpus = corpora["parquet-columns"]

    def augment(sample, rng):
        drawn = {"id": sample["id"], "noise": float(rng.random())}
        if seed_per_sample:  # torch's global RNG is keyed only then
            drawn["torch"] = float(torch.rand(()))
        return drawn

    def batches(dataset):
        loader = shufflepoint.DataLoader(dataset, batch_size=4, seed=3, shuffle_block=6, transform=augment,
                                         seed_per_sample=seed_per_sample)
        return [batch for _ in range(2) for batch in loader]

    batched, per_row = batches(corpus), batches(PerRow(corpus))
    assert len(batched) == len(per_row) > 4
    same(batched, per_row)
    if seed_per_sample:
        assert len({round(x, 9) for b in batched for x in b["torch"].tolist()}) > 20


def test_a_sample_changed_by_its_user_does_not_change_the_next_read(corpora):
    corpus = corpora["parquet"]
    first, batch = corpus[3], corpus.__getitems__([3, 4])
    for sample in (first, *batch):
        sample["vec"].append(-1)
        sample["text"] += "!"
        sample["id"] = -1
    assert corpus[3] == corpus.__getitems__([3])[0] == _rows(0, 4)[3]


@pytest.mark.parametrize("name", ["parquet-columns", "tokens"])
def test_a_columnar_loader_gives_the_default_loaders_batches_and_state(corpora, name):
    corpus = corpora[name]

    def run(dataset, workers, **kwargs):
        loader = shufflepoint.DataLoader(dataset, batch_size=5, seed=7, shuffle_block=8, num_workers=workers, **kwargs)
        return [batch for batch in loader], loader.state_dict()

    expected, state = run(corpus, 0, collate_fn=default_collate)  # the row path: a list of samples
    for workers in (0, 2):  # 2: the view and its corpus pickled into worker processes
        found, found_state = run(corpus.columnar(), workers, collate_fn=shufflepoint.collate)
        same(found, expected, f"workers={workers}")
        assert found_state == state
        by_default, default_state = run(corpus, workers)  # what shufflepoint.DataLoader does unasked
        same(by_default, expected, f"default, workers={workers}")
        assert default_state == state
    view = pickle.loads(pickle.dumps(corpus.columnar()))  # what a spawned worker gets, after reads here
    same(shufflepoint.collate(view.__getitems__([3, 1, 3])), default_collate([corpus[i] for i in (3, 1, 3)]))


def test_read_ids_gives_arrays_only_where_the_column_is_a_list_of_integers(corpora):
    """``ShardsHooks.read_ids``: a Parquet list of integers without nulls as arrays, else None (the caller
    reads samples and gets their errors)."""
    corpus = corpora["parquet"]
    arrays = corpus._loader_hooks().read_ids([5, 0, 13], "vec")
    assert arrays is not None and [a.tolist() for a in arrays] == [corpus[i]["vec"] for i in (5, 0, 13)]
    assert corpus._loader_hooks().read_ids([1, 2], "text") is None  # str, not a list of integers
    assert corpus._loader_hooks().read_ids([1, 2], "absent") is None
    assert corpora["jsonl"]._loader_hooks().read_ids([0], "id") is None  # a reader without take_ids


@settings(max_examples=300, deadline=None)
@given(dtype=st.sampled_from(["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]),
       length=st.integers(1, 2**40), data=st.data())
def test_index_bounds_are_checked_in_every_integer_dtype(dtype, length, data):
    from shufflepoint._shards.corpora.shards.batch import checked_indices
    from shufflepoint._shards.readers._common import check_rows

    info = np.iinfo(dtype)
    values = data.draw(st.lists(st.integers(int(info.min), int(info.max)), min_size=1, max_size=8))
    found = np.array(values, dtype=dtype)
    inside = all(0 <= v < length for v in values)
    for check in (lambda: check_rows(found, length), lambda: checked_indices("Shards", found, length)):
        if inside:
            assert check().tolist() == values and check().dtype == np.int64
        else:
            with pytest.raises(IndexError, match=str(next(v for v in values if not 0 <= v < length))):
                check()
