"""The shard readers: files written by the real writers come back row for row, and broken ones are named."""

from __future__ import annotations

import gzip
import io
import json
import os
import pickle
import tarfile

import numpy as np
import pyarrow as pa
import pyarrow.ipc
import pyarrow.parquet as pq
import pytest
import torch
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from shufflepoint._errors import ShardError
from shufflepoint._shards.readers import READERS, infer_format, make_reader, saved_dataset_files
from shufflepoint._shards.readers import parquet as parquet_reader
from shufflepoint._shards.readers._common import extra

ROWS = [{"id": i, "text": f"row {i}", "tags": ["a"] * (i % 3)} for i in range(11)]


def read_all(reader, path, shard=None):
    opened = reader.open(str(path), shard or str(path))
    try:
        order = list(range(len(opened)))[::-1]  # out of order: last row first
        got = {i: opened[i] for i in order}
        return [got[i] for i in range(len(opened))]
    finally:
        opened.close()


def expect_shard_error(reader, path, *words):
    with pytest.raises(ShardError) as info:
        read_all(reader, path)
    assert str(path) in str(info.value) and info.value.shard == str(path)
    for word in words:
        assert word in str(info.value), str(info.value)
    return info.value


# -- jsonl ---------------------------------------------------------------------------------------
def jsonl_bytes(rows):
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


@pytest.mark.parametrize("kind", ["plain", "gz", "zst", "zst-frames"])
def test_jsonl_every_row_comes_back(tmp_path, kind):
    data = jsonl_bytes(ROWS)
    path = tmp_path / ("s.jsonl" + {"plain": "", "gz": ".gz"}.get(kind, ".zst"))
    if kind == "gz":
        data = gzip.compress(data)
    elif kind == "zst":
        data = zstandard.ZstdCompressor().compress(data)
    elif kind == "zst-frames":  # two frames, the second without a content size
        out = io.BytesIO()
        with zstandard.ZstdCompressor().stream_writer(out, closefd=False) as w:
            w.write(jsonl_bytes(ROWS[6:]))
        data = zstandard.ZstdCompressor().compress(jsonl_bytes(ROWS[:6])) + out.getvalue()
    path.write_bytes(data)
    assert read_all(make_reader("jsonl"), path) == ROWS
    (tmp_path / "cached").write_bytes(data)  # a cache file without the suffix: the magic bytes tell
    assert read_all(make_reader("jsonl"), tmp_path / "cached") == ROWS


