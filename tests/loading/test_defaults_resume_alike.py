"""Defaults do not remember that they were defaults: a loader or sampler built with ``deal=None`` resumes exactly
as one built with the deal it resolves to (the same for ``order`` and ``shuffle_block``), whatever state it loads."""

from __future__ import annotations

import pytest

import shufflepoint
from simulated import ShardRows

ROWS = [9, 7, 11, 5]  # 32 rows


def loader(rank=0, world_size=2, batch_size=2, **kwargs):
    return shufflepoint.DataLoader(ShardRows(ROWS), batch_size, seed=3, rank=rank, world_size=world_size,
                                   shuffle_block=4, **kwargs)


def saved(batches=3, exclude=(), **kwargs):
    """A corpus run's state after ``batches`` batches, then ``exclude`` and one more (rank 0's: the same on every
    rank)."""
    run = loader(**kwargs)
    it = iter(run)
    for _ in range(batches):
        next(it)
    if exclude:
        run.exclude(exclude)
        next(it)
    return run.state_dict()


def resumed(state, world_size, **kwargs):
    """Every rank of ``world_size`` loaded with ``state``: (rank 0's state, every rank's batches), or the refusal."""
    ranks = [loader(rank, world_size, **kwargs) for rank in range(world_size)]
    try:
        for each in ranks:
            each.load_state_dict(dict(state))
    except shufflepoint.StateError as error:
        return str(error)
    return ranks[0].state_dict(), [[b.tolist() for b in each] for each in ranks]


@pytest.mark.parametrize("run", [dict(), dict(deal="strided"), dict(batches=7), dict(exclude=[1, 2, 20]),
                                 dict(deal="strided", exclude=[1, 2, 20])])
@pytest.mark.parametrize("world_size", [2, 3])
def test_deal_none_and_spans_resume_a_corpus_alike(run, world_size):
    """A corpus's default deal is ``spans``: ``deal=None`` and ``deal="spans"`` are the same loader on a resume,
    whether the state was dealt in spans or strided (a run of 0.2, or one that chose it: read on strided), with
    samples excluded or not."""
    state = saved(**run)
    default, spans = resumed(state, world_size), resumed(state, world_size, deal="spans")
    assert default == spans
    assert default[0]["deal"] == state["deal"]


def test_deal_none_and_strided_refuse_a_spans_state_alike():
    """An array's default deal is ``strided``: left to it or passed, a state dealt in spans is refused by name (a
    state's deal is adopted only where it was a corpus's before ``spans``: ``strided``, into ``spans``)."""
    spans_run = shufflepoint.DataLoader(list(range(20)), 2, rank=0, world_size=2, seed=1, deal="spans")
    next(iter(spans_run))
    state = spans_run.state_dict()
    found = []
    for deal in (None, "strided"):
        fresh = shufflepoint.DataLoader(list(range(20)), 2, rank=0, world_size=2, seed=1, deal=deal)
        with pytest.raises(shufflepoint.StateError, match=r"'deal': found 'spans'\n  expected: 'strided'") as error:
            fresh.load_state_dict(state)
        found.append(str(error.value))
        assert fresh.deal == "strided" and fresh.cursor == 0  # nothing changed
    assert found[0] == found[1]


def test_a_block_passed_as_the_default_resumes_as_the_default():
    """``shuffle_block=None`` and the block it resolves to (65,536 here) adopt a state's block alike; another
    block of the caller's own is checked against the state's."""
    state = saved()  # shuffle_block 4
    ranks = {block: shufflepoint.DataLoader(ShardRows(ROWS), 2, seed=3, rank=0, world_size=2, shuffle_block=block)
             for block in (None, 65536, 8)}
    assert ranks[None].state_dict() == ranks[65536].state_dict()
    for block in (None, 65536):
        ranks[block].load_state_dict(dict(state))
    assert ranks[None].state_dict() == ranks[65536].state_dict() == state
    with pytest.raises(shufflepoint.StateError, match=r"'shuffle_block': found 4\n  expected: 8"):
        ranks[8].load_state_dict(dict(state))


def sampler(rank=0, **kwargs):
    return shufflepoint.ResumableSampler(ShardRows(ROWS), num_replicas=2, rank=rank, seed=3, **kwargs)


@pytest.mark.parametrize("deal", ["strided", "spans"])
def test_the_samplers_deal_none_and_spans_resume_alike(deal):
    """The sampler resumes through the loader's path: ``deal=None`` and ``deal="spans"`` read on alike, the run's
    rest of the epoch on every rank."""
    run = [sampler(rank, shuffle_block=4, deal=deal) for rank in range(2)]
    its = [iter(each) for each in run]
    for it in its:
        for _ in range(5):
            next(it)
    state = run[0].state_dict()
    found = {}
    for chosen in (None, "spans"):
        fresh = [sampler(rank, deal=chosen) for rank in range(2)]
        for each in fresh:
            each.load_state_dict(dict(state))
        found[chosen] = (fresh[0].state_dict(), [list(each) for each in fresh])
    assert found[None] == found["spans"]
    assert found[None][0] == state and found[None][1] == [list(it) for it in its]
