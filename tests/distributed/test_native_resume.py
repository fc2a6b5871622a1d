"""shufflepoint.DataLoader across real processes: save, die, resume in new processes, compare.

Every resume runs in processes that did not exist before (a new torchrun launch). Scenarios are
packed into few launches: each launch costs seconds on a 2-core machine.
"""

import json
import os
from collections import Counter

import pytest

from shufflepoint._tools.launch import launch

WORKER = os.path.join(os.path.dirname(__file__), "workers", "native_worker.py")
SEED_SHAPE = dict(n=64, batch_size=4, seed=1234, epochs=3, save_at=[1, 3])

SAVE_2 = [
    dict(name="seed_shape", **SEED_SHAPE),
    dict(name="seed_shape_workers", num_workers=2, **SEED_SHAPE),
    dict(name="tail_epoch0", n=50, batch_size=3, seed=7, epochs=2, save_at=[0, 5]),
    dict(name="last_batch", n=30, batch_size=4, seed=3, epochs=2, save_at=[0, 4]),
    dict(name="drop_last", n=30, batch_size=4, seed=3, epochs=2, save_at=[1, 2], drop_last=True),
    dict(name="to_three", n=50, batch_size=3, seed=9, epochs=2, save_at=[0, 4]),
]
SAVE_3 = [
    dict(name="three", n=50, batch_size=3, seed=7, epochs=2, save_at=[1, 2]),
    dict(name="to_two", n=50, batch_size=3, seed=9, epochs=2, save_at=[0, 3]),
]
KILL_2 = [dict(name="killed", n=400, batch_size=4, seed=5, epochs=2, save_at=[0, 10], kill=True)]


def resume(scenario, saved_world, **changes):
    spec = dict(scenario, source=scenario["name"], saved_world=saved_world)
    spec.update(changes)
    return spec


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("native"))

    def go(mode, scenarios, nproc, **kwargs):
        return launch([WORKER, mode, out, json.dumps(scenarios)], nproc, **kwargs)

    # The 2-rank saves ride in the launch that ends with the kill scenario (one launch fewer): each is
    # written before the next starts, and the SIGKILL comes only after the last one saved.
    killed = go("save", SAVE_2 + KILL_2, 2, kill_when=os.path.join(out, "killed.saved"))
    if not killed.killed:
        killed.check()  # a save before the kill failed: raises with the workers' stderr
    assert killed.killed, "the kill scenario was supposed to be SIGKILLed"
    go("save", SAVE_3, 3).check()
    go("resume", [resume(s, 2) for s in SAVE_2 if s["name"] != "to_three"]
       + [resume(KILL_2[0], 2, kill=False),
          resume(SAVE_3[1], 3, name="from_three"),
          resume(SAVE_2[0], 2, name="seed_shape_cross_rank", state_from_rank=1)], 2).check()
    go("resume", [resume(SAVE_3[0], 3), resume(SAVE_2[-1], 2, name="from_two", batch_size=2)], 3).check()
    return out


def read(out, name):
    with open(os.path.join(out, name)) as f:
        return json.load(f)


def flat(stream):
    return [(epoch, batch) for epoch in sorted(stream, key=int) for batch in stream[epoch]]


def assert_exact(out, scenario, resumed_name=None, world=2):
    resumed_name = resumed_name or scenario["name"]
    save_epoch, save_step = scenario["save_at"]
    for rank in range(world):
        reference = read(out, f"{scenario['name']}.ref.r{rank}.json")
        before = read(out, f"{scenario['name']}.before.r{rank}.json")
        resumed = read(out, f"{resumed_name}.resumed.r{rank}.json")
        assert flat(before) + flat(resumed) == flat(reference), f"rank {rank} is not exact"
        assert len(before[str(save_epoch)]) == save_step


@pytest.mark.parametrize("name", ["seed_shape", "seed_shape_workers", "tail_epoch0", "last_batch", "drop_last"])
def test_same_world_size_resumes_exactly(runs, name):
    assert_exact(runs, next(s for s in SAVE_2 if s["name"] == name))


def test_seed_shape_resumes_epoch_one_not_epoch_zero(runs):
    """The seed's bug would serve epoch 0's permutation here; check the batches are epoch 1's."""
    reference = read(runs, "seed_shape.ref.r0.json")
    resumed = read(runs, "seed_shape.resumed.r0.json")
    assert resumed["1"] == reference["1"][3:]
    assert resumed["1"] != reference["0"][3:]


def test_three_processes_resume_exactly(runs):
    assert_exact(runs, SAVE_3[0], world=3)


def test_any_ranks_state_restores_every_rank(runs):
    assert_exact(runs, SAVE_2[0], resumed_name="seed_shape_cross_rank")


def test_sigkill_right_after_a_checkpoint_loses_and_repeats_nothing(runs):
    assert_exact(runs, KILL_2[0])


@pytest.mark.parametrize("source, resumed, old_world, new_world, new_batch", [
    ("to_three", "from_two", 2, 3, 2),
    ("to_two", "from_three", 3, 2, 3),
])
def test_elastic_resume_sees_each_sample_once(runs, source, resumed, old_world, new_world, new_batch):
    scenario = next(s for s in SAVE_2 + SAVE_3 if s["name"] == source)
    n, save_epoch = scenario["n"], scenario["save_at"][0]
    before = [read(runs, f"{source}.before.r{r}.json") for r in range(old_world)]
    after = [read(runs, f"{resumed}.resumed.r{r}.json") for r in range(new_world)]
    for epoch in range(save_epoch, scenario["epochs"]):
        seen = Counter()
        for stream in before + after:
            for batch in stream.get(str(epoch), []):
                seen.update(batch)
        assert set(seen) == set(range(n)), f"epoch {epoch}: samples dropped"
        per_rank = {sum(len(b) for b in stream[str(epoch)]) for stream in after}
        assert len(per_rank) == 1, "ranks took different numbers of samples"
        repeats = sum(seen.values()) - n
        assert 0 <= repeats < new_world, f"epoch {epoch}: {repeats} repeats beyond the tail padding"
    for stream in after:
        assert all(len(b) <= new_batch for e in stream for b in stream[e])
