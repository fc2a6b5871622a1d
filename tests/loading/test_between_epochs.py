"""Changes between two epochs leave the next ``iter()`` where it would have been, on every rank, and a
batch-size ramp a resume does not continue is said (issue 35: traps found by trying it as a user)."""

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import shufflepoint


def ranks(n, world_size, batch_size, **kwargs):
    return [shufflepoint.DataLoader(list(range(n)), batch_size, world_size=world_size, rank=rank, seed=3, **kwargs)
            for rank in range(world_size)]


def run_out(loader):
    return [b.tolist() for b in loader]


def zip_stop(loader):
    """The loop of many training scripts: every batch taken, the iterator never asked for one more."""
    return [b.tolist() for _, b in zip(range(len(loader)), loader, strict=False)]


@pytest.mark.parametrize("change", ["exclude", "set_batch_size"])
@pytest.mark.parametrize("deal", ["strided", "spans"])
def test_a_change_between_epochs_gives_every_rank_the_next_epoch(change, deal):
    """Rank 0's loop ran its iterator out, rank 1's stopped at len(loader): after the same change on both,
    both read the next epoch, the same number of batches (unequal counts hang a DDP job)."""
    loaders = ranks(1000, 2, 4, deal=deal)
    first = [run_out(loaders[0]), zip_stop(loaders[1])]
    assert len(first[0]) == len(first[1]) == 125
    for loader in loaders:
        if change == "exclude":
            loader.exclude(range(0, 1000, 7))
        else:
            loader.set_batch_size(8)
    second = [run_out(loaders[0]), zip_stop(loaders[1])]
    assert (loaders[0].epoch, loaders[1].epoch, loaders[1].batches_left()) == (2, 1, 0)  # rank 1's pass not run out
    assert len(second[0]) == len(second[1]) > 0
    served = sorted(i for batches in second for batch in batches for i in batch)
    if change == "exclude":
        assert not set(served) & set(range(0, 1000, 7))
        assert set(served) == set(range(1000)) - set(range(0, 1000, 7))
    else:
        assert len(second[0]) == 63  # 500 samples per rank in batches of 8


@settings(max_examples=30, deadline=None)
@given(n=st.integers(8, 60), world_size=st.integers(1, 3), batch_size=st.integers(1, 5),
       deal=st.sampled_from(["strided", "spans"]), drop_last=st.booleans(), new_batch=st.integers(1, 6))
def test_a_zip_loop_and_a_run_out_loop_agree_after_a_change(n, world_size, batch_size, deal, drop_last, new_batch):
    """Whatever the layout, a loop that stops at len(loader) and one that runs the iterator out read the same
    epochs after a change between epochs, and the same as a loader that never saw the change mid-way."""
    zipped, ran = (ranks(n, world_size, batch_size, deal=deal, drop_last=drop_last)[0] for _ in range(2))
    assume(len(zipped) > 0)  # an empty epoch has no batch to receive: a zip loop never starts it
    assert zip_stop(zipped) == run_out(ran)
    for loader in (zipped, ran):
        loader.set_batch_size(new_batch)
    assert zip_stop(zipped) == run_out(ran)
    assert zipped.step == ran.step
    zipped.exclude([0])
    ran.exclude([0])
    assert zip_stop(zipped) == run_out(ran)


def test_a_change_inside_the_last_batch_still_reads_on_to_the_next_epoch():
    """exclude() inside the loop body after the epoch's last batch: the loop ends, the next epoch follows."""
    loader = ranks(20, 1, 5)[0]
    seen = []
    for batch in loader:
        seen.append(batch.tolist())
        if len(seen) == 4:
            loader.exclude([0, 1])
    assert len(seen) == 4 and loader.epoch == 1
    assert sorted(i for batch in loader for i in batch.tolist()) == list(range(2, 20))


def ramped_state(batch_size=4, ramp_to=8):
    loader = ranks(64, 2, batch_size)[0]
    iterator = iter(loader)
    next(iterator)
    loader.set_batch_size(ramp_to)
    next(iterator)
    return loader.state_dict(), [b.tolist() for b in iterator]


def test_a_ramp_resumed_at_the_constructor_s_size_is_said_naming_both_sizes():
    state, _ = ramped_state()
    resumed = ranks(64, 2, 4)[0]
    said = r"read on at 8 per rank.*batch_size=4(.|\n)*fix: build the loader with batch_size=8, or call " \
           r"loader.set_batch_size\(8\)"
    resumed.load_state_dict(state)
    with pytest.warns(shufflepoint.ResumeWarning, match=said) as caught:
        batch = next(iter(resumed))  # said where the first batch is read at the constructor's size
    assert len(batch) == 4 and caught[0].filename == __file__  # the loader's own size, as the warning says


def test_a_ramp_resumed_at_its_size_continues_exactly_and_silently():
    state, rest = ramped_state()
    resumed = ranks(64, 2, 8)[0]
    resumed.load_state_dict(state)  # ResumeWarning is an error in this suite: none is raised
    assert [b.tolist() for b in resumed] == rest
    also = ranks(64, 2, 4)[0]
    also.load_state_dict(state)
    also.set_batch_size(8)  # the other fix the warning names (a callback that re-applies the ramp): silent
    assert [b.tolist() for b in also] == rest


def test_an_elastic_resume_at_another_batch_size_without_a_ramp_is_not_warned_about():
    loader = ranks(64, 2, 4)[0]
    next(iter(loader))
    resumed = ranks(64, 2, 6)[0]
    resumed.load_state_dict(loader.state_dict())  # a chosen new size, no set_batch_size in the run: silent
    assert len(next(iter(resumed))) == 6


def test_a_refused_state_says_nothing_of_the_ramp():
    state, _ = ramped_state()
    other = shufflepoint.DataLoader(list(range(65)), 4, world_size=2, rank=0, seed=3)
    with pytest.raises(shufflepoint.StateError, match="n"):
        other.load_state_dict(state)  # a warning here would be an error of this suite


def test_the_state_keeps_the_ramp_across_resumes_until_it_is_lost():
    """``ramp`` in the state: a resume at the ramped size keeps it, so a later resume at the script's constant is
    still told; an old state (before version 4 recorded it) and a run without set_batch_size record none."""
    state, _ = ramped_state()
    assert state["ramp"] == 8
    kept = ranks(64, 2, 8)[0]
    kept.load_state_dict(state)
    next(iter(kept))
    assert kept.state_dict()["ramp"] == 8
    lost = ranks(64, 2, 4)[0]
    lost.load_state_dict(kept.state_dict())
    with pytest.warns(shufflepoint.ResumeWarning, match="read on at 8 per rank"):
        next(iter(lost))
    assert lost.state_dict()["ramp"] is None  # said once: the run now reads at 4
    assert ranks(64, 2, 4)[0].state_dict()["ramp"] is None
    with pytest.raises(shufflepoint.StateError, match=r"'ramp': found 0\n  expected: a batch size"):
        ranks(64, 2, 4)[0].load_state_dict({**state, "ramp": 0})
