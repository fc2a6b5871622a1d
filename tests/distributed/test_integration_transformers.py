"""shufflepoint.integrations.transformers.Trainer: a real Trainer (tiny LlamaForCausalLM) on 2 processes
(torchrun, Gloo), stopped mid epoch 1 and resumed in new processes with resume_from_checkpoint.

Three launches run every scenario of workers/trainer_worker.py (a launch costs ~15 s of imports):

1. 2 processes: the uninterrupted runs, the runs stopped at a checkpoint, and last one SIGKILLed
   right after its checkpoint;
2. 1 process: 2 -> 1 resumed, and a run stopped on 1 process (the 1 -> 2 source);
3. 2 processes: every same-world resume, and 1 -> 2.

max_steps across a resize (issue 25.5): ``max_steps`` keeps meaning the data of the run that set it,
in the steps of each resumed run; a resume that would train nothing while data remains is refused.

Same world: each rank's trained batches (stopped + resumed) equal the uninterrupted run's, batch
for batch, and the final weights are equal. Another world: the interrupted epoch is the epoch's
global order read once (``assert_epoch_exactly_once``), the run ends after epoch 3 of data, and the
learning rate at every resumed step is the linear schedule of the new run at the placed step.
"""

import importlib
import json
import os
from collections import Counter

import pytest

pytest.importorskip("transformers", reason="the transformers extra is not installed: pip install "
                                           "'shufflepoint[transformers]'")

from integration_checks import assert_epoch_exactly_once, reference  # noqa: E402

from shufflepoint._tools.launch import launch  # noqa: E402

HAS_RESUME_HOOK = hasattr(importlib.import_module("transformers").Trainer, "get_resumed_dataloader")
WORKER = os.path.join(os.path.dirname(__file__), "workers", "trainer_worker.py")
N, SEED, EPOCHS, LR = 40, 1234, 3, 1e-2
SAME_WORLD = ["plain", "ga2", "workers2", "augment", "shards", "mixture", "edge", "kill"]


def _read(out, name, phase, world_size):
    runs = []
    for rank in range(world_size):
        with open(os.path.join(out, f"{name}.{phase}.rank{rank}.json")) as f:
            runs.append(json.load(f))
    return runs


def _stream(run):
    return [(b["epoch"], b["ids"]) for b in run["batches"]]


def _flat_reference(world_size, batch_size):
    return reference(N, SEED, world_size, batch_size, EPOCHS)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("trainer"))
    first = ["whole:plain", "whole:augment", "whole:shards", "whole:mixture"]
    first += [f"stop:{n}" for n in SAME_WORLD[:-1]] + ["stop:shrink", "whole:budget", "stop:budget",
                                                        "stop:budgetsame", "whole:budgetpacked",
                                                        "stop:budgetpacked", "kill:kill"]
    killed = launch([WORKER, out, *first], 2, kill_when=os.path.join(out, "kill.saved"), timeout=400)
    assert killed.killed and os.path.exists(os.path.join(out, "kill.kill.rank1.json")), killed.stderr[-3000:]
    launch([WORKER, out, "resume:shrink", "stop:grow", "refuse:budget", "resume:budget", "stop:budgetgrow",
                    "resume:budgetpacked"], 1,
           timeout=300).check()
    launch([WORKER, out, *[f"resume:{n}" for n in SAME_WORLD], "resume:grow", "resume:budgetsame",
            "resume:budgetgrow"], 2, timeout=400).check()
    return out


def test_the_uninterrupted_trainer_trains_the_loader_order(runs):
    for rank, run in enumerate(_read(runs, "plain", "whole", 2)):
        assert _stream(run) == _flat_reference(2, 4)[rank]
        assert run["final_step"] == EPOCHS * 5


@pytest.mark.parametrize("name, batch_size, steps", [
    ("plain", 4, 15), ("ga2", 2, 15), ("workers2", 4, 15), ("augment", 4, 15), ("kill", 4, 15),
    ("shards", 4, None), ("mixture", 4, 15), ("edge", 4, 15)])
