"""Decoded token ids kept in the node's cache folder (``_shards/storage/kept_ids``, issue 35.1): a later open maps
them instead of decoding the Parquet again, and serves the same ids; a damaged entry, a rewritten file or
a store turned off falls back to decoding, never to wrong ids."""

from __future__ import annotations

import os

import numpy as np
import pytest

import shufflepoint
from shufflepoint._shards.readers import parquet as parquet_module
from shufflepoint._shards.readers.parquet import OpenParquet
from shufflepoint._shards.storage import kept_ids

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def write(path, documents, row_group_size=None):
    column = pa.array([np.asarray(d, dtype=np.int32) for d in documents], type=pa.list_(pa.int32()))
    pq.write_table(pa.table({"input_ids": column}), path, row_group_size=row_group_size)


def spans(opened, rows):
    return [values[a:b].tolist() for values, starts, stops in opened.take_id_spans_ascending(np.asarray(rows),
                                                                                            "input_ids")
            for a, b in zip(starts.tolist(), stops.tolist(), strict=True)]


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.delenv(kept_ids.ENV, raising=False)
    return kept_ids.KeptIds(str(tmp_path / "ids"))


def opened_with(path, store):
    opened = OpenParquet(str(path), str(path), None)
    opened.keep_ids_in(store)
    return opened


def read_and_close(path, store, rows):
    """Open, read ``rows`` (their units are decoded and kept), close."""
    opened = opened_with(path, store)
    found = spans(opened, rows)
    opened.close()
    return found


def entries(folder):
    return [os.path.join(folder, name) for name in os.listdir(folder) if name.endswith(".shard")]


def test_a_later_open_maps_the_kept_ids_and_decodes_nothing(tmp_path, store, monkeypatch):
    documents = [list(range(d, d + n)) for d, n in enumerate([3, 0, 5, 70000 % 9, 4])]
    write(tmp_path / "a.parquet", documents, row_group_size=2)
    assert read_and_close(tmp_path / "a.parquet", store, range(5)) == documents
    assert len(entries(tmp_path / "ids")) == 1  # one per decode unit (small row groups are decoded as one)

    def no_decode(self, unit):
        raise AssertionError("decoded again")

    monkeypatch.setattr(OpenParquet, "_decode", no_decode)
    again = opened_with(tmp_path / "a.parquet", store)
    assert spans(again, [0, 2, 3, 4]) == [documents[i] for i in (0, 2, 3, 4)]
    values = again.take_id_spans_ascending(np.asarray([0]), "input_ids")[0][0]
    assert values.dtype == np.uint16 and not values.flags.writeable  # narrowed, read-only


@pytest.mark.parametrize("documents", [[[70000, 1], [2**31 - 1]], [[-5, 3], [7]]])
def test_values_that_do_not_fit_uint16_are_kept_as_decoded(tmp_path, store, documents):
    write(tmp_path / "b.parquet", documents)
    read_and_close(tmp_path / "b.parquet", store, [0, 1])
    assert len(entries(tmp_path / "ids")) == 1
    again = opened_with(tmp_path / "b.parquet", store)
    assert spans(again, [0, 1]) == documents
    assert again.take_id_spans_ascending(np.asarray([0]), "input_ids")[0][0].dtype == np.int32


def test_a_damaged_entry_is_decoded_again(tmp_path, store):
    documents = [[1, 2, 3], [4, 5]]
    write(tmp_path / "c.parquet", documents)
    read_and_close(tmp_path / "c.parquet", store, [0, 1])
    [entry] = entries(tmp_path / "ids")
    with open(entry, "r+b") as handle:
        handle.truncate(os.path.getsize(entry) - 2)
    assert spans(opened_with(tmp_path / "c.parquet", store), [0, 1]) == documents


def test_a_rewritten_file_is_not_read_from_the_old_entry(tmp_path, store):
    write(tmp_path / "d.parquet", [[1, 2, 3], [4, 5]])
    read_and_close(tmp_path / "d.parquet", store, [0, 1])
    write(tmp_path / "d.parquet", [[9, 9, 9], [8, 8]])
    assert spans(opened_with(tmp_path / "d.parquet", store), [0, 1]) == [[9, 9, 9], [8, 8]]


