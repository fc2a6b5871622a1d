"""The loader tells a ``PrefetchesDealt`` dataset how densely this rank reads where its upcoming indices
lie: its positions over the span they cover (1.0 for a stretch of its own, ~1/k when k ranks share every
global batch), the first chunk (read at once) included: a dense rank fetches its first rows in few GETs."""

from __future__ import annotations

import types

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import shufflepoint
from shufflepoint._core.capabilities import PrefetchesDealt
from shufflepoint._loading.serving import density


class Told:
    def __init__(self, rows: int) -> None:
        self.rows, self.calls = rows, []

    def __len__(self) -> int:
        return self.rows

    def __getitem__(self, index: int) -> int:
        return index

    def prefetch(self, indices) -> None:
        raise AssertionError("prefetch_dealt is offered: the loader must use it")

    def prefetch_dealt(self, indices, density: float) -> None:
        self.calls.append((len(indices), density))


@given(st.integers(0, 10**6), st.integers(1, 500), st.integers(1, 16))
def test_density_is_the_positions_over_the_span_they_cover(start, count, step):
    positions = start + step * np.arange(count, dtype=np.int64)
    expected = 1.0 if count == 1 else count / ((count - 1) * step + 1)
    assert abs(density(positions) - expected) < 1e-12
    assert density(np.random.default_rng(count).permutation(positions)) == density(positions)


def test_every_chunk_the_first_included_is_announced_with_the_rank_s_own_density():
    data = Told(5000)
    assert isinstance(data, PrefetchesDealt)
    for _ in shufflepoint.DataLoader(data, batch_size=100, seed=1):
        pass
    assert data.calls[0][0] == 256  # the chunk read at once is small
    assert len(data.calls) > 2 and all(d == 1.0 for _, d in data.calls)  # one rank: a stretch of its own
    assert sum(n for n, _ in data.calls) == 5000


def test_a_rank_of_a_strided_deal_is_announced_sparse_from_its_first_chunk():
    data = Told(6000)
    for _ in shufflepoint.DataLoader(data, batch_size=100, seed=1, rank=1, world_size=3, deal="strided"):
        pass
    assert data.calls and all(abs(d - 1 / 3) < 0.01 for _, d in data.calls), data.calls
    assert sum(n for n, _ in data.calls) == 2000


def test_a_mixture_and_packed_tell_their_shards_how_densely_the_rank_reads(tmp_path):
    """``ReadsAtDensity`` passes through the compositions: a token source of a Mixture, and the documents of a
    Packed, learn the rank's density before the pass, so their own reads join gaps (or not) as read-ahead does."""
    for s in range(2):
        np.arange(4096, dtype=np.uint16).tofile(tmp_path / f"t{s}.bin")
    sources = [shufflepoint.Shards(str(tmp_path / f"t{s}.bin"), seq_len=8, progress=False) for s in range(2)]
    mixture = shufflepoint.Mixture([(sources[0], 0.5), (sources[1], 0.5)])
    next(iter(shufflepoint.DataLoader(mixture, batch_size=4, seed=1, rank=1, world_size=4, deal="strided")))
    assert all(abs(source._access._density - 0.25) < 0.01 for source in sources), [s._access._density for s in sources]
    next(iter(shufflepoint.DataLoader(mixture, batch_size=4, seed=1)))
    assert all(source._access._density == 1.0 for source in sources)
    documents = FakeDocuments()
    packed = shufflepoint.Packed(documents, 8)
    next(iter(shufflepoint.DataLoader(packed, batch_size=2, seed=1, rank=0, world_size=2, deal="strided")))
    assert documents.told and abs(documents.told[-1] - 0.5) < 0.05, documents.told  # ~10 rows each: ~1/2


class FakeDocuments:
    """Documents that record what density they are told (``ReadsAtDensity``)."""

    def __init__(self) -> None:
        self.told: list[float] = []

    def __len__(self) -> int:
        return 40

    def __getitem__(self, index: int) -> dict:
        return {"input_ids": list(range(1, 3 + index % 5))}

    def _loader_hooks(self):  # ReadsAtDensity, as Shards offers it behind its hooks
        return types.SimpleNamespace(read_at_density=self.told.append)
