"""A Trainer run resized twice, killed each time right after a checkpoint, and resumed each time with
``get_last_checkpoint`` in new processes (issue 32): 2 -> 1 -> 3 processes (accumulation 1), and 2 -> 3 -> 2
(accumulation 2, samples excluded from step 2 on).

- ``global_step`` goes on from the checkpoint at every resume: the run's step numbers are 1, 2, ... once each;
- no checkpoint folder is written twice, and each is the newest state it names (its loader state is where
  the run's data stood after that step);
- ``shufflepoint which`` on the last checkpoint answers every step of the run with what each rank trained in
  it, on the layout that ran it; an earlier checkpoint answers its own steps and refuses the later ones.
"""

import json
import os

import pytest

pytest.importorskip("transformers", reason="the transformers extra is not installed")

from shufflepoint._tools import cli  # noqa: E402
from shufflepoint._tools.launch import launch  # noqa: E402

pytestmark = pytest.mark.timeout(900)
WORKER = os.path.join(os.path.dirname(__file__), "workers", "trainer_chain_worker.py")


def _log(out, leg, world):
    """Per rank, [(global_step, [ids of each micro-batch])] of one leg, and the leg's first global_step."""
    steps, begins = [], set()
    for rank in range(world):
        with open(os.path.join(out, f"{leg}.rank{rank}.jsonl")) as f:
            lines = [json.loads(line) for line in f]
        begins.add(lines[0]["begin"])
        steps.append([(line["step"], line["ids"]) for line in lines[1:]])
    assert len(begins) == 1
    return steps, begins.pop()


def _saved(out, leg):
    with open(os.path.join(out, f"{leg}.saved.rank0.json")) as f:
        return json.load(f)


def _chain(out, legs, options):
    """Run the legs ((name, world, kill_at), ...); returns {step: {rank: ids}}, {step: batches per rank through
    it}, and the checkpoints each leg saved."""
    trained, through, saved, position, last = {}, {}, {}, 0, 0
    for name, world, kill_at in legs:
        command = [WORKER, out, name, *options] + (["--kill-at", str(kill_at)] if kill_at else [])
        if kill_at:
            result = launch(command, world, kill_when=os.path.join(out, f"{name}.killed"), timeout=400)
            assert result.killed, result.stderr[-3000:]
        else:
            launch(command, world, timeout=400).check()
        ranks, begin = _log(out, name, world)
        assert begin == last, f"{name}: resumed at global_step {begin}, the checkpoint is {last}"
        numbers = [step for step, _ in ranks[0]]
        assert numbers == list(range(last + 1, last + 1 + len(numbers))), f"{name}: steps {numbers}"
        for index, step in enumerate(numbers):
            trained[step] = {rank: [i for batch in ranks[rank][index][1] for i in batch] for rank in range(world)}
            position += len(ranks[0][index][1])
            through[step] = position
        saved[name], last = _saved(out, name), numbers[-1]
        assert saved[name][-1] == last
    return trained, through, saved


def _which(folder, step, capsys):
    code = cli.main(["which", folder, "--step", str(step), "--dataset", f"{WORKER}:dataset", "--no-locate",
                     "--json", "-"])
    found = capsys.readouterr()
    return code, json.loads(found.out), found.err


def _check(out, trained, through, saved, capsys):
    every = [step for steps in saved.values() for step in steps]
    assert len(every) == len(set(every)), f"a checkpoint written twice: {saved}"
    run = os.path.join(out, "run")
    folders = sorted(int(name.split("-")[1]) for name in os.listdir(run) if name.startswith("checkpoint-"))
    assert folders == sorted(every)
    for step in folders:
        folder = os.path.join(run, f"checkpoint-{step}")
        with open(os.path.join(folder, "trainer_state.json")) as f:
            assert json.load(f)["global_step"] == step
        with open(os.path.join(folder, "shufflepoint_loader.json")) as f:
            assert json.load(f)["steps"] == through[step], f"checkpoint-{step} is not the state after step {step}"
    last = os.path.join(run, f"checkpoint-{max(trained)}")
    for step, ranks in sorted(trained.items()):
        code, answer, err = _which(last, step, capsys)
        assert code == 0, err
        assert {int(r): [e["index"] for e in v] for r, v in answer["ranks"].items()} == ranks, step
    earlier = min(folders[1:-1], key=lambda s: abs(s - max(trained) // 2))
    code, answer, _ = _which(os.path.join(run, f"checkpoint-{earlier}"), earlier, capsys)
    assert code == 0 and {int(r): [e["index"] for e in v] for r, v in answer["ranks"].items()} == trained[earlier]
    code, answer, err = _which(os.path.join(run, f"checkpoint-{earlier}"), earlier + 1, capsys)
    assert code == 2 and answer["exit_code"] == 2 and len(err.strip().splitlines()) == 1
    assert f"saved at optimizer step {earlier}" in answer["error"]


def test_two_to_one_to_three_numbers_every_step_once_and_answers_each(tmp_path, capsys):
    # 48 samples, batch 4: 6 steps an epoch on 2 processes, 12 on 1, 4 on 3. Killed at 9 (epoch 1, 3 batches in)
    # and at 18 (epoch 2, 3 batches of 1 process in); the 3-process run would number its steps from 9 by the data.
    out = str(tmp_path)
    trained, through, saved = _chain(out, [("a", 2, 9), ("b", 1, 18), ("c", 3, None)], ["--save-steps", "3"])
    assert max(trained) == 21 and saved == {"a": [3, 6, 9], "b": [12, 15, 18], "c": [21]}
    _check(out, trained, through, saved, capsys)


def test_two_to_three_to_two_with_accumulation_and_an_exclusion(tmp_path, capsys):
    out = str(tmp_path)
    options = ["--save-steps", "1", "--accumulation", "2", "--exclude-from", "2"]
    trained, through, saved = _chain(out, [("a", 2, 4), ("b", 3, 6), ("c", 2, None)], options)
    excluded = set(range(5))
    assert not {i for step, ranks in trained.items() if step > 2 for ids in ranks.values() for i in ids} & excluded
    _check(out, trained, through, saved, capsys)
