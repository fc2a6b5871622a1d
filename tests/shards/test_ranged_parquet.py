"""A Parquet shard read by range decodes from its partial copy's map (``readers/parquet._over``): pyarrow
must never read a byte the copy does not hold, since a hole reads as zeros, not as an error.

Every byte the copy does not hold is filled with 0xFF here (the sparse file would read zeros): a decode
that read one would decode garbage or fail, and every row is compared with pyarrow's own read of the
file. Files: several row groups joined into decode units, dictionary pages, snappy, a column subset,
nested lists, a footer longer than the tail read first. Then an entry evicted and started again by
another process under an open reader: the next decode fetches into the new copy and reads its map.
"""

from __future__ import annotations

import contextlib
import io
import os

import numpy as np
import pytest

from shufflepoint._shards.readers.base import Ranged
from shufflepoint._shards.readers.parquet import ParquetReader
from shufflepoint._shards.storage import ranged
from shufflepoint._shards.storage.cache import NodeCache

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def parquet_bytes(kind: str) -> bytes:
    rng = np.random.default_rng(7)
    rows = 5_000
    table = {"id": np.arange(rows), "text": [f"doc-{i % 37}-" + "x" * (i % 50) for i in range(rows)],
             "score": rng.random(rows)}
    options: dict = {"compression": "none", "row_group_size": 700}
    if kind == "dictionary":
        options = {"compression": "snappy", "row_group_size": 300, "use_dictionary": True}
    elif kind == "nested":
        table["ids"] = [list(range(i % 9)) for i in range(rows)]
        options = {"compression": "zstd", "row_group_size": 90}  # small groups: joined into decode units
    elif kind == "wide":  # a footer past the 64 KiB tail: many groups of many columns
        table = {f"c{c}": np.arange(rows) * c for c in range(40)}
        options = {"compression": "none", "row_group_size": 60}
    out = io.BytesIO()
    pq.write_table(pa.table(table), out, **options)
    return out.getvalue()


def partial_of(blob: bytes, cache: NodeCache, url: str, gets: list | None = None) -> ranged.PartialShard:
    @contextlib.contextmanager
    def read_ranges():
        yield lambda start, end: (gets.append((start, end)) if gets is not None else None) or blob[start:end]

    return ranged.PartialShard(cache, url, "v1", len(blob), read_ranges)


def garble_unheld(partial: ranged.PartialShard) -> None:
    """Fill every byte the entry does not hold with 0xFF (written behind its back, not recorded)."""
    data, _, _ = partial._cache.partial(partial._url, partial._version)
    at = 0
    with open(data, "r+b") as handle:
        for start, end in [*partial.held(), (partial.size, partial.size)]:
            handle.seek(at)
            handle.write(b"\xff" * (start - at))
            at = end


def open_ranged(partial: ranged.PartialShard, columns: list[str] | None):
    source = ranged.RangedFile(partial)
    return ParquetReader(columns).open_ranged(Ranged(source, partial.ensure, "key"), "s3://b/shard.parquet")


@pytest.mark.parametrize(("kind", "columns"), [("plain", None), ("dictionary", ["text", "id"]),
                                               ("nested", ["ids", "id"]), ("wide", ["c3", "c39"])])
def test_a_decode_reads_only_held_bytes(tmp_path, kind, columns):
    blob = parquet_bytes(kind)
    truth = pq.read_table(io.BytesIO(blob), columns=columns).to_pylist()
    cache = NodeCache(str(tmp_path / "c"))
    partial = partial_of(blob, cache, "s3://b/shard.parquet")
    opened = open_ranged(partial, columns)  # the footer held (and parsed from the map)
    garble_unheld(partial)
    if kind == "wide":
        assert len(blob) - partial.held()[0][0] > 64 << 10  # the footer's own GET past the tail
    # Units in a scattered order, garbling what is still not held before each: a decode sees 0xFF
    # wherever it reads a byte it did not ask for.
    units = len(opened._units)
    for unit in [*range(0, units, 3), *range(1, units, 3), *range(2, units, 3)]:
        garble_unheld(partial)
        first = int(opened._flat.starts[unit])
        rows = np.arange(first, int(opened._ends[unit]))
        got = [opened[int(row)] for row in rows[:: max(1, rows.size // 7)]]
        assert got == [truth[int(row)] for row in rows[:: max(1, rows.size // 7)]], (kind, unit)
    assert [opened[i] for i in range(len(truth))] == truth
    if kind == "wide":  # 2 of 40 columns: the others' chunks were never fetched (far apart, not joined)
        assert sum(b - a for a, b in partial.held()) < len(blob) * 0.3
    opened.close()


def test_an_entry_evicted_under_an_open_reader_is_fetched_again_not_read_as_zeros(tmp_path):
    blob = parquet_bytes("plain")
    truth = pq.read_table(io.BytesIO(blob)).to_pylist()
    cache = NodeCache(str(tmp_path / "c"))
    gets: list = []
    mine = partial_of(blob, cache, "s3://b/shard.parquet", gets)
    opened = open_ranged(mine, None)
    assert opened[0] == truth[0]  # unit 0 held and decoded from this copy's map
    old_map = opened._map
    # Another process evicts the entry and starts it again, fetching one other unit into the new copy.
    data, record, _ = cache.partial("s3://b/shard.parquet", "v1")
    os.unlink(data)
    os.unlink(record)
    other = partial_of(blob, cache, "s3://b/shard.parquet")
    last = len(opened._units) - 1
    other.ensure(opened._chunk_ranges(opened._units[last][0]))
    garble_unheld(other)
    # This reader's copy still holds unit 0 (the unlinked file stays readable): no GET for it.
    fetched = len(gets)
    assert opened[1] == truth[1] and len(gets) == fetched
    # Unit 1 is held by neither copy: fetched into the new one, then decoded from the new copy's map.
    row = int(opened._flat.starts[1])
    assert opened[row] == truth[row] and len(gets) > fetched and opened._map is not old_map
    # The last unit: held by the new copy (the other process fetched it), read from it without a GET.
    fetched = len(gets)
    row = int(opened._flat.starts[last])
    assert opened[row] == truth[row] and len(gets) == fetched
    opened.close()
    other.close()


def test_holding_returns_the_map_of_the_copy_that_holds_the_spans(tmp_path):
    blob = bytes(range(256)) * 1024
    cache = NodeCache(str(tmp_path / "c"))
    partial = partial_of(blob, cache, "s3://b/x.bin")
    view = partial.holding([(100, 200), (5_000, 5_100)])
    assert bytes(view[100:200]) == blob[100:200] and bytes(view[5_000:5_100]) == blob[5_000:5_100]
    data, record, _ = cache.partial("s3://b/x.bin", "v1")
    os.unlink(data)
    os.unlink(record)
    partial_of(blob, cache, "s3://b/x.bin").close()  # a new, empty copy at the path
    again = partial.holding([(100, 200)])  # held by this process's copy: its map, no fetch
    assert again.obj is view.obj and bytes(again[100:200]) == blob[100:200]
    moved = partial.holding([(9_000, 9_050)])  # not held: fetched into the new copy, its map returned
    assert moved.obj is not view.obj and bytes(moved[9_000:9_050]) == blob[9_000:9_050]
    partial.close()