def test_same_world_resume_is_exact_per_rank(runs, name, batch_size, steps):
    before = _read(runs, name, "kill" if name == "kill" else "stop", 2)
    after = _read(runs, name, "resume", 2)
    for rank in range(2):
        if name in ("shards", "mixture"):  # their own orders (blocks, mixture): the uninterrupted run is the reference
            whole = _read(runs, name, "whole", 2)[rank]
            assert _stream(before[rank]) + _stream(after[rank]) == _stream(whole), f"rank {rank}"
            steps = whole["final_step"]
            assert steps == len(whole["batches"]) > 7, "the corpus is too small to stop mid epoch 1"
        else:
            assert _stream(before[rank]) + _stream(after[rank]) == _flat_reference(2, batch_size)[rank], \
                f"rank {rank}"
        assert after[rank]["final_step"] == steps
        assert after[rank]["start_step"] == before[rank]["steps"][-1][0]  # global_step unchanged on the same world
        assert not before[rank]["resume_warnings"] and not after[rank]["resume_warnings"]
    if name in ("plain", "augment", "shards", "mixture"):
        whole = _read(runs, name, "whole", 2)
        for rank in range(2):
            assert after[rank]["weights"] == whole[rank]["weights"], f"rank {rank}: the weights differ"
            noise = [b["noise"] for b in before[rank]["batches"] + after[rank]["batches"]]
            assert noise == [b["noise"] for b in whole[rank]["batches"]], f"rank {rank}: augmentation differs"


def _check_schedule(run, total_steps, placed, last_step=None):
    """Every resumed optimizer step: global_step counts on from the saved one, the data (and the learning
    rate, linear) from the step the data is placed at in this run's cut, ``placed``; ``last_step``, in the
    data's steps, where the run ends before ``total_steps``."""
    steps, offset = run["steps"], run["start_step"] - placed
    assert [s for s, _ in steps] == list(range(run["start_step"] + 1, (last_step or total_steps) + offset + 1))
    for step, rate in steps:
        assert rate == pytest.approx(LR * (1 - (step - offset) / total_steps), abs=1e-12), f"step {step}"


def test_two_to_one_trains_every_sample_of_the_epoch_once(runs):
    before, (after,) = _read(runs, "shrink", "stop", 2), _read(runs, "shrink", "resume", 1)
    records = lambda run: [{"epoch": e, "ids": ids} for e, ids in _stream(run)]  # noqa: E731
    assert_epoch_exactly_once(N, SEED, 1, [[records(r) for r in before], [records(after)]])
    assert [b for b in _stream(after) if b[0] == 2] == [b for b in _flat_reference(1, 4)[0] if b[0] == 2]
    assert after["start_step"] == 7  # the saved global_step; the data at step 10 + 4 of 1 rank x batch 4 (cursor 16)
    assert not after["resume_warnings"]
    _check_schedule(after, 3 * 10, placed=10 + 4)


def test_one_to_two_with_accumulation_trains_every_sample_once(runs):
    (before,), after = _read(runs, "grow", "stop", 1), _read(runs, "grow", "resume", 2)
    records = lambda run: [{"epoch": e, "ids": ids} for e, ids in _stream(run)]  # noqa: E731
    assert_epoch_exactly_once(N, SEED, 1, [[records(before)], [records(r) for r in after]])
    for rank in range(2):
        assert [b for b in _stream(after[rank]) if b[0] == 2] == [
            b for b in _flat_reference(2, 4)[rank] if b[0] == 2]
        # 2 ranks x batch 4, GA 2: 3 steps an epoch; cursor 8 = 1 batch, half a step: the first is short
        assert after[rank]["start_step"] == 6  # the saved global_step; the data at step 3 of this run's cut
        if HAS_RESUME_HOOK:  # the first step accumulates 1 batch, every later one 2
            assert not after[rank]["resume_warnings"]
            _check_schedule(after[rank], 3 * 3, placed=3)
        else:  # < 5.25 numbers the batches from the last whole step: said, and the run is a step short
            assert "not a whole number of optimizer steps" in " ".join(after[rank]["resume_warnings"])
            _check_schedule(after[rank], 3 * 3, placed=3, last_step=3 * 3 - 1)
    assert after[0]["weights"] == after[1]["weights"], "the ranks' models diverged: a step missed its gradient sync"


def _trained(runs_of_phases):
    """The multiset of (epoch, sample id) trained by every rank of every given run."""
    return sorted((b["epoch"], i) for run in runs_of_phases for b in run["batches"] for i in b["ids"])


