"""``locate(index)``: every answer is checked against the file itself (the bytes at the offset it gives
decode to the sample), against the source (a mixture's source index reads the same sample), and
against the row (a Packed row's document spans rebuild its tokens)."""

from __future__ import annotations

import gzip
import io
import json
import tarfile

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corpus_files import jsonl_corpus, jsonl_documents, parquet_corpus, token_corpus
from shufflepoint import Mixture, Packed, Shards
from shufflepoint._core.capabilities import Locatable


def test_every_composition_declares_the_capability():
    for cls in (Shards, Mixture, Packed):
        assert issubclass(cls, Locatable), cls
    assert not isinstance([1, 2], Locatable)


def _file_text(path: str) -> bytes:
    with open(path, "rb") as f:
        raw = f.read()
    return gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw


def test_jsonl_line_and_bytes_are_the_row(tmp_path):
    jsonl_corpus(str(tmp_path), 5, gz_every=2)
    corpus = Shards(str(tmp_path / "*"), format="jsonl", cache_dir=str(tmp_path / "cache"), progress=False)
    for index in range(len(corpus)):
        found = corpus.locate(index)
        assert found["index"] == index and corpus.shard_of(index) == (found["shard"], found["row"])
        text = _file_text(found["url"])
        assert found["decompressed"] == found["url"].endswith(".gz")
        piece = text[found["byte_offset"]:found["byte_offset"] + found["bytes"]]
        assert json.loads(piece) == corpus[index]
        assert json.loads(text.splitlines()[found["line"] - 1]) == corpus[index]


def test_token_windows_bin_and_npy(tmp_path):
    token_corpus(str(tmp_path / "bin"), 3, seq_len=8)
    np.save(tmp_path / "npy.npy", np.arange(50, dtype=np.uint16))
    for sources in (str(tmp_path / "bin" / "*.bin"), str(tmp_path / "npy.npy")):
        corpus = Shards(sources, seq_len=8, cache_dir=str(tmp_path / "cache"), progress=False)
        for index in range(len(corpus)):
            found = corpus.locate(index)
            with open(found["url"], "rb") as f:
                f.seek(found["byte_offset"])
                window = np.frombuffer(f.read(found["bytes"]), np.uint16)
            assert found["tokens"] == 9 and found["token_offset"] == 8 * found["row"]
            assert window.tolist() == corpus[index].tolist()


def test_webdataset_members_are_the_fields(tmp_path):
    path = tmp_path / "shard-0.tar"
    with tarfile.open(path, "w") as tar:
        for key in range(4):
            for field, payload in (("txt", f"text {key}".encode()), ("cls", str(key * 7).encode())):
                info = tarfile.TarInfo(f"sample{key:03d}.{field}")
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))
    corpus = Shards(str(path), cache_dir=str(tmp_path / "cache"), progress=False)
    raw = path.read_bytes()
    for index in range(len(corpus)):
        found, sample = corpus.locate(index), corpus[index]
        assert found["key"] == sample["__key__"] == f"sample{index:03d}"
        assert {m["field"] for m in found["members"]} == {"txt", "cls"}
        for member in found["members"]:
            assert raw[member["byte_offset"]:member["byte_offset"] + member["bytes"]] == sample[member["field"]]
        assert found["byte_offset"] == min(m["byte_offset"] for m in found["members"])


def test_parquet_row_group_and_row(tmp_path):
    import pyarrow.parquet as pq

    parquet_corpus(str(tmp_path), 4, rows=(3, 7))
    corpus = Shards(str(tmp_path / "*.parquet"), cache_dir=str(tmp_path / "cache"), progress=False)
    groups_seen = set()
    for index in range(len(corpus)):
        found = corpus.locate(index)
        table = pq.ParquetFile(found["url"]).read_row_group(found["row_group"])
        assert table.slice(found["row_in_group"], 1).to_pylist()[0] == corpus[index]
        groups_seen.add(found["row_group"])
    assert groups_seen >= {0, 1}  # the corpus has two row groups per file: both are reached


