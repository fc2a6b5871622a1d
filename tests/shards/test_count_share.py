"""The arithmetic of per-shard token counts: who counts which shard (``count_share.Share``), the totals a
process holds (``shard_counts.ShardCounts``) against every count in memory (``FullCounts``), and the
exchange of totals, for any corpus, world and seed."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shufflepoint._shards.corpora.packed.rows import EpochTable
from shufflepoint._shards.counting import count_files
from shufflepoint._shards.counting.count_share import Share
from shufflepoint._shards.counting.shard_counts import FullCounts, ShardCounts

shard_rows = st.lists(st.integers(0, 12), min_size=1, max_size=20)


class Sharded:
    """A stand-in corpus with shards: the epoch table reads only ``shard_rows``."""

    def __init__(self, rows):
        self.shard_rows = np.asarray(rows, dtype=np.int64)

    def __len__(self):
        return int(self.shard_rows.sum())

    def __getitem__(self, index):
        raise AssertionError("the arithmetic reads no document")


def split(counts, rows):
    starts = np.concatenate(([0], np.cumsum(rows))).astype(int)
    return [counts[a:b] for a, b in zip(starts[:-1], starts[1:], strict=True)]


def shard_counts(counts, rows, extra=0, loads=None):
    parts = split(counts, rows)

    def load(shard, total, digest):
        if loads is not None:
            loads.append(shard)
        assert int(parts[shard].sum()) == total and count_files.shard_digest(parts[shard]) == digest
        return parts[shard]

    totals = np.array([int(p.sum()) for p in parts], dtype=np.int64)
    digests = [count_files.shard_digest(p) for p in parts]
    return ShardCounts(np.asarray(rows), totals, digests, load).framed(extra)


@settings(max_examples=100, deadline=None)
@given(rows=shard_rows, world=st.integers(1, 9), data=st.data())
def test_every_shard_is_counted_by_exactly_one_rank_a_run_of_about_its_bytes(rows, world, data):
    rows = np.asarray(rows, dtype=np.int64)
    sizes = np.asarray(data.draw(st.lists(st.integers(1, 10**6), min_size=rows.size, max_size=rows.size)), np.int64)
    owners = [Share(rank, world).owners(rows, sizes) for rank in range(world)]
    assert all((o == owners[0]).all() for o in owners)  # every rank computes the same deal, alone
    owner = owners[0]
    assert owner.shape == rows.shape and ((owner >= 0) & (owner < world)).all()
    assert (np.diff(owner) >= 0).all()  # runs of consecutive shards, in order: what Packed lays each rank on
    weight = sizes * (rows > 0)
    if weight.sum():
        total, biggest = int(weight.sum()), int(weight.max())
        for rank in range(world):  # each rank counts about its stretch of the corpus's bytes
            counted = int(weight[owner == rank].sum())
            assert abs(counted - total / world) <= biggest, (rank, counted, total / world)


@settings(max_examples=100, deadline=None)
@given(rows=shard_rows, data=st.data(), extra=st.integers(0, 2), world=st.integers(1, 6))
def test_per_shard_totals_give_what_every_count_in_memory_gives(rows, data, extra, world):
    """Totals exchanged from any world's shares are the totals; the per-document sizes, the runs' tokens, and
    the digest are the same as from the whole array; the epoch tables (rows of every epoch) agree."""
    documents = sum(rows)
    counts = np.asarray(data.draw(st.lists(st.integers(0, 9), min_size=documents, max_size=documents)), np.int64)
    rows_array = np.asarray(rows, dtype=np.int64)
    parts = split(counts, rows)
    owner = Share(0, world).owners(rows_array)
    gathered = [{s: (int(parts[s].sum()), count_files.shard_digest(parts[s])) for s in np.flatnonzero(owner == r)}
                for r in range(world)]  # what each rank contributes to the all_gather
    merged = {s: v for part in gathered for s, v in part.items()}
    assert sorted(merged) == list(range(len(rows)))
    totals = np.array([merged[s][0] for s in range(len(rows))], dtype=np.int64)
    whole = FullCounts(counts).framed(extra)
    loads: list[int] = []
    lazy = shard_counts(counts, rows, extra, loads)
    assert (lazy.totals == totals).all() and lazy.tokens == whole.tokens == int(counts.sum()) + extra * documents
    assert lazy.digest == count_files.corpus_digest(totals, [merged[s][1] for s in range(len(rows))])
    shuffle_block = data.draw(st.integers(1, 16))
    seed, epoch = data.draw(st.integers(0, 2**64 - 1)), data.draw(st.integers(0, 3))
    tables = [EpochTable(Sharded(rows), c, seed, shuffle_block, epoch) for c in (whole, lazy)]
    assert tables[0].block_token_start.tolist() == tables[1].block_token_start.tolist()
    assert not loads  # the epoch table reads totals only, no per-document count
    begin = data.draw(st.integers(0, max(whole.tokens - 1, 0)))
    end = data.draw(st.integers(begin, whole.tokens))
    assert tables[0].pieces(begin, end) == tables[1].pieces(begin, end)
    asked = np.asarray(data.draw(st.lists(st.integers(0, max(documents - 1, 0)), max_size=10)), np.int64)
    if documents:
        assert lazy.sizes(asked).tolist() == whole.sizes(asked).tolist()


def test_the_counts_kept_in_memory_are_bounded_by_documents(monkeypatch):
    from shufflepoint._shards.counting import shard_counts as module

    monkeypatch.setattr(module, "_KEPT_DOCUMENTS", 10)
    rows = [4] * 6
    loads: list[int] = []
    lazy = shard_counts(np.arange(24, dtype=np.int64), rows, 0, loads)
    assert lazy.sizes(np.arange(24)).tolist() == list(range(24))
    assert sum(c.size for c in lazy._kept.values()) <= 10 and loads == list(range(6))
    lazy.sizes(np.array([23]))
    assert loads == list(range(6))  # the last shard is still kept


@pytest.mark.parametrize("world", [2, 3, 5])
def test_resolvers_of_every_rank_count_their_share_and_agree_after_the_exchange(tmp_path, monkeypatch, world):
    """The ranks' Resolvers, the exchange stood in for by the union of what each counted: every shard counted by
    one rank, every rank then holds the totals and digest one process counting everything finds."""
    import shufflepoint
    from corpus_files import jsonl_documents
    from shufflepoint._shards.counting import count_share, shard_counts, token_counts

    jsonl_documents(str(tmp_path / "data"), 9, rows=(0, 6))

    def corpus(rank):
        return shufflepoint.Shards(str(tmp_path / "data" / "*.jsonl"), cache_dir=str(tmp_path / f"c{rank}"),
                                   progress=False)

    source = token_counts.TokenSource.checked(None, None, None)
    alone = count_share.Resolver(corpus("alone"), source.count, source.identity, 1, False).finish(None)
    counted: dict[int, list[tuple[int, int]]] = {}
    parts = {}
    resolvers = []
    original = shard_counts.count_ranges
    for rank in range(world):
        resolver = count_share.Resolver(corpus(rank), source.count, source.identity, 1, False)
        monkeypatch.setattr(shard_counts, "count_ranges",
                            lambda d, c, ranges, *a, rank=rank: counted.setdefault(rank, []).extend(ranges)
                            or original(d, c, ranges, *a))
        share = count_share.Share(rank, world)
        mine = resolver.unknown[share.owners(resolver.rows, resolver.sizes)[resolver.unknown] == rank]
        parts[rank] = resolver._fill(mine, None)
        monkeypatch.setattr(shard_counts, "count_ranges", original)
        resolvers.append((resolver, share))
    union = {s: v for part in parts.values() for s, v in part.items()}
    monkeypatch.setattr(count_share, "distributed", lambda: True)
    monkeypatch.setattr(count_share, "_exchange", lambda mine: union)
    for resolver, share in resolvers:
        found = resolver.finish(share)
        assert found.totals.tolist() == alone.totals.tolist() and found.digest == alone.digest
    ranges = sorted(r for rs in counted.values() for r in rs)
    ends = np.cumsum(alone.rows).tolist()
    assert ranges == [(a, b) for a, b in zip([0] + ends[:-1], ends, strict=True) if b > a]  # each by one rank