def test_max_steps_keeps_meaning_the_setting_runs_data_across_two_to_one(runs):
    """max_steps=12 on 2 x 4 (96 samples: epochs 0 and 1, 16 of epoch 2), stopped at step 5 (40 trained),
    resumed on 1 x 4: the stock Trainer trained 8 more samples; this one trains the 56 left, in 14 steps
    of this run (the data placed at its step 10, max_steps 24), on the linear schedule of 24 steps; its
    global_step goes on from 5 to 19."""
    whole, before = _read(runs, "budget", "whole", 2), _read(runs, "budget", "stop", 2)
    (after,) = _read(runs, "budget", "resume", 1)
    assert [r["final_step"] for r in whole] == [12, 12]
    assert len(_trained(whole)) == 96 and len(_trained(before)) == 40
    assert (after["start_step"], after["final_step"]) == (5, 5 + 14)
    assert len(_trained([after])) == 56
    assert _trained(before + [after]) == _trained(whole), "the resumed run trained other data than max_steps meant"
    assert not after["resume_warnings"]
    _check_schedule(after, 24, placed=10)


def test_max_steps_on_the_same_world_is_unchanged_and_exact(runs):
    whole, before = _read(runs, "budget", "whole", 2), _read(runs, "budgetsame", "stop", 2)
    after = _read(runs, "budgetsame", "resume", 2)
    for rank in range(2):
        assert _stream(before[rank]) + _stream(after[rank]) == _stream(whole[rank]), f"rank {rank}"
        assert (after[rank]["start_step"], after[rank]["final_step"]) == (5, 12)
        assert after[rank]["weights"] == whole[rank]["weights"]
        assert not after[rank]["resume_warnings"]


def test_max_steps_whose_end_falls_inside_a_step_says_what_the_last_step_trains_past_it(runs):
    """max_steps=3 on 1 x 4 x GA 2 ends at sample 24 of epoch 0; stopped at step 2 (16 trained) and resumed
    on 2 x 4 x GA 2 (16 a step), the one step left trains 8 samples past it: whole, and said."""
    (before,), after = _read(runs, "budgetgrow", "stop", 1), _read(runs, "budgetgrow", "resume", 2)
    assert len(_trained([before])) == 16
    for rank in range(2):
        assert (after[rank]["start_step"], after[rank]["final_step"]) == (2, 3)  # the data: from step 1 to 2
        assert any("trains 8 samples past it" in w for w in after[rank]["resume_warnings"]), after[rank]
    trained = _trained([before] + after)
    assert len(trained) == len(set(trained)) == 32
    first = reference(N, SEED, 1, 4, 1)[0]  # epoch 0's global order, read by 1 rank in batches of 4
    assert trained == sorted((0, i) for _, ids in first[:8] for i in ids), "not the epoch's first 32 samples"


def test_a_resume_that_would_train_nothing_while_data_remains_is_refused_with_the_numbers(runs):
    (refused,) = _read(runs, "budget", "refuse", 1)
    assert refused["batches"] == []
    message = refused["error"]
    assert message.startswith("max_steps: this resume would train nothing, while the saved run had steps left")
    assert "found: max_steps=10, and the resume is placed at step 10 of the data (steps of 1 rank x batch 4" in message
    assert ("saved: stopped at step 5 of 12; max_steps=12 set by a run of 2 ranks x batch 4 x accumulation 1 "
            "(8 samples a step), which here ends at step 24: 14 steps left") in message
    assert "fix: pass max_steps=12 as the saved run did, or one above 10" in message


def test_max_steps_of_packed_rows_keeps_meaning_its_tokens_across_two_to_one(runs):
    """Packed rows of 4 tokens, max_steps=4 on 2 x 4 rows (128 tokens), stopped at step 2 (64 tokens) and
    resumed on 1 x 4: the 64 tokens left are trained, in 4 steps of this run (the data placed at its step 4,
    max_steps 8; global_step from 2 to 6).

    Packed reads under the ``spans`` deal, which keeps no prefix: the budget is an amount of the epoch
    (32 of its 33 rows), and which row is left for later depends on the world. So: the same amount,
    no row twice, and the same rows as the uninterrupted run but for that one."""
    whole, before = _read(runs, "budgetpacked", "whole", 2), _read(runs, "budgetpacked", "stop", 2)
    (after,) = _read(runs, "budgetpacked", "resume", 1)

    def rows(runs_of_phases):
        return Counter(tuple(row) for run in runs_of_phases for b in run["batches"] for row in b["rows"])

    assert [r["final_step"] for r in whole] == [4, 4] and (after["start_step"], after["final_step"]) == (2, 6)
    assert sum(len(row) * k for row, k in rows([after]).items()) == 64
    trained, meant = rows(before + [after]), rows(whole)
    assert trained.total() == meant.total() == 32
    assert (trained - meant).total() <= 1 and max(trained.values()) == 1, "a row trained twice, or not the budget"
