"""``Packed`` under the ``spans`` deal lays its documents along the ranks' stretches (``packed_layout``): each
rank reads its own stretch's shards every epoch (give or take the tokens between its rows' edges and the
nearest shard boundaries), and every epoch still holds every document's tokens once, the tail dropped."""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from shufflepoint._shards.corpora.packed.packed import Packed
from shufflepoint._shards.corpora.packed.stretches import WORLDS, epoch_of, table_key

EOS = 10**6 + 2


class Sharded(torch.utils.data.Dataset):
    """Documents in shards (``shard_rows``), as ``Shards`` holds them; document d's tokens are d*1000 + i."""

    def __init__(self, lengths, rows):
        self.docs = [{"input_ids": list(range(d * 1000, d * 1000 + n))} for d, n in enumerate(lengths)]
        self.shard_rows, self.fingerprint = np.asarray(rows, dtype=np.int64), "shards:test"

    def __len__(self):
        return len(self.docs)

    def __getitem__(self, index):
        return self.docs[index]


@st.composite
def corpora(draw):
    rows = draw(st.lists(st.integers(0, 6), min_size=1, max_size=8))
    lengths = draw(st.lists(st.integers(0, 30), min_size=sum(rows), max_size=sum(rows)))
    return rows, lengths


@settings(max_examples=150, deadline=None)
@example(corpus=([3, 5, 2, 4], [3, 5, 2, 4, 1, 7, 9, 2, 2, 8, 3, 6, 1, 4]), seq_len=4, eos=False, world=2, seed=0,
         block=3)