def test_zero_bytes_keeps_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv(kept_ids.ENV, "0")
    store = kept_ids.KeptIds(str(tmp_path / "ids"))
    write(tmp_path / "e.parquet", [[1, 2], [3]])
    opened = OpenParquet(str(tmp_path / "e.parquet"), "e", None)
    opened.keep_ids_in(store)
    assert spans(opened, [0, 1]) == [[1, 2], [3]]
    assert not os.path.exists(tmp_path / "ids") or not os.listdir(tmp_path / "ids")
    monkeypatch.setenv(kept_ids.ENV, "lots")
    with pytest.raises(ValueError, match="SHUFFLEPOINT_KEPT_IDS_BYTES: found 'lots'"):
        kept_ids.KeptIds(str(tmp_path / "ids"))


def test_a_cache_folder_that_cannot_be_written_keeps_nothing(tmp_path, monkeypatch):
    monkeypatch.delenv(kept_ids.ENV, raising=False)
    (tmp_path / "file").write_text("")
    store = kept_ids.KeptIds(str(tmp_path / "file" / "ids"))  # below a file: no folder can be made
    assert not store.enabled
    write(tmp_path / "f.parquet", [[1, 2], [3]])
    assert spans(opened_with(tmp_path / "f.parquet", store), [0, 1]) == [[1, 2], [3]]


def test_packed_rows_are_the_same_from_the_kept_ids(tmp_path, monkeypatch):
    """Two epochs of ``Packed`` over Parquet: the first decodes (and keeps), the second maps; a fresh
    cache folder (nothing kept) gives the same batches."""
    monkeypatch.delenv(kept_ids.ENV, raising=False)
    rng = np.random.default_rng(3)
    for shard in range(3):
        write(tmp_path / f"p{shard}.parquet", [rng.integers(0, 60000, size=int(n)).tolist()
                                               for n in rng.integers(0, 40, size=30)], row_group_size=7)

    def epochs(cache, workers=0):
        decoded.clear()
        decodes = []
        corpus = shufflepoint.Shards(str(tmp_path / "p*.parquet"), progress=False, cache_dir=str(tmp_path / cache))
        packed = shufflepoint.Packed(corpus, 16, eos=65000, progress=False)
        loader = shufflepoint.DataLoader(packed, 4, seed=5, shuffle_block=16, num_workers=workers)
        found = []
        for epoch in range(2):
            loader.set_epoch(epoch)
            found.append([{k: v.tolist() for k, v in batch.items()} for batch in loader])
            decodes.append(len(decoded))
        return found, decodes

    decoded = []
    real = parquet_module.OpenParquet._decode
    monkeypatch.setattr(parquet_module.OpenParquet, "_decode",
                        lambda self, unit: decoded.append(unit) or real(self, unit))
    kept, decodes = epochs("one")
    assert 0 < decodes[0] == decodes[1]  # the first epoch decodes (and keeps), the second maps
    again, decodes = epochs("two")  # a fresh cache folder: decoded again, the same batches
    assert kept == again and kept[0] != kept[1] and decodes[0] > 0
    # two workers writing and mapping the same entries (one writes each, NodeCache's lock): the same batches
    assert epochs("three", workers=2)[0] == kept and entries(tmp_path / "three" / "ids")


def test_kept_ids_stay_within_their_limit(tmp_path, monkeypatch):
    """Beyond ``SHUFFLEPOINT_KEPT_IDS_BYTES`` the least recently used entries go (checked each time a
    process has kept 1/64 of the limit more; here every entry is larger than that)."""
    monkeypatch.setenv(kept_ids.ENV, "3000")
    store = kept_ids.KeptIds(str(tmp_path / "ids"))
    rng = np.random.default_rng(0)
    for k in range(12):
        store.save(f"k{k}", rng.integers(0, 70000, size=100).astype(np.int32), np.array([0, 40, 100]))
        used = store._cache.bytes_used()
        assert used <= 3000 + 500, (k, used)  # an entry is 32 + 24 + 400 bytes
    values, offsets = store.load("k11")
    assert offsets.tolist() == [0, 40, 100] and values.size == 100
    assert store.load("k0") is None  # the oldest went