def test_jsonl_blank_lines_are_not_rows(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_bytes(b'{"a": 1}\r\n\n\r\n{"a": 2}\n\n[3]\n\n\n"last, no newline"')
    assert read_all(make_reader("jsonl"), path) == [{"a": 1}, {"a": 2}, [3], "last, no newline"]
    (tmp_path / "empty.jsonl").write_bytes(b"")
    (tmp_path / "newlines.jsonl").write_bytes(b"\n\n")
    assert read_all(make_reader("jsonl"), tmp_path / "empty.jsonl") == []
    assert read_all(make_reader("jsonl"), tmp_path / "newlines.jsonl") == []


def test_jsonl_invalid_line_names_the_line(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_bytes(b'{"a": 1}\n\n{"a": 2}\n{"a": oops}\n{"a": 4}\n')
    opened = make_reader("jsonl").open(str(path), "s3://bucket/s.jsonl")
    assert len(opened) == 4 and opened[3] == {"a": 4}
    with pytest.raises(ShardError, match=r"s3://bucket/s\.jsonl: found line 4 \(row 2\), not valid JSON\n"
                                         r"  expected: one JSON value a line\n  why: .+\n  fix: replace the shard"):
        opened[2]
    opened.close()


@pytest.mark.parametrize("kind", ["gz", "zst"])
def test_jsonl_truncated_compressed_shard(tmp_path, kind):
    data = jsonl_bytes(ROWS * 50)
    data = gzip.compress(data) if kind == "gz" else zstandard.ZstdCompressor().compress(data)
    path = tmp_path / f"s.jsonl.{kind}"
    path.write_bytes(data[: len(data) // 2])
    expect_shard_error(make_reader("jsonl"), path, "truncated")
    path.write_bytes(data[:4] + b"\xff" * 40)  # the magic, then garbage
    expect_shard_error(make_reader("jsonl"), path, "corrupt")


def test_jsonl_rows_out_of_range(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_bytes(jsonl_bytes(ROWS[:2]))
    opened = make_reader("jsonl").open(str(path), str(path))
    for row in (2, -1):
        with pytest.raises(IndexError):
            opened[row]
    opened.close()


# -- parquet -------------------------------------------------------------------------------------
def write_parquet(path, rows, group=3):
    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=group)
    assert pq.ParquetFile(path).metadata.num_row_groups == -(-len(rows) // group)


def test_parquet_every_row_by_row_group(tmp_path):
    write_parquet(tmp_path / "s.parquet", ROWS)
    assert read_all(make_reader("parquet"), tmp_path / "s.parquet") == ROWS
    picked = read_all(make_reader("parquet", columns=["text", "id"]), tmp_path / "s.parquet")
    assert picked == [{"text": r["text"], "id": r["id"]} for r in ROWS]


def test_parquet_decodes_a_row_group_once_for_its_rows(tmp_path, monkeypatch):
    monkeypatch.setattr(parquet_reader, "_UNIT_ROWS", 1)  # every row group its own decode unit
    write_parquet(tmp_path / "s.parquet", ROWS)
    opened = make_reader("parquet").open(str(tmp_path / "s.parquet"), "s")
    calls = []
    read = opened._file.read_row_groups
    opened._file.read_row_groups = lambda groups, **kw: calls.append(list(groups)) or read(groups, **kw)
    assert [opened[i]["id"] for i in (3, 4, 5, 10, 9)] == [3, 4, 5, 10, 9]
    assert calls == [[1], [3]]
    opened.close()


def test_small_parquet_row_groups_are_decoded_together(tmp_path, monkeypatch):
    """Groups of a few rows cost a pyarrow call each: consecutive ones are read as one unit of at least
    ``_UNIT_ROWS`` rows, unless that passes ``_UNIT_BYTES``; rows stay where they are."""
    write_parquet(tmp_path / "s.parquet", ROWS)  # groups of 3 rows
    groups = pq.ParquetFile(tmp_path / "s.parquet").metadata.num_row_groups
    for unit_rows, unit_bytes, expected in ((1024, 8 << 20, [list(range(groups))]),
                                            (5, 8 << 20, [[g, g + 1] for g in range(0, groups - 1, 2)]),
                                            (1024, 1, [[g] for g in range(groups)])):
        monkeypatch.setattr(parquet_reader, "_UNIT_ROWS", unit_rows)
        monkeypatch.setattr(parquet_reader, "_UNIT_BYTES", unit_bytes)
        opened = make_reader("parquet").open(str(tmp_path / "s.parquet"), "s")
        calls = []
        read = opened._file.read_row_groups
        opened._file.read_row_groups = lambda groups, calls=calls, read=read, **kw: (
            calls.append(list(groups)) or read(groups, **kw))
        order = np.random.default_rng(unit_rows).permutation(len(opened))
        assert [row["id"] for row in opened.take(order)] == [ROWS[i]["id"] for i in order]
        assert sorted(calls) == sorted(expected)
        opened.close()


def test_a_corrupt_row_group_costs_its_own_rows_not_its_units(tmp_path):
    """Small row groups are decoded together; one whose page is overwritten fails its own rows (each read
    names the group), while the other groups of its unit are served, by row and by batch."""
    path = tmp_path / "s.parquet"
    pq.write_table(pa.table({"id": np.arange(200), "x": np.arange(200) * 1.0}), path, row_group_size=10,
                   compression="NONE")
    offset = pq.ParquetFile(path).metadata.row_group(5).column(1).data_page_offset
    data = bytearray(path.read_bytes())
    data[offset:offset + 40] = b"\xff" * 40
    path.write_bytes(bytes(data))
    opened = make_reader("parquet").open(str(path), "s")
    assert len(opened._units) == 1  # the 20 groups are one decode unit
    good = [row for row in range(200) if not 50 <= row < 60]
    assert [opened[row]["id"] for row in good] == good
    assert [row["id"] for row in opened.take(np.asarray(good[::-1]))] == good[::-1]
    for row in (50, 59):
        with pytest.raises(ShardError, match="row group 5 that cannot be decoded"):
            opened[row]
    with pytest.raises(ShardError, match="row group 5"):
        opened.take(np.asarray([3, 55]))
    opened.close()


def test_parquet_missing_column_and_corrupt_file(tmp_path):
    write_parquet(tmp_path / "s.parquet", ROWS)
    expect_shard_error(make_reader("parquet", columns=["txt"]), tmp_path / "s.parquet", "'txt'", "'text'", "'id'")
    data = (tmp_path / "s.parquet").read_bytes()
    (tmp_path / "cut.parquet").write_bytes(data[: len(data) // 2])
    expect_shard_error(make_reader("parquet"), tmp_path / "cut.parquet", "Parquet")


# -- webdataset ----------------------------------------------------------------------------------
def write_tar(path, members):
    with tarfile.open(path, "w") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            if data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))


TAR = [("train", None), ("train/0001.jpg", b"jpeg-1"), ("train/0001.cls", b"7"), ("README", b"no dot: no field"),
       ("train/0002.JPG", b"jpeg-2" * 300), ("train/0002.seg.png", b""), ("train/0003.txt", b"three")]


def test_webdataset_samples_are_groups_of_members(tmp_path):
    write_tar(tmp_path / "s.tar", TAR)
    assert read_all(make_reader("webdataset"), tmp_path / "s.tar") == [
        {"__key__": "train/0001", "jpg": b"jpeg-1", "cls": b"7"},
        {"__key__": "train/0002", "jpg": b"jpeg-2" * 300, "seg.png": b""},
        {"__key__": "train/0003", "txt": b"three"},
    ]


def test_webdataset_truncated_corrupt_and_compressed_tars(tmp_path):
    write_tar(tmp_path / "s.tar", TAR)
    data = (tmp_path / "s.tar").read_bytes()
    big = data.index(b"jpeg-2")  # inside the data of the 2-sample's first member
    for cut in (big + 100, big - 300):  # inside a member's bytes; inside a header
        (tmp_path / "cut.tar").write_bytes(data[:cut])
        expect_shard_error(make_reader("webdataset"), tmp_path / "cut.tar", "tar")
    (tmp_path / "tail.tar").write_bytes(data + b"more bytes after the end of the archive")
    expect_shard_error(make_reader("webdataset"), tmp_path / "tail.tar", "zero blocks")
    (tmp_path / "padded.tar").write_bytes(data + b"\0" * 10240)  # GNU tar pads to whole records
    assert len(read_all(make_reader("webdataset"), tmp_path / "padded.tar")) == 3
    (tmp_path / "junk.tar").write_bytes(b"not a tar" * 100)
    expect_shard_error(make_reader("webdataset"), tmp_path / "junk.tar", "truncated or corrupt")
    (tmp_path / "z.tar").write_bytes(gzip.compress(data))
    expect_shard_error(make_reader("webdataset"), tmp_path / "z.tar", "gzip")


def test_webdataset_field_twice_in_a_sample(tmp_path):
    write_tar(tmp_path / "s.tar", [("0001.jpg", b"a"), ("0001.JPG", b"b")])
    expect_shard_error(make_reader("webdataset"), tmp_path / "s.tar", "'0001'", "'jpg' twice")


# -- tokens --------------------------------------------------------------------------------------
def windows(tokens, seq_len):
    return [tokens[i * seq_len:i * seq_len + seq_len + 1] for i in range((len(tokens) - 1) // seq_len)]


def test_tokens_npy_and_bin_windows(tmp_path):
    tokens = np.arange(1, 24, dtype=np.uint16) * 1000  # 23 tokens, seq_len 4: rows 0..4, a 2-token tail
    np.save(tmp_path / "s.npy", tokens)
    tokens.astype(np.uint32).tofile(tmp_path / "s.bin")
    for path, dtype in ((tmp_path / "s.npy", None), (tmp_path / "s.bin", "uint32")):
        rows = read_all(make_reader("tokens", seq_len=4, dtype=dtype), path)
        assert len(rows) == 5 and rows[-1].tolist() == tokens[16:21].tolist()
        assert all(r.dtype == torch.int64 and r.shape == (5,) for r in rows)
        assert [r.tolist() for r in rows] == windows(tokens.tolist(), 4)
    assert torch.utils.data.default_collate(rows).shape == (5, 5)


@pytest.mark.parametrize("name", ["s.npy", "s.bin", "big.npy"])
def test_tokens_read_before_and_after_the_map_agree(tmp_path, name):
    """A shard's first windows are read by pread, later ones from a memory map: the same values
    through take and [row], at any row, in any order, repeats included."""
    from shufflepoint._shards.readers import tokens as tokens_reader

    values = np.random.default_rng(3).integers(0, 60_000, size=4 * 300 + 3, dtype=np.uint16)
    if name == "big.npy":
        np.save(tmp_path / name, values.astype(">u2"))  # big-endian ids: the header's dtype, not the reader's
    elif name.endswith(".npy"):
        np.save(tmp_path / name, values)
    else:
        values.tofile(tmp_path / name)
    expected = np.array(windows(values.tolist(), 4))
    opened = make_reader("tokens", seq_len=4).open(str(tmp_path / name), name)
    rows = np.random.default_rng(4).integers(0, len(opened), size=3 * tokens_reader._MAP_AFTER)
    first = opened.take(rows[:5]).collate()
    assert opened._tokens is None  # still unmapped: read by pread
    assert first.tolist() == expected[rows[:5]].tolist()
    assert opened[int(rows[5])].tolist() == expected[rows[5]].tolist()
    rest = opened.take(rows[6:]).collate()  # past _MAP_AFTER: mapped
    assert opened._tokens is not None
    assert rest.tolist() == expected[rows[6:]].tolist()
    assert opened[int(rows[0])].tolist() == expected[rows[0]].tolist()
    opened.close()
    with pytest.raises(ValueError, match="closed"):
        opened.take(rows[:1])


def test_tokens_short_and_empty_files_have_no_rows(tmp_path):
    np.arange(4, dtype=np.uint16).tofile(tmp_path / "short.bin")  # seq_len 4 needs 5 tokens
    (tmp_path / "empty.bin").write_bytes(b"")
    assert read_all(make_reader("tokens", seq_len=4), tmp_path / "short.bin") == []
    assert read_all(make_reader("tokens", seq_len=4), tmp_path / "empty.bin") == []
    assert [r.tolist() for r in read_all(make_reader("tokens", seq_len=3), tmp_path / "short.bin")] == [[0, 1, 2, 3]]


def test_tokens_broken_files(tmp_path):
    np.arange(9, dtype=np.uint16).tofile(tmp_path / "s.bin")
    (tmp_path / "odd.bin").write_bytes((tmp_path / "s.bin").read_bytes()[:-1])
    expect_shard_error(make_reader("tokens", seq_len=2), tmp_path / "odd.bin", "truncated", "17 bytes")
    expect_shard_error(make_reader("tokens", seq_len=2, dtype="uint32"), tmp_path / "s.bin", "truncated", "uint32")
    np.save(tmp_path / "u32.npy", np.arange(10, dtype=np.uint32))
    expect_shard_error(make_reader("tokens", seq_len=2), tmp_path / "u32.npy", "dtype", "uint32", "uint16")
    data = (tmp_path / "u32.npy").read_bytes()
    (tmp_path / "cut.npy").write_bytes(data[:-3])
    expect_shard_error(make_reader("tokens", seq_len=2, dtype="uint32"), tmp_path / "cut.npy", ".npy")
    np.save(tmp_path / "2d.npy", np.zeros((3, 4), np.uint16))
    expect_shard_error(make_reader("tokens", seq_len=2), tmp_path / "2d.npy", "1-D")


def test_tokens_kind_comes_from_the_shard_name_or_the_magic(tmp_path):
    np.save(tmp_path / "s.npy", np.arange(9, dtype=np.uint16))
    (tmp_path / "cached").write_bytes((tmp_path / "s.npy").read_bytes())
    reader = make_reader("tokens", seq_len=4)
    assert len(read_all(reader, tmp_path / "cached", shard="s3://b/s.npy?v=1")) == 2
    assert len(read_all(reader, tmp_path / "cached", shard="s3://b/blob")) == 2  # by the magic


@settings(max_examples=60, deadline=None)
@given(ntokens=st.integers(0, 300), seq_len=st.integers(1, 40), dtype=st.sampled_from(["uint16", "uint32"]))
def test_token_windows_match_a_direct_slice(tmp_path_factory, ntokens, seq_len, dtype):
    tokens = np.random.default_rng(ntokens).integers(0, 60000, ntokens).astype(dtype)
    path = tmp_path_factory.mktemp("tok") / "s.bin"
    tokens.tofile(path)
    opened = make_reader("tokens", seq_len=seq_len, dtype=dtype).open(str(path), str(path))
    assert len(opened) == max(0, (ntokens - 1) // seq_len)
    for i in range(len(opened)):
        assert opened[i].tolist() == tokens[i * seq_len:(i + 1) * seq_len + 1].tolist()
    if len(opened):  # every token but the tail is read, and the last window ends inside the stream
        assert (len(opened) * seq_len) + 1 <= ntokens < (len(opened) + 1) * seq_len + 1
    opened.close()


# -- arrow (Hugging Face save_to_disk) -----------------------------------------------------------
@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    datasets = pytest.importorskip("datasets")
    folder = tmp_path_factory.mktemp("hf") / "train"
    table = {"id": list(range(23)), "text": [f"doc {i}" for i in range(23)]}
    datasets.Dataset.from_dict(table).save_to_disk(str(folder), num_shards=3)
    return folder, [{"id": i, "text": text} for i, text in enumerate(table["text"])]


def test_saved_dataset_files_in_row_order(saved):
    folder, rows = saved
    files = saved_dataset_files(str(folder))
    assert [f.rsplit("/", 1)[1] for f in files] == [f"data-0000{i}-of-00003.arrow" for i in range(3)]
    assert saved_dataset_files("file://" + str(folder)) == ["file://" + f for f in files]
    got = [row for path in files for row in read_all(make_reader("arrow"), path)]
    assert got == rows
    assert [r for p in files for r in read_all(make_reader("arrow", columns=["text"]), p)] == [
        {"text": r["text"]} for r in rows]


def test_saved_dataset_files_refuses_other_folders(saved, tmp_path):
    datasets = pytest.importorskip("datasets")
    folder, _ = saved
    assert saved_dataset_files(str(tmp_path)) is None
    assert saved_dataset_files("s3://bucket/ds") is None
    splits = tmp_path / "dd"
    datasets.DatasetDict({"train": datasets.Dataset.from_dict({"a": [1]})}).save_to_disk(str(splits))
    assert saved_dataset_files(str(splits)) is None
    assert saved_dataset_files(str(splits / "train")) == [str(splits / "train" / "data-00000-of-00001.arrow")]
    (tmp_path / "state.json").write_text(json.dumps({"_data_files": [{"filename": "gone.arrow"}]}))
    with pytest.raises(ShardError, match="gone.arrow.*missing"):
        saved_dataset_files(str(tmp_path))
    (tmp_path / "state.json").write_text(json.dumps({"_data_files": [{"filename": "../up.arrow"}]}))
    with pytest.raises(ShardError, match="_data_files"):
        saved_dataset_files(str(tmp_path))


def test_arrow_file_format_missing_column_and_corrupt(tmp_path):
    table = pa.Table.from_pylist(ROWS)
    with pa.ipc.new_file(str(tmp_path / "f.arrow"), table.schema) as writer:
        for batch in table.to_batches(max_chunksize=4):
            writer.write_batch(batch)
    assert read_all(make_reader("arrow"), tmp_path / "f.arrow") == ROWS
    expect_shard_error(make_reader("arrow", columns=["nope"]), tmp_path / "f.arrow", "'nope'", "'text'")
    data = (tmp_path / "f.arrow").read_bytes()
    (tmp_path / "cut.arrow").write_bytes(data[: len(data) // 2])
    expect_shard_error(make_reader("arrow"), tmp_path / "cut.arrow", "Arrow IPC")


# -- the registry --------------------------------------------------------------------------------
def test_make_reader_names_the_field():
    with pytest.raises(ValueError, match="format: found 'xyz'\n"
                                         "  expected: one of arrow, jsonl, parquet, tokens, webdata"):
        make_reader("xyz")
    with pytest.raises(ValueError, match="seq_len: found given to the parquet reader\n"
                                         "  expected: only what it takes: columns"):
        make_reader("parquet", seq_len=4)
    with pytest.raises(ValueError, match="columns: found given to the jsonl reader\n"
                                         "  expected: only what it takes: no options"):
        make_reader("jsonl", columns=["a"])
    with pytest.raises(ValueError, match="seq_len: found None\n  expected: an int >= 1: the tokens reader needs it"):
        make_reader("tokens")
    for bad in (0, -3, 2.5, True, "8"):
        with pytest.raises(ValueError, match=rf"seq_len: found {bad!r}\n  expected: an int >= 1".replace("(", r"\(")):
            make_reader("tokens", seq_len=bad)
    with pytest.raises(ValueError, match="dtype: found 'float32'\n  expected: one of uint16, uint32"):
        make_reader("tokens", seq_len=4, dtype="float32")
    with pytest.raises(ValueError, match="columns: found 'text'\n  expected: a list of column names"):
        make_reader("parquet", columns="text")
    with pytest.raises(ValueError, match=r"columns: found \['a', 'a'\]\n"
                                         r"  expected: a non-empty list of distinct column names"):
        make_reader("arrow", columns=["a", "a"])


def test_options_are_what_changes_the_rows_and_readers_pickle():
    assert make_reader("tokens", seq_len=128).options() == {"seq_len": 128, "dtype": "uint16"}
    assert make_reader("tokens", seq_len=np.int64(8), dtype=np.uint32).options() == {"seq_len": 8, "dtype": "uint32"}
    assert make_reader("parquet", columns=("a", "b")).options() == {"columns": ["a", "b"]}
    assert make_reader("arrow").options() == {"columns": None}
    assert make_reader("jsonl", columns=None).options() == make_reader("webdataset").options() == {}
    for name in READERS:
        reader = make_reader(name, seq_len=3) if name == "tokens" else make_reader(name)
        again = pickle.loads(pickle.dumps(reader))
        assert type(again) is type(reader) and again.options() == reader.options()
        assert json.loads(json.dumps(again.options())) == reader.options()
        assert again.name == name


@pytest.mark.parametrize("name, format", [
    ("data/train-00001.parquet", "parquet"), ("s3://b/c4/en.00001.JSONL.ZST", "jsonl"),
    ("c4-train.00000-of-01024.json.gz", "jsonl"), ("a.jsonl", "jsonl"), ("a.jsonl.gz", "jsonl"),
    ("a.ndjson", "jsonl"), ("gs://b/shard-000.tar?generation=3", "webdataset"), ("fineweb_000.bin", "tokens"),
    ("tok.npy", "tokens"), ("hf/train/data-00000-of-00003.arrow", "arrow"), ("https://h/x.parquet?x=a.tar", "parquet"),
])
def test_infer_format(name, format):
    assert infer_format(name) == format


@pytest.mark.parametrize("name, hint", [("a.csv", "pass format="), ("a.json", "format='jsonl'"),
                                        ("a.tar.gz", "pass format="), ("folder/", "pass format=")])
def test_infer_format_unknown(name, hint):
    with pytest.raises(ValueError, match="format: found none inferred from the name ") as info:
        infer_format(name)
    assert hint in str(info.value) and repr(name) in str(info.value)


def test_a_missing_extra_names_the_pip_extra():
    with pytest.raises(ImportError, match=r"pip install 'shufflepoint\[parquet\]'"):
        extra("shufflepoint_no_such_module", "parquet")


def test_a_token_shard_dropped_unclosed_lets_its_descriptor_go(tmp_path):
    import gc

    np.arange(100, dtype=np.uint16).tofile(tmp_path / "t.bin")
    shard = os.path.realpath(tmp_path / "t.bin")

    def open_on_the_shard() -> int:  # only this file's descriptors: others of the process come and go meanwhile
        found = 0
        for fd in os.listdir("/proc/self/fd"):
            try:
                found += os.readlink(f"/proc/self/fd/{fd}") == shard
            except OSError:  # closed between the listing and the look
                pass
        return found

    opened = [make_reader("tokens", seq_len=4).open(str(tmp_path / "t.bin"), "t.bin") for _ in range(20)]
    assert open_on_the_shard() == 20
    del opened
    gc.collect()
    assert open_on_the_shard() == 0


EXITS_WITH_SHARDS_OPEN = """
import sys
import numpy as np
import pyarrow as pa, pyarrow.parquet as pq
import shufflepoint

folder = sys.argv[1]
for shard in range(3):
    np.arange(1000, dtype=np.uint16).tofile(f"{folder}/t{shard}.bin")
    pq.write_table(pa.table({"id": list(range(10))}), f"{folder}/p{shard}.parquet")
    open(f"{folder}/j{shard}.jsonl", "w").write('{"a": 1}\\n' * 10)
CORPORA = [shufflepoint.Shards(f"{folder}/*.{suffix}", cache_dir=f"{folder}/cache", progress=False, **options)
           for suffix, options in (("bin", {"seq_len": 4}), ("parquet", {}), ("jsonl", {}))]
BATCHES = [next(iter(shufflepoint.DataLoader(corpus, batch_size=8, seed=0))) for corpus in CORPORA]
print("read", len(BATCHES))
"""


def test_a_script_that_ends_with_its_shards_open_exits_quietly(tmp_path):
    # At interpreter exit, module globals are cleared before the last objects go: an open token
    # shard's __del__ printed "Exception ignored ... 'NoneType' object has no attribute 'close'" per shard.
    import subprocess
    import sys

    script = tmp_path / "script.py"
    script.write_text(EXITS_WITH_SHARDS_OPEN)
    done = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "read 3", done.stderr
    assert "Exception ignored" not in done.stderr and "Traceback" not in done.stderr, done.stderr



READS_WITHOUT_PANDAS = """
import sys
import numpy as np
import shufflepoint
folder = sys.argv[1]
for suffix in ("parquet", "arrow"):
    corpus = shufflepoint.Shards(f"{folder}/*.{suffix}", cache_dir=f"{folder}/cache", progress=False)
    rows = corpus.read_batch(np.array([39, 0, 21, 5]))
    one = corpus[22]
    assert one["id"] == 2 and one["text"] == "r2" and list(one["input_ids"]) == [0, 1, 2, 3, 4], one
documents = shufflepoint.Shards(f"{folder}/*.parquet", cache_dir=f"{folder}/cache", progress=False)
packed = shufflepoint.Packed(documents, 64)
batches = [batch for batch in shufflepoint.DataLoader(packed, batch_size=4, seed=0)]
assert sum(int(b["input_ids"].shape[0]) for b in batches) == len(packed)
print("pandas" in sys.modules)
"""


def test_reading_parquet_and_arrow_never_imports_pandas(tmp_path):
    # pyarrow's to_numpy() and pa.array() import pandas where it is installed: ~300 modules and 0.3 s
    # of CPU in every process and DataLoader worker (a third of Packed's first epoch on 20M tokens).
    import subprocess
    import sys

    pytest.importorskip("pandas")
    pa = pytest.importorskip("pyarrow")
    import pyarrow.feather as feather
    import pyarrow.parquet as pq

    ids = [np.arange(n, dtype=np.int32) for n in (3, 70, 5, 400, 9)] * 4
    columns = [pa.array(list(range(20))), pa.array([0.5] * 20), pa.array([f"r{i}" for i in range(20)]),
               pa.array(ids, type=pa.list_(pa.int32()))]
    table = pa.Table.from_arrays(columns, names=["id", "x", "text", "input_ids"])
    for shard in range(2):
        pq.write_table(table, tmp_path / f"p{shard}.parquet", row_group_size=7)
        feather.write_feather(table, str(tmp_path / f"a{shard}.arrow"), compression="uncompressed")
    script = tmp_path / "script.py"
    script.write_text(READS_WITHOUT_PANDAS)
    done = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False", done.stdout + done.stderr
