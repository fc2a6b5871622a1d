"""batches_this_epoch: what each rank received of the current epoch, through exclusions, batch-size changes
and resumes (the Hugging Face Trainer numbers a resumed epoch's batches with it)."""

import warnings

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import shufflepoint

N = 40


def _loader(deal, state=None):
    loader = shufflepoint.DataLoader(list(range(N)), 3, seed=5, deal=deal, collate_fn=list)
    if state is not None:
        loader.load_state_dict(state)
    return loader


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(deal=st.sampled_from(["strided", "spans"]), data=st.data())
def test_batches_this_epoch_counts_what_the_loop_received(deal, data):
    warnings.simplefilter("ignore", shufflepoint.ResumeWarning)  # resumes at the constructor's size, on purpose
    loader, received, epoch = _loader(deal), 0, 0
    actions = data.draw(st.lists(st.sampled_from(["read", "read", "read", "exclude", "batch", "resume"]),
                                 min_size=1, max_size=40))
    excluded_once = False
    batches = iter(loader)
    for action in actions:
        if action == "read":
            if next(batches, None) is None:  # the epoch ended: the loader is at the next one's start
                batches = iter(loader)
                continue
            if loader.epoch != epoch:
                epoch, received = loader.epoch, 0
            received += 1
            if loader.batches_left() == 0:  # the pass ends at the next read: the loader moves on then
                continue
        elif action == "exclude" and not excluded_once:  # one exclusion: every step stays placeable
            loader.exclude(data.draw(st.lists(st.integers(0, N - 1), min_size=1, max_size=6)))
            excluded_once = True
        elif action == "batch":
            loader.set_batch_size(data.draw(st.integers(1, 5)))
        elif action == "resume":
            loader = _loader(deal, loader.state_dict())
            batches = iter(loader)
        if loader.epoch != epoch:
            epoch, received = loader.epoch, 0
        assert loader.batches_this_epoch() == received, (action, loader.state_dict())