@given(corpora(), st.integers(1, 9), st.booleans(), st.integers(1, 5), st.integers(0, 2**64 - 1), st.integers(1, 16))
def test_each_rank_reads_its_own_stretch_every_epoch_and_each_epoch_holds_every_token_once(corpus, seq_len, eos,
                                                                                         world, seed, block):
    rows, lengths = corpus
    framed = [n + int(eos) for n in lengths]
    if sum(framed) < seq_len:
        return
    packed = Packed(Sharded(lengths, rows), seq_len, eos=EOS if eos else None, progress=False)
    n = len(packed)
    laid = np.flatnonzero(np.asarray(rows) > 0)  # the shards in their own order
    shard_start = np.concatenate(([0], np.cumsum(rows)))
    edges = packed._document_edges(world) if packed._bound else None
    base, extra = divmod(n, world)
    starts = [r * base + min(r, extra) for r in range(world + 1)]  # the spans deal's stretches of rows
    stretch_of_epoch = []
    for epoch in range(3):
        order = packed.epoch_order(seed, epoch, block, stretches=world)
        indices = order.take(np.arange(n))
        assert epoch_of(int(indices[0]) // n) == (epoch, world) and order.version == 2
        covered = {}
        for index in indices.tolist():
            for d, a, b in packed.segments(index):
                covered.setdefault(d, []).append((a, b))
        whole = 0
        for spans in covered.values():  # each document's tokens at most once, in one run from its start
            spans.sort()
            assert spans[0][0] == 0 and all(x[1] == y[0] for x, y in zip(spans, spans[1:], strict=False))
            whole += spans[-1][1]
        assert whole == n * seq_len and sum(framed) - whole < seq_len + max(framed)  # only the tail is dropped
        edges = packed._document_edges(world)
        laid_documents = np.concatenate([np.arange(shard_start[s], shard_start[s + 1]) for s in laid]).astype(int)
        stretch = {int(d): int(np.searchsorted(edges, k, side="right") - 1) for k, d in enumerate(laid_documents)}
        stretch_of_epoch.append(stretch)
        token_edge = np.concatenate(([0], np.cumsum([framed[d] for d in laid_documents])))[edges]
        boundaries = np.concatenate(([0], np.cumsum([sum(framed[shard_start[s]:shard_start[s + 1]]) for s in laid])))
        for k in range(1, world):  # an inner edge: the shard boundary nearest the rank's first token
            target = starts[k] * seq_len
            after = min(max(int(np.searchsorted(boundaries, target)), 1), len(boundaries) - 1)
            assert abs(int(token_edge[k]) - target) <= min(target - boundaries[after - 1], boundaries[after] - target)
        shard_of = np.searchsorted(shard_start, np.arange(len(lengths)), side="right") - 1
        tokens_of = [sum(framed[shard_start[x]:shard_start[x + 1]]) for x in laid]
        stretch_shards = [[int(x) for x in laid if stretch[int(shard_start[x])] == r] for r in range(world)]
        pinned = {x for shards in stretch_shards for x in shards[:1] + shards[-1:]}
        for r in range(world):
            foreign = [(int(shard_of[d]), b - a) for index in indices[starts[r]:starts[r + 1]].tolist()
                       for d, a, b in packed.segments(index) if stretch[d] != r]
            near = [abs(int(token_edge[k]) - starts[k] * seq_len) for k in (r, r + 1)]
            assert sum(t for _, t in foreign) <= sum(near)  # only what lies between its rows' edges and its stretch's
            if min(tokens_of) > 0 and all(stretch_shards):  # and only from the neighbours' pinned end shards
                assert {x for x, _ in foreign} <= pinned
    assert stretch_of_epoch[0] == stretch_of_epoch[1] == stretch_of_epoch[2]  # the same shards, every epoch


def test_laid_and_unlaid_indices_never_meet():
    for epoch in (0, 1, WORLDS - 1):
        assert epoch_of(table_key(epoch, None)) == (epoch, None)
    for epoch, world in ((0, 1), (0, WORLDS - 1), (5, 3), (2**30, 7)):
        key = table_key(epoch, world)
        assert key >= WORLDS and epoch_of(key) == (epoch, world)


@settings(max_examples=40, deadline=None)
@given(st.lists(corpora(), min_size=2, max_size=2), st.integers(2, 8), st.integers(1, 4), st.integers(0, 2**32),
       st.integers(1, 16))
def test_a_mixture_of_packed_sources_reads_the_same_shards_of_each_in_every_epoch(sources, seq_len, parts, seed,
                                                                                  block):
    """Weights = rows under spans: part r reads each Packed source's rows laid along the parts, so the same
    shards of it in epochs 0 and 1 (the pinned edge shards included)."""
    from shufflepoint._shards.corpora.mixture.mixture import Mixture
    from shufflepoint._shards.corpora.mixture.order import decode, offsets
    from shufflepoint._shards.corpora.mixture.stretches import stretches

    if any(sum(lengths) < seq_len * 4 * parts for _, lengths in sources):
        return
    packs = [Packed(Sharded(lengths, rows), seq_len, progress=False) for rows, lengths in sources]
    mixture = Mixture([(packed, len(packed)) for packed in packs])
    starts, lengths = stretches(mixture.samples_per_epoch, parts)
    read = []
    for epoch in range(2):
        flat = mixture.epoch_order(seed, epoch, block, stretches=parts).take(np.arange(mixture.samples_per_epoch))
        source, index = decode(offsets(mixture.lengths), mixture.lengths, flat)
        shards = []
        for r in range(parts):
            held = set()
            for s, i in zip(source[starts[r]:starts[r] + lengths[r]].tolist(),
                            index[starts[r]:starts[r] + lengths[r]].tolist(), strict=True):
                bounds = np.concatenate(([0], np.cumsum(sources[s][0])))
                held |= {(s, int(np.searchsorted(bounds, d, side="right") - 1)) for d, _, _ in packs[s].segments(i)}
            shards.append(held)
        read.append(shards)
    assert read[0] == read[1]


@settings(max_examples=40, deadline=None)
@given(corpora(), st.integers(2, 6), st.lists(st.integers(1, 4), min_size=2, max_size=2), st.integers(0, 2**32),
       st.integers(1, 16), st.booleans())
def test_a_mixture_reads_its_packed_sources_pass_after_pass_the_same_rows_on_any_world(corpus, seq_len, weights,
                                                                                    seed, block, sharded):
    """A Mixture's Packed sources (sharded: laid along every shard, ``EVERY_RUN``; else along one stretch): an
    epoch reads the same packed rows on 1 to 4 parts, and by every epoch's end each source's passes (its packed
    epochs) were read whole, one after another: the (pass, row) pairs read are every row of the passes before
    and some of the last, none twice."""
    from collections import Counter

    from shufflepoint._shards.corpora.mixture.mixture import Mixture
    from shufflepoint._shards.corpora.mixture.order import decode, offsets

    rows, lengths = corpus
    if sum(lengths) < seq_len:
        return
    other = [{"input_ids": list(range(50 * d, 50 * d + 3 + d % 4))} for d in range(12)]
    packs = [Packed(Sharded(lengths, rows) if sharded else Sharded(lengths, rows).docs, seq_len, progress=False),
             Packed(other, seq_len, progress=False)]
    if any(len(packed) == 0 for packed in packs):
        return
    mixture = Mixture(list(zip(packs, weights, strict=True)), samples_per_epoch=sum(len(p) for p in packs) + 3)
    read = {}
    for parts in range(1, 5):
        epochs = []
        for epoch in range(3):
            flat = mixture.epoch_order(seed, epoch, block, stretches=parts).take(np.arange(mixture.samples_per_epoch))
            source, index = decode(offsets(mixture.lengths), mixture.lengths, flat)
            keys, row = np.divmod(index, np.asarray(mixture.lengths)[source])
            epochs.append(Counter((int(s), epoch_of(int(k))[0], int(r))
                                  for s, k, r in zip(source, keys, row, strict=True)))
        read[parts] = epochs
    assert all(epochs == read[1] for epochs in read.values())
    seen = Counter()
    for epoch in read[1]:
        seen.update(epoch)
        assert max(seen.values()) == 1
        for s, packed in enumerate(packs):
            passes = sorted({p for (source, p, _) in seen if source == s})
            assert passes == list(range(len(passes)))  # pass after pass
            for p in passes[:-1]:
                assert sum(1 for (source, q, _) in seen if (source, q) == (s, p)) == len(packed)
