"""``skip_bad_samples=``: a sample that fails to read or decode is replaced in its slot by arithmetic, excluded
from the next batch on, kept in the state's record; past the limits the run stops naming the samples. One rank
here (the agreement on 2 real ranks and the fresh-process resume: tests/distributed/test_skip_resume.py)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import shufflepoint
from corpus_files import jsonl_corpus
from shufflepoint import SampleError, StateError
from shufflepoint._core.skips import replacement
from shufflepoint._tools.cli import main

N, BATCH, SEED = 40, 4, 3
BAD = {5, 17, 33}


class Flaky:
    """Samples are their indices; those in ``bad`` fail to decode."""

    def __init__(self, bad=BAD, n=N):
        self.bad, self.n = set(bad), n

    def __len__(self):
        return self.n

    def __getitem__(self, index):
        if index in self.bad:
            raise SampleError(f"record {index} does not decode")
        return index


def loader(dataset=None, policy=None, **kwargs):
    return shufflepoint.DataLoader(Flaky() if dataset is None else dataset, BATCH, seed=SEED,
                                   skip_bad_samples=policy or True, **kwargs)


def read(ld, epochs=2, stop=None):
    out = []
    while ld.epoch < epochs:
        for batch in ld:
            out.append(batch.tolist())
            if stop is not None and ld.step == stop:
                return out
    return out


def test_replacement_is_pinned():
    assert [replacement(0, 7, attempt, 100) for attempt in range(3)] == [93, 81, 67]


@given(st.integers(0, 2**64 - 1), st.integers(2, 10**9), st.data())
def test_replacement_is_another_index_of_the_dataset(seed, n, data):
    index, attempt = data.draw(st.integers(0, n - 1)), data.draw(st.integers(0, 1000))
    found = replacement(seed, index, attempt, n)
    assert 0 <= found < n and found != index and found == replacement(seed, index, attempt, n)


def test_raising_stays_the_default():
    with pytest.raises(SampleError, match="record"):
        read(shufflepoint.DataLoader(Flaky(), BATCH, seed=SEED))


def test_bad_samples_are_replaced_excluded_and_recorded():
    ld = loader()
    stream = read(ld)
    assert all(len(batch) == BATCH for batch in stream[:10])  # epoch 0: every batch full
    served = [i for batch in stream for i in batch]
    assert not BAD & set(served)
    assert ld.excluded.indices().tolist() == sorted(BAD)
    record = ld.state_dict()["skipped"]
    assert sorted(entry[1] for entry in record) == sorted(BAD)
    for step, index, substitute, shard, row, error in record:
        assert substitute == replacement(SEED, index, 0, N) and (shard, row) == (None, None)
        assert error == f"SampleError: record {index} does not decode"
        assert substitute in stream[step]
        assert ld.which(step) == {0: stream[step]}  # which names the replacement in the failed slot
    assert all(ld.which(step) == {0: batch} for step, batch in enumerate(stream))
    assert len(served) == 10 * BATCH + (N - len(BAD) + 1) // BATCH * BATCH + (N - len(BAD)) % BATCH


def test_the_stream_is_the_same_with_any_number_of_workers():
    assert read(loader(num_workers=2)) == read(loader()) == read(loader(num_workers=1, decode_threads=2))


@pytest.mark.parametrize("deal", ["strided", "spans"])
def test_a_resume_after_skips_continues_exactly(deal):
    whole = read(loader(deal=deal))
    for stop in (2, 6, 9, 12):
        first = loader(deal=deal)
        before = read(first, stop=stop)
        state = json.loads(json.dumps(first.state_dict()))
        resumed = loader(num_workers=2 if stop == 6 else 0, deal=deal)
        resumed.load_state_dict(state)
        assert before + read(resumed) == whole, stop
        assert resumed.state_dict()["skipped"] == loader_after(deal).state_dict()["skipped"]


def loader_after(deal):
    ld = loader(deal=deal)
    read(ld)
    return ld


def test_a_transform_that_raises_is_skipped_like_a_bad_sample():
    def transform(sample, rng):
        if sample == 8:
            raise KeyError("no image")
        return sample

    ld = loader(Flaky(bad=()), transform=transform)
    stream = read(ld, epochs=1)
    assert 8 not in {i for batch in stream for i in batch}
    (entry,) = ld.state_dict()["skipped"]
    assert entry[1] == 8 and entry[5] == "SampleError: dataset index 8: transform raised KeyError: 'no image'"


def test_a_shards_corpus_records_the_shard_and_the_row(tmp_path):
    ids = jsonl_corpus(str(tmp_path / "corpus"), 6, rows=(3, 3))

    def decode(row):
        if row["id"] == 10:
            raise SampleError("bad jpeg")
        return row["id"]

    corpus = shufflepoint.Shards(str(tmp_path / "corpus" / "*.jsonl"), transform=decode,
                                 cache_dir=str(tmp_path / "cache"))
    ld = shufflepoint.DataLoader(corpus, 3, seed=1, skip_bad_samples=True)
    served = [i for batch in read(ld, epochs=1) for i in batch]
    assert 10 not in served and len(served) == len(ids)
    (entry,) = ld.state_dict()["skipped"]
    step, index, substitute, shard, row, error = entry
    assert index == 10 and shard.endswith("part-00003.jsonl") and row == 1 and "bad jpeg" in error


def test_past_the_window_the_run_stops_naming_every_skipped_sample():
    ld = loader(policy={"max_skips": 2, "window": 100})
    with pytest.raises(RuntimeError, match=r"3 samples skipped in the last 100 steps") as raised:
        read(ld)
    for index in BAD:
        assert f"dataset index {index}" in str(raised.value)
    assert "record 33 does not decode" in str(raised.value)


def test_reads_in_a_row_that_fail_stop_the_run_naming_them():
    ld = loader(Flaky(bad=range(1, N)), policy={"max_in_a_row": 3})
    with pytest.raises(RuntimeError, match=r"3 reads in a row failed for one slot") as raised:
        read(ld)
    assert str(raised.value).count("does not decode") == 3


@pytest.mark.parametrize("kwargs, match", [
    ({"max_in_a_row": 0}, r"skip_bad_samples\['max_in_a_row'\]: found 0"),
    ({"max_skips": 64}, r"skip_bad_samples\['max_skips'\]: found 64"),
    ({"window": True}, r"skip_bad_samples\['window'\]: found True"),
])
def test_bad_limits_are_refused_by_name(kwargs, match):
    with pytest.raises(ValueError, match=match):
        loader(policy=kwargs)


def test_what_cannot_skip_is_refused_at_construction():
    with pytest.raises(TypeError, match="skip_bad_samples: found 'yes'"):
        shufflepoint.DataLoader(Flaky(), BATCH, skip_bad_samples="yes")
    with pytest.raises(TypeError, match=r"skip_bad_samples: found \{'limit': 3\}"):
        shufflepoint.DataLoader(Flaky(), BATCH, skip_bad_samples={"limit": 3})
    with pytest.raises(ValueError, match="persistent_workers=False"):
        loader(num_workers=1, persistent_workers=True)


def test_a_damaged_record_is_refused_by_name():
    ld = loader()
    read(ld, stop=6)
    state = ld.state_dict()
    state["skipped"][0][1] = N
    with pytest.raises(StateError, match=r"state field 'skipped\[0\]'"):
        loader().load_state_dict(state)


def test_inspect_shows_every_skip(tmp_path, capsys):
    ld = loader()
    read(ld, epochs=1)
    path = tmp_path / "loader.json"
    path.write_text(json.dumps(ld.state_dict()))
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "excluded   : 3 samples never served again" in out
    assert "skipped    : 3 bad samples (the latest kept), each excluded:" in out
    for step, index, substitute, *_ in ld.state_dict()["skipped"]:
        assert (f"step {step}: dataset index (index {index}) -> replaced by index {substitute}: "
                f"SampleError: record {index} does not decode") in out


def test_storage_that_does_not_answer_is_no_bad_sample():
    from shufflepoint._shards.storage.faults import NoAnswer

    class Down(Flaky):
        def __getitem__(self, index):
            if index == 7:
                raise NoAnswer("s3://b/x.parquet", "reading a range got no answer within 120 s")
            return index

    with pytest.raises(NoAnswer, match="got no answer"):
        read(loader(Down()))


@pytest.mark.parametrize("corpus_transform", [True, "oserror", False])
def test_a_shards_batch_decoded_in_threads_skips_its_bad_sample(tmp_path, corpus_transform):
    """decode_threads reads a Shards batch in one call and decodes it in threads: a bad sample in it is still
    skipped (found by reading the batch's samples one by one), the stream the same as without threads."""
    jsonl_corpus(tmp_path / "corpus", 6, rows=(3, 3))

    def decode(row):
        if row["id"] == 10:
            raise OSError("cannot identify image file") if corpus_transform == "oserror" else SampleError("bad jpeg")
        return row["id"]

    def user_transform(sample, rng):
        if sample["id"] == 10:
            raise ValueError("bad")
        return sample["id"]

    def run(threads, cache):
        if corpus_transform:
            corpus = shufflepoint.Shards(str(tmp_path / "corpus" / "*.jsonl"), transform=decode, cache_dir=str(cache))
            ld = shufflepoint.DataLoader(corpus, 3, seed=SEED, decode_threads=threads, skip_bad_samples=True,
                                         collate_fn=list)
        else:
            corpus = shufflepoint.Shards(str(tmp_path / "corpus" / "*.jsonl"), cache_dir=str(cache))
            ld = shufflepoint.DataLoader(corpus, 3, seed=SEED, transform=user_transform, decode_threads=threads,
                                         skip_bad_samples=True, collate_fn=list)
        served = [list(batch) for batch in ld]
        return served, ld.state_dict()["skipped"]

    plain, plain_record = run(0, tmp_path / "c0")
    threaded, threaded_record = run(2, tmp_path / "c2")
    assert threaded == plain
    assert 10 not in [x for batch in threaded for x in batch]
    assert threaded_record == plain_record and threaded_record  # the same skips, shard, row and error
    if corpus_transform:
        assert all(entry[3] is not None and entry[4] is not None for entry in threaded_record)


# -- what counts as a bad sample (_core/skips.py is_bad_sample) ---------------------------------------------------

@pytest.mark.parametrize("error", [OSError("cannot identify image file"), ValueError("bad header"),
                                   UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"),
                                   EOFError("truncated"), RuntimeError("decode_jpeg failed"), KeyError("jpg"),
                                   SyntaxError("broken PNG file")])
def test_any_error_of_a_sample_is_skipped(error):
    class Raising(Flaky):
        def __getitem__(self, index):
            if index == 8:
                raise error
            return index

    ld = loader(Raising())
    served = [i for batch in read(ld, epochs=1) for i in batch]
    assert 8 not in served and len(served) == N
    (entry,) = ld.state_dict()["skipped"]
    assert entry[1] == 8 and entry[5].startswith(type(error).__name__)


@pytest.mark.parametrize("error", [TypeError("unsupported operand"), AttributeError("no attribute 'convert'"),
                                   NameError("name 'np' is not defined"), AssertionError("shape")])
def test_a_programming_error_stays_loud(error):
    class Buggy(Flaky):
        def __getitem__(self, index):
            if index == 8:
                raise error
            return index

    def buggy_transform(sample, rng):
        if sample == 8:
            raise error
        return sample

    with pytest.raises(type(error)):
        read(loader(Buggy()), epochs=1)
    with pytest.raises(type(error)):
        read(loader(Flaky(bad=()), transform=buggy_transform), epochs=1)


def test_a_corpus_transform_that_raises_is_skipped_naming_its_shard_and_row(tmp_path):
    """``Shards(transform=)`` raising e.g. PIL's UnidentifiedImageError (an OSError) is a bad sample."""
    jsonl_corpus(tmp_path / "corpus", 5, rows=(3, 3))

    def decode(row):
        if row["id"] == 7:
            raise OSError("cannot identify image file <_io.BytesIO>")
        return row["id"]

    corpus = shufflepoint.Shards(str(tmp_path / "corpus" / "*.jsonl"), transform=decode, cache_dir=str(tmp_path / "c"))
    ld = shufflepoint.DataLoader(corpus, 3, seed=SEED, skip_bad_samples=True, collate_fn=list)
    served = [i for batch in ld for i in batch]
    assert 7 not in served and len(served) == 15
    (entry,) = ld.state_dict()["skipped"]
    assert entry[1] == 7 and entry[3].endswith("part-00002.jsonl") and entry[4] == 1
    assert entry[5] == "OSError: cannot identify image file <_io.BytesIO>"


# -- loaders that cannot exclude only replace: buckets, Packed, Mixture ---------------------------------------------

def test_buckets_replace_inside_the_bucket_the_same_each_epoch():
    keys = [index % 3 for index in range(N)]  # bucket of 5: {2, 5, 8, ...}
    ld = loader(buckets=keys)
    batches = read(ld, epochs=3)
    assert all(len({keys[i] for i in batch}) == 1 for batch in batches)  # every batch one bucket, replacements too
    record = ld.state_dict()["skipped"]
    # met again each epoch (nothing is excluded): a bad sample drawn as another's replacement fails too, and is kept
    assert {entry[1] for entry in record} == BAD and all(sum(e[1] == i for e in record) >= 3 for i in BAD)
    assert ld.state_dict()["excluded"] == []
    for index in BAD:
        (replaced,) = {entry[2] for entry in record if entry[1] == index}  # the same replacement each time
        assert keys[replaced] == keys[index]
    assert [i for batch in batches for i in batch].count(5) == 0


def test_buckets_resume_continues_exactly_and_which_names_the_replacement():
    keys = [index % 3 for index in range(N)]
    whole = read(loader(buckets=keys), epochs=2)
    first = loader(buckets=keys)
    head = read(first, epochs=2, stop=7)
    state = json.loads(json.dumps(first.state_dict()))
    second = loader(buckets=keys, num_workers=2)
    second.load_state_dict(state)
    assert head + read(second, epochs=2) == whole
    for step, index, substitute, *_ in second.state_dict()["skipped"]:
        assert substitute in second.which(step)[0] and index not in second.which(step)[0]


def test_inspect_says_a_replace_only_loader_did_not_exclude(tmp_path, capsys):
    ld = loader(buckets=[index % 3 for index in range(N)])
    read(ld, epochs=1)
    path = tmp_path / "loader.json"
    path.write_text(json.dumps(ld.state_dict()))
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "bad samples (the latest kept), replaced, not excluded" in out and "never served again" not in out
    for step, index, substitute, *_ in ld.state_dict()["skipped"]:
        assert f"step {step}: dataset index (index {index}) -> replaced by index {substitute}: SampleError" in out


def test_replace_only_allows_persistent_workers():
    keys = [index % 3 for index in range(N)]
    plain = read(loader(buckets=keys), epochs=2)
    assert read(loader(buckets=keys, num_workers=2, persistent_workers=True), epochs=2) == plain


class Documents:
    """Tokenized documents; ``broken`` ones fail to read (a token shard that will not read) once armed."""

    def __init__(self, tag, count=30):
        self.docs = [{"input_ids": list(range(tag * 10**6 + d * 1000, tag * 10**6 + d * 1000 + 3 + d % 5))}
                     for d in range(count)]
        self.broken = set()

    def __len__(self):
        return len(self.docs)

    def __getitem__(self, index):
        if index in self.broken:
            raise shufflepoint.ShardError(f"tokens-{index // 10}.bin", f"row {index % 10}: truncated")
        return self.docs[index]


def test_a_mixture_of_packed_sources_survives_a_shard_that_fails():
    def make(workers=0):
        a, b = Documents(1), Documents(2)
        mixture = shufflepoint.Mixture([(shufflepoint.Packed(a, 4, progress=False), 2),
                                        (shufflepoint.Packed(b, 4, progress=False), 1)])
        a.broken = {3}
        return shufflepoint.DataLoader(mixture, 2, seed=SEED, skip_bad_samples=True, num_workers=workers)

    def tokens(ld, epochs=2, stop=None):
        out = []
        while ld.epoch < epochs:
            for batch in ld:
                out.append(batch["input_ids"].tolist())
                if stop is not None and ld.step == stop:
                    return out
        return out

    ld = make()
    whole = tokens(ld)
    record = ld.state_dict()["skipped"]
    assert record and all(entry[3] == "tokens-0.bin" for entry in record)
    served = {t for batch in whole for row in batch for t in row}
    assert not any(1 * 10**6 + 3000 <= t < 1 * 10**6 + 4000 for t in served)  # document 3 of a: never served
    assert all(t // 10**6 == 1 for entry in record for t in ld.dataset[entry[2]]["input_ids"].tolist())  # its source
    assert tokens(make(workers=2)) == whole
    first = make()
    head = tokens(first, stop=5)
    second = make()
    second.load_state_dict(json.loads(json.dumps(first.state_dict())))
    assert head + tokens(second) == whole


# -- which(step) answers every step, under both deals (spans: the record replayed, position._replayed_cuts) ---------

@settings(max_examples=12, deadline=None)
@given(bad=st.sets(st.integers(0, N - 1), max_size=8), deal=st.sampled_from(["strided", "spans"]),
       batch=st.integers(1, 5), stop=st.integers(1, 20))
def test_which_names_every_step_of_a_run_with_skips(bad, deal, batch, stop):
    def make():
        return shufflepoint.DataLoader(Flaky(bad=bad), batch, seed=SEED, deal=deal,
                                       skip_bad_samples={"max_skips": 40, "max_in_a_row": 16})

    first = make()
    head = read(first, epochs=3, stop=stop)
    second = make()
    second.load_state_dict(json.loads(json.dumps(first.state_dict())))  # which from a loaded state too
    batches = head + read(second, epochs=3)
    for ld in (first, second) if len(head) == stop else (second,):
        for step in range(ld.step):
            assert ld.which(step)[0] == batches[step], (step, ld.state_dict()["skipped"])
    assert not bad & {i for b in batches for i in b}  # a bad sample is never served: its slot held a replacement


def test_slot_replacements_name_each_slot_once():
    from shufflepoint._core.skips import Skip, slot_replacements

    record = [Skip(4, 10, 3, None, None, "e"), Skip(4, 12, 3, None, None, "e"), Skip(4, 12, 7, None, None, "e"),
              Skip(5, 1, 2, None, None, "e")]
    assert slot_replacements(record, 4) == {10: 3, 12: 7}  # 12 was tried for 10's slot, then failed in its own
    assert slot_replacements(record, 5) == {1: 2} and slot_replacements(record, 6) == {}