def test_arrow_record_batch(tmp_path):
    import pyarrow as pa

    table = pa.table({"id": list(range(10))})
    with pa.OSFile(str(tmp_path / "data.arrow"), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        for start in (0, 4):
            writer.write_table(table.slice(start, 4 if start == 0 else 6))
    corpus = Shards(str(tmp_path / "data.arrow"), cache_dir=str(tmp_path / "cache"), progress=False)
    assert [corpus.locate(i)["record_batch"] for i in (0, 3, 4, 9)] == [0, 0, 1, 1]
    assert [corpus.locate(i)["row_in_batch"] for i in (0, 3, 4, 9)] == [0, 3, 0, 5]


def test_shards_refuses_an_index_out_of_range(tmp_path):
    jsonl_corpus(str(tmp_path), 2)
    corpus = Shards(str(tmp_path / "*.jsonl"), cache_dir=str(tmp_path / "cache"), progress=False)
    with pytest.raises(IndexError, match=rf"Shards index: found {len(corpus)}\n  expected: an int in \[0, "):
        corpus.locate(len(corpus))


def test_mixture_names_the_source_and_nests_its_answer(tmp_path):
    jsonl_corpus(str(tmp_path / "web"), 3, first_id=1000)
    web = Shards(str(tmp_path / "web" / "*.jsonl"), cache_dir=str(tmp_path / "cache"), progress=False)
    plain = [{"id": i} for i in range(7)]
    mixture = Mixture([(web, 2), (plain, 1)], samples_per_epoch=30)
    for index in range(mixture.rows * 2):  # two passes: indices past the concatenation repeat the sources
        index %= mixture.rows
        found = mixture.locate(index)
        source = mixture.sources[found["source"]]
        assert source[found["source_index"]] == mixture[index]
        if found["source"] == 0:
            assert found["where"]["row"] == web.locate(found["source_index"])["row"]
        else:
            assert "where" not in found
    with pytest.raises(IndexError, match="Mixture index: found -1"):
        mixture.locate(-1)


def _framed(packed, document):
    ids = list(packed.dataset[document]["input_ids"])
    return ([packed.bos] if packed.bos is not None else []) + ids + ([packed.eos] if packed.eos is not None else [])


def test_packed_worked_example():
    packed = Packed([{"input_ids": list(range(d * 1000, d * 1000 + n))} for d, n in enumerate([3, 5, 2, 4])], 4,
                    progress=False)
    packed.epoch_order(0, 0, 2)
    assert packed.locate(1) == {"index": 1, "epoch": 0, "row": 1, "stream_tokens": [4, 8],
                                "documents": [{"document": 1, "tokens": [2, 5]}, {"document": 3, "tokens": [0, 1]}]}
    assert packed.locate(4)["epoch"] == 1 and packed.locate(4)["row"] == 1


@settings(max_examples=40, deadline=None)
@given(lengths=st.lists(st.integers(0, 30), min_size=1, max_size=25), seq_len=st.integers(1, 16),
       bos=st.booleans(), eos=st.booleans(), seed=st.integers(0, 2**32), block=st.integers(1, 10),
       epoch=st.integers(0, 3))
def test_packed_spans_rebuild_every_row(lengths, seq_len, bos, eos, seed, block, epoch):
    docs = [{"input_ids": list(range(d * 1000, d * 1000 + n))} for d, n in enumerate(lengths)]
    total = sum(lengths) + len(lengths) * (bos + eos)
    if total < seq_len:
        return
    packed = Packed(docs, seq_len, bos=900001 if bos else None, eos=900002 if eos else None, progress=False)
    packed.epoch_order(seed, epoch, block)
    for row in range(len(packed)):
        index = epoch * len(packed) + row
        found = packed.locate(index)
        span = [row * seq_len, (row + 1) * seq_len]
        assert (found["epoch"], found["row"], found["stream_tokens"]) == (epoch, row, span)
        rebuilt = [t for d in found["documents"] for t in _framed(packed, d["document"])[slice(*d["tokens"])]]
        assert rebuilt == packed[index]["input_ids"].tolist()


def test_packed_over_shards_says_where_each_document_lives(tmp_path):
    jsonl_documents(str(tmp_path), 4, rows=(2, 5))
    corpus = Shards(str(tmp_path / "*.jsonl"), cache_dir=str(tmp_path / "cache"), progress=False)
    packed = Packed(corpus, 16, progress=False)
    packed.epoch_order(3, 0, 4)
    for row in range(len(packed)):
        for document in packed.locate(row)["documents"]:
            where = document["where"]
            assert where["index"] == document["document"]
            with open(where["url"], "rb") as f:
                f.seek(where["byte_offset"])
                assert json.loads(f.read(where["bytes"]))["id"] == document["document"]
