"""``Packed(..., tokenize=)`` tokenizes each document once per epoch per rank (issue 25.2).

A document cut by a batch edge is needed again by the next batch of the rank; ``Packed`` keeps the
one document that runs on past a batch (memory: one document, not the corpus), so it is not
tokenized again. Counted here by a tokenizer that tallies its calls per document, across the
loader's worker processes too (a shared array, inherited by the forked workers).
"""

from __future__ import annotations

import multiprocessing
import warnings

import numpy as np
import pytest

import shufflepoint
from shufflepoint._shards.corpora.packed.packed import Packed
from shufflepoint._shards.corpora.packed.stretches import table_key

# mostly short documents, some that span several batches of 2 rows of 16 tokens (up to 150 tokens)
LENGTHS = np.random.default_rng(7).choice([3, 9, 14, 20, 31, 47, 150], size=120, p=[.2, .2, .2, .15, .1, .1, .05])


def corpus():
    return [{"id": d, "text": "".join(chr(97 + (d + t) % 26) for t in range(n))} for d, n in enumerate(LENGTHS)]


class CountingTokenizer:
    """Bytes as token ids; ``calls[d]`` counts the calls on document d (shared with forked workers)."""

    def __init__(self, documents: int) -> None:
        self.calls = multiprocessing.get_context("fork").Array("i", documents)
        self.counting = False

    def __call__(self, sample):
        if self.counting:
            with self.calls.get_lock():
                self.calls[sample["id"]] += 1
        return list(sample["text"].encode())

    def tally(self) -> np.ndarray:
        return np.frombuffer(self.calls.get_obj(), dtype=np.int32).copy()


def an_epoch(tokenizer, **loader_args):
    """Calls per document over one epoch (construction's counting pass not counted)."""
    packed = Packed(corpus(), 16, tokenize=tokenizer, tokenizer="bytes", eos=0, progress=False)
    tokenizer.counting = True
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a shuffle_block larger than a rank's share, said by the loader
        loader = shufflepoint.DataLoader(packed, 2, seed=3, shuffle_block=16, **loader_args)
    rows = sum(len(batch["input_ids"]) for batch in loader)
    return tokenizer.tally(), rows, packed


def touched(packed, rank=0, world_size=1, served=None, laid=True):
    """The documents this rank's rows of epoch 0 hold (the dropped tail is read by nobody); ``laid``: as the
    spans deal of one process lays them (packed_layout), else unlaid (the strided deal's)."""
    rows = range(rank, len(packed), world_size)[:served]
    base = table_key(0, 1) * len(packed) if laid else 0
    return {d for row in rows for d, _, _ in packed.segments(base + row)}


def test_each_document_is_tokenized_once_per_epoch_without_workers():
    calls, rows, packed = an_epoch(CountingTokenizer(len(LENGTHS)))
    assert rows == len(packed) and max(LENGTHS) > 4 * 16  # documents that span several batches
    assert set(np.flatnonzero(calls).tolist()) == touched(packed)
    assert calls.max() == 1


@pytest.mark.parametrize("deal", ["strided", "spans"])
def test_each_rank_tokenizes_its_documents_once(deal):
    for rank in range(2):
        # drop_last: a padded last batch would serve the epoch's first rows again (and read their documents)
        calls, rows, packed = an_epoch(CountingTokenizer(len(LENGTHS)), rank=rank, world_size=2, deal=deal,
                                       drop_last=True)
        assert rows == len(packed) // 4 * 2
        if deal == "strided":
            assert set(np.flatnonzero(calls).tolist()) == touched(packed, rank, 2, rows, laid=False)
        assert calls.max() == 1


def test_workers_together_tokenize_a_document_about_once():
    calls, rows, packed = an_epoch(CountingTokenizer(len(LENGTHS)), num_workers=2)
    assert rows == len(packed)
    # a document cut by a batch edge is read by both workers (each keeps what runs past its own batch),
    # so at most one call more per batch edge: 1 + (mean document / batch, in tokens) calls per document
    batches = -(-rows // 2)
    assert len(touched(packed)) <= calls.sum() <= len(touched(packed)) + batches - 1
    assert calls.max() <= 2  # a long document: once per worker, however many batches it spans
