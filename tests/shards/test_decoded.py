"""Decoded Parquet row groups: one byte budget for every open file of the process, and it holds.

A group's bytes are what it holds: the Arrow table when kept, numpy arrays, and the Python str and
bytes objects of its converted columns (``sys.getsizeof``)."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import shufflepoint
from shufflepoint._shards.readers import parquet as parquet_reader
from shufflepoint._shards.readers._decoded import ENV, GROUPS
from shufflepoint._shards.readers._group import DecodedGroup

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

ROWS, GROUP = 60, 10


@pytest.fixture()
def corpus(tmp_path, monkeypatch):
    monkeypatch.setattr(parquet_reader, "_UNIT_ROWS", 1)  # each row group its own decode unit
    for shard in range(6):
        ids = np.arange(shard * ROWS, (shard + 1) * ROWS)
        table = pa.table({"id": ids, "text": [f"{i:08d}" * 20 for i in ids]})
        pq.write_table(table, tmp_path / f"{shard}.parquet", row_group_size=GROUP)
    shards = shufflepoint.Shards(str(tmp_path / "*.parquet"), cache_dir=str(tmp_path / "c"), progress=False,
                                 max_open=6)
    group_bytes = DecodedGroup(pq.read_table(tmp_path / "0.parquet").slice(0, GROUP), pa).nbytes
    saved = GROUPS.limit
    GROUPS.set_limit(0)  # groups of files other tests left open go
    yield shards, group_bytes
    GROUPS.set_limit(saved)


def _held_as_counted() -> int:
    return sum(int(t.nbytes) for t in GROUPS._tables.values())


@pytest.mark.parametrize("groups_kept", [0, 1, 3, 7])
def test_the_budget_holds_across_every_open_file(corpus, groups_kept):
    shards, group_bytes = corpus
    GROUPS.set_limit(int(group_bytes * groups_kept + group_bytes // 2))
    rng = np.random.default_rng(groups_kept)
    for step in range(40):
        indices = rng.integers(0, len(shards), size=int(rng.integers(1, 30)))
        batch = shards.__getitems__(indices.tolist()) if step % 2 else [shards[int(i)] for i in indices]
        assert [row["id"] for row in batch] == indices.tolist()  # rows stay right at any budget
        assert [row["text"] for row in batch] == [f"{i:08d}" * 20 for i in indices.tolist()]
        assert GROUPS.held == _held_as_counted() <= GROUPS.limit
        assert len(GROUPS._tables) <= groups_kept
    assert groups_kept == 0 or len(GROUPS._tables) == groups_kept  # the budget is used, not just respected
    flat_held = sum(int(opened._flat.held.sum()) for opened in shards._access._opened.values())
    assert flat_held == len(GROUPS._tables)  # a file's flat columns hold exactly its kept groups


def test_groups_the_budget_lets_go_leave_the_flat_columns(corpus):
    """A batch is one index per column over a file's flat columns (``_flat``): what they hold follows
    the budget, and a file whose last group goes gives its arrays back."""
    shards, group_bytes = corpus
    GROUPS.set_limit(100 * group_bytes)
    everything = list(range(len(shards)))
    assert [row["id"] for row in shards.__getitems__(everything)] == everything
    opened = list(shards._access._opened.values())
    assert all(o._flat.complete for o in opened)
    GROUPS.set_limit(0)
    assert not any(o._flat.held.any() for o in opened)
    assert all(column is None for o in opened for column in o._flat._objects)
    assert [row["text"] for row in shards.__getitems__(everything[::-7])] == \
        [f"{i:08d}" * 20 for i in everything[::-7]]


def test_a_closed_file_gives_its_groups_back(corpus):
    shards, group_bytes = corpus
    GROUPS.set_limit(100 * group_bytes)
    shards.__getitems__(list(range(len(shards))))
    assert len(GROUPS._tables) >= 36
    for opened in list(shards._access._opened.values()):
        opened.close()
    assert GROUPS.held == _held_as_counted() == 0


def test_the_budget_comes_from_the_environment():
    code = "from shufflepoint._shards.readers._decoded import GROUPS; print(GROUPS.limit)"
    run = lambda value: subprocess.run([sys.executable, "-c", code], env={**os.environ, ENV: value},  # noqa: E731
                                       capture_output=True, text=True)
    assert run("12345").stdout.strip() == "12345"
    assert run("").stdout.strip() == str(256 << 20)
    refused = run("12MB")
    assert refused.returncode != 0 and ENV in refused.stderr and "'12MB'" in refused.stderr
    with pytest.raises(ValueError, match="limit: found -1"):
        GROUPS.set_limit(-1)


def _laid_out(shards, indices):
    """The batch as the layout across files reads it (None where it declines)."""
    indices = np.asarray(indices, dtype=np.int64)
    where = np.searchsorted(shards._ends, indices, side="right")
    return shards._access.laid_out(where, indices - shards._starts[where])


def test_a_batch_across_files_is_one_index_per_column(corpus):
    """Issue 35: the files' flat columns lie side by side in one arena (``_flat.Layout``), so a batch
    across files is read with one index per column, the same values and types as file by file."""
    shards, group_bytes = corpus
    GROUPS.set_limit(100 * group_bytes)
    everything = np.arange(len(shards))
    shards.read_batch(everything)  # every group decoded and laid out
    picked = np.random.default_rng(0).permutation(everything)[:97]
    found = _laid_out(shards, picked)
    assert found is not None and found.names == ("id", "text")
    assert found.columns[0].dtype == np.int64 and found.columns[0].tolist() == picked.tolist()
    assert found.columns[1] == [f"{i:08d}" * 20 for i in picked.tolist()]
    by_file = shufflepoint.Shards([shards.index.url(s) for s in range(len(shards.index.shards))],
                                  cache_dir=shards.cache_dir, progress=False, max_open=6)
    by_file._access.laid_out = lambda *_: None  # the file-by-file path, for the same batch
    expected = by_file.read_batch(picked)
    assert expected.names == found.names and expected.columns[1] == found.columns[1]
    assert expected.columns[0].dtype == found.columns[0].dtype and (expected.columns[0] == found.columns[0]).all()
    assert shards.read_batch(picked).samples() == [shards[int(i)] for i in picked]


def test_the_arena_follows_the_budget_and_starts_over(corpus, monkeypatch):
    """Groups the budget lets go leave the arena (their rows no longer held, their values no longer
    referenced); files that do not fit the arena start the next one, and every batch stays right."""
    shards, group_bytes = corpus
    GROUPS.set_limit(100 * group_bytes)
    shards.read_batch(np.arange(len(shards)))
    arena = shards._access._arena.arena
    assert arena.held[:len(shards)].all() and arena.live == 6
    GROUPS.set_limit(0)
    assert arena.live == 0 and not arena.held.any()
    assert all(column is None or all(v is None for v in column) for column in arena._objects)
    assert (shards._access._arena.base == -1).all()
    shards._access._arena.capacity = 2 * ROWS  # two files an arena: a batch over three files reads file by file
    shards._access._arena.arena = None
    GROUPS.set_limit(100 * group_bytes)
    rng = np.random.default_rng(1)
    served = 0
    for _ in range(30):
        picked = rng.integers(0, len(shards), size=int(rng.integers(1, 40)))
        served += _laid_out(shards, picked) is not None
        assert [row["id"] for row in shards.__getitems__(picked.tolist())] == picked.tolist()
        assert GROUPS.held == _held_as_counted() <= GROUPS.limit
    assert served  # batches inside the current arena's files are read laid out


def test_files_that_differ_are_read_file_by_file(tmp_path):
    """A column that is int in one file and float in another, or a file with other columns: the
    arena declines (each file keeps its own arrays) and the rows are the per-row reads."""
    pq.write_table(pa.table({"x": np.arange(5), "s": list("abcde")}), tmp_path / "0.parquet")
    pq.write_table(pa.table({"x": np.arange(5) + 0.5, "s": list("fghij")}), tmp_path / "1.parquet")
    pq.write_table(pa.table({"y": np.arange(5), "s": list("klmno")}), tmp_path / "2.parquet")
    for files in (["0", "1"], ["0", "2"]):
        shards = shufflepoint.Shards([str(tmp_path / f"{f}.parquet") for f in files], cache_dir=str(tmp_path / "c"),
                                     progress=False)
        everything = list(range(len(shards)))
        shards.read_batch(everything)
        assert _laid_out(shards, everything[::-1]) is None
        assert shards.read_batch(everything[::-1]).samples() == [shards[i] for i in everything[::-1]]
