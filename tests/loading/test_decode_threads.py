"""``DataLoader(decode_threads=k)``: a batch's samples are read in k threads at once (a dataset that reads a batch
in one call, ``Shards``: their transforms, the loader's or the corpus's own), and nothing of the order changes (the
same batches, with or without threads, workers or a keyed transform, and after a resume)."""

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


def corpus_of(tmp_path, n=40, **kwargs):
    """A Parquet corpus of rows {"x": i} in 4 shards (a batch read in one call: ``ReadsBatches``)."""
    pytest.importorskip("pyarrow")
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = tmp_path / "rows"
    if not folder.exists():
        folder.mkdir()
        for shard in range(4):
            rows = list(range(shard * n // 4, (shard + 1) * n // 4))
            pq.write_table(pa.table({"x": rows}), folder / f"{shard}.parquet")
    return shufflepoint.Shards(str(folder / "*.parquet"), progress=False, cache_dir=str(tmp_path / "c"), **kwargs)


def test_threads_with_global_seeding_or_a_batch_reader_with_nothing_to_decode_are_refused(tmp_path):
    with pytest.raises(ValueError, match=r"decode_threads: found 2\n  expected: 0 with seed_per_sample=True"):
        shufflepoint.DataLoader(list(range(4)), batch_size=2, decode_threads=2, seed_per_sample=True)
    with pytest.raises(ValueError, match=r"decode_threads: found 2\n  expected: 0 for a Shards without a transform"
                                         r"\n  why: .*\n  fix: pass transform="):
        shufflepoint.DataLoader(corpus_of(tmp_path), batch_size=2, decode_threads=2)


class GateTransform:
    """A transform (the loader's, ``(sample, rng)``, or a corpus's own, ``(sample)``) that waits until ``width``
    samples are being transformed at once: only a batch decoded in threads passes it."""

    def __init__(self, width: int, timeout: float = 10) -> None:
        self.width, self.timeout = width, timeout
        self.barrier = threading.Barrier(width, timeout=timeout)

    def __call__(self, sample, rng=None):
        self.barrier.wait()
        return {"x": sample["x"] * 1000 + (int(rng.integers(0, 1000)) if rng is not None else 0)}

    def __getstate__(self):
        return {"width": self.width, "timeout": self.timeout}

    def __setstate__(self, state):
        self.__init__(state["width"], state["timeout"])


def test_a_batch_read_in_one_call_is_transformed_in_threads_at_once(tmp_path):
    corpus = corpus_of(tmp_path)
    loader = shufflepoint.DataLoader(corpus, batch_size=4, seed=1, transform=GateTransform(4), decode_threads=4)
    assert sorted(x // 1000 for batch in loader for x in batch["x"].tolist()) == list(range(40))
    with pytest.raises(threading.BrokenBarrierError):  # one sample at a time never opens a gate of 2
        next(iter(shufflepoint.DataLoader(corpus, batch_size=4, seed=1, transform=GateTransform(2, 0.5))))
    own = corpus_of(tmp_path, transform=GateTransform(4))  # the corpus's own transform, a batch read in one call
    assert sorted(x // 1000 for batch in shufflepoint.DataLoader(own, batch_size=4, seed=1, decode_threads=4)
                  for x in batch["x"].tolist()) == list(range(40))


def keyed(sample, rng):
    return {"x": sample["x"] * 1000 + int(rng.integers(0, 1000))}


def own(sample):
    return {"x": sample["x"] * 7}


@pytest.mark.parametrize("options", [
    {"transform": keyed}, {"transform": keyed, "num_workers": 2}, {"own": own}, {"own": own, "num_workers": 2},
    {"own": own, "collate_fn": list}, {"own": own, "transform": keyed}])
def test_a_batch_read_in_one_call_and_decoded_in_threads_is_the_batch_without_threads(tmp_path, options):
    options = dict(options)
    corpus = corpus_of(tmp_path, n=60, transform=options.pop("own", None))

    def run(threads, state=None, count=None):
        loader = shufflepoint.DataLoader(corpus, batch_size=6, seed=9, decode_threads=threads, **options)
        if state is not None:
            loader.load_state_dict(state)
        batches = []
        for batch in loader:
            batches.append([row["x"] for row in batch] if isinstance(batch, list) else batch["x"].tolist())
            if len(batches) == count:
                break
        return batches, loader.state_dict()

    plain, _ = run(0)
    assert run(1)[0] == plain
    first, state = run(3, count=4)
    assert first + run(5, state)[0] == plain  # another thread count on the resume: the same batches


def test_a_bad_sample_decoded_in_a_thread_is_the_same_error_as_without(tmp_path):
    def fails_on_13(sample, rng):
        if sample["x"] == 13:
            raise ValueError("sample 13 does not decode")
        return sample

    corpus = corpus_of(tmp_path)
    errors = []
    for threads in (0, 3):
        with pytest.raises(ValueError, match="sample 13 does not decode") as error:
            list(shufflepoint.DataLoader(corpus, batch_size=4, seed=2, transform=fails_on_13, decode_threads=threads))
        errors.append(str(error.value))
    assert errors[0] == errors[1]
