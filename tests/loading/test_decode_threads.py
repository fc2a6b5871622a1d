"""``DataLoader(decode_threads=k)``: a batch's samples are read in k threads at once, and nothing of the order
changes (the same batches, with or without threads, workers or a keyed transform, and after a resume)."""

from __future__ import annotations

import threading

import pytest
import torch

import shufflepoint


class Gate(torch.utils.data.Dataset):
    """Each read waits until ``width`` reads are in flight at once: only concurrent reads pass the gate."""

    def __init__(self, n: int, width: int, timeout: float = 10) -> None:
        self.n, self.barrier = n, threading.Barrier(width, timeout=timeout)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> int:
        self.barrier.wait()
        return index


def test_a_batch_is_read_in_threads_at_once():
    loader = shufflepoint.DataLoader(Gate(32, 4), batch_size=4, seed=1, decode_threads=4)
    assert sorted(i for batch in loader for i in batch.tolist()) == list(range(32))
    with pytest.raises(threading.BrokenBarrierError):  # one at a time never opens a gate of 2
        next(iter(shufflepoint.DataLoader(Gate(4, 2, timeout=0.5), batch_size=4, seed=1)))


def flip(sample, rng):
    return sample * 1000 + int(rng.integers(0, 1000))


@pytest.mark.parametrize("options", [{}, {"num_workers": 2}, {"transform": flip}, {"num_workers": 2,
                                                                                     "transform": flip}])
def test_the_batches_are_those_without_threads(options):
    data = list(range(103))
    plain = [b.tolist() for b in shufflepoint.DataLoader(data, batch_size=6, seed=9, **options)]
    threaded = shufflepoint.DataLoader(data, batch_size=6, seed=9, decode_threads=3, **options)
    first = [b.tolist() for _, b in zip(range(5), threaded, strict=False)]
    state = threaded.state_dict()
    resumed = shufflepoint.DataLoader(data, batch_size=6, seed=9, decode_threads=5, **options)
    resumed.load_state_dict(state)
    assert first + [b.tolist() for b in resumed] == plain


@pytest.mark.parametrize(("value", "error", "text"), [
    (-1, ValueError, r"decode_threads: found -1"), (True, TypeError, r"decode_threads: found True"),
    (2.5, TypeError, r"decode_threads: found 2\.5")])
def test_a_bad_thread_count_is_refused_by_name(value, error, text):
    with pytest.raises(error, match=text):
        shufflepoint.DataLoader(list(range(4)), batch_size=2, decode_threads=value)


def test_threads_with_global_seeding_or_a_batch_reader_are_refused(tmp_path):
    with pytest.raises(ValueError, match=r"decode_threads: found 2\n  expected: 0 with seed_per_sample=True"):
        shufflepoint.DataLoader(list(range(4)), batch_size=2, decode_threads=2, seed_per_sample=True)
    pytest.importorskip("pyarrow")
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"x": list(range(10))}), tmp_path / "a.parquet")
    corpus = shufflepoint.Shards(str(tmp_path / "*.parquet"), progress=False, cache_dir=str(tmp_path / "c"))
    with pytest.raises(ValueError, match=r"decode_threads: found 2\n  expected: 0 for a Shards"):
        shufflepoint.DataLoader(corpus, batch_size=2, decode_threads=2)
