"""``shufflepoint which`` on real HF Trainer checkpoints after an exclusion (issue 32.3): 40 samples, batch 4,
accumulation 2, 3 epochs, ``ExcludeSamples([0, 1, 2, 3, 4])``: 35 samples an epoch, 9 batches, the fifth step
of each epoch one batch of 3 samples. Every step is answered from every checkpoint that holds it with the
samples the Trainer's collator saw for it, the accumulation read from the checkpoint; a later step is
refused. And every error of ``which`` is one line and exit 2, with a JSON error under ``--json``."""

import json
import os

import pytest

transformers = pytest.importorskip("transformers", reason="the transformers extra is not installed")

import torch  # noqa: E402

from shufflepoint._tools import cli  # noqa: E402
from shufflepoint.integrations.transformers import ExcludeSamples, Trainer  # noqa: E402
from trainer_parts import Tokens, tiny_llama  # noqa: E402

SAMPLES = 40


def tokens():
    return Tokens(SAMPLES)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The run, and what each optimizer step trained ({step: ids})."""
    out = tmp_path_factory.mktemp("which")
    log, steps = [], {}

    def collate(samples):
        log.extend(int(s["input_ids"][0]) for s in samples)
        return {key: torch.stack([s[key] for s in samples]) for key in ("input_ids", "labels")}

    class Steps(transformers.TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            steps[state.global_step] = list(log)
            log.clear()

    args = transformers.TrainingArguments(
        output_dir=str(out), per_device_train_batch_size=4, gradient_accumulation_steps=2, num_train_epochs=3,
        save_strategy="steps", save_steps=4, report_to=[], use_cpu=True, seed=7, logging_strategy="no",
        disable_tqdm=True)
    Trainer(model=tiny_llama(), args=args, train_dataset=tokens(), data_collator=collate,
            callbacks=[ExcludeSamples([0, 1, 2, 3, 4]), Steps()]).train()
    return str(out), steps


def _which(folder, *extra):
    return cli.main(["which", folder, *extra, "--dataset", f"{__file__}:tokens", "--no-locate", "--json", "-"])


def test_every_step_from_every_checkpoint_after_an_exclusion(trained, capsys):
    out, steps = trained
    assert sorted(steps) == list(range(1, 16)) and len(steps[5]) == 3 and len(steps[10]) == 3
    capsys.readouterr()
    for checkpoint in (4, 8, 12):
        folder = os.path.join(out, f"checkpoint-{checkpoint}")
        for step in range(1, checkpoint + 1):
            assert _which(folder, "--step", str(step)) == 0, capsys.readouterr().err
            answer = json.loads(capsys.readouterr().out)
            assert [e["index"] for e in answer["ranks"]["0"]] == steps[step], (checkpoint, step)
        assert _which(folder, "--step", str(checkpoint + 1)) == 2
        refused = capsys.readouterr()
        assert json.loads(refused.out)["exit_code"] == 2 and len(refused.err.strip().splitlines()) == 1
        assert f"saved at optimizer step {checkpoint}" in refused.err


def test_every_error_is_one_line_and_exit_2(trained, tmp_path, capsys):
    out, _ = trained
    folder = os.path.join(out, "checkpoint-8")
    broken = tmp_path / "broken"
    broken.mkdir()
    for name in os.listdir(folder):
        if os.path.isfile(os.path.join(folder, name)):
            (broken / name).write_bytes(open(os.path.join(folder, name), "rb").read())
    (broken / "trainer_state.json").write_text('{"global_step": 8,')
    script = tmp_path / "data.py"
    script.write_text("def tokens():\n    return list(range(40))\n")
    cases = [
        (["which", folder, "--step", "0"], "expected an optimizer step >= 1"),
        (["which", str(broken), "--step", "1"], "trainer_state.json: not readable as JSON"),
        (["which", folder, "--step", "1", "--json", str(tmp_path / "no" / "dir.json")], "--json: cannot write"),
        (["which", folder, "--step", str(2**62)], f"found {2**62}, but this checkpoint was saved at optimizer step 8"),
        (["which", folder, "--step", "1", "--accumulation", "1"], "--accumulation: found 1, but the checkpoint's run"),
    ]
    for argv, expected in cases:
        assert cli.main([*argv, "--dataset", f"{__file__}:tokens"]) == 2, argv
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and expected in err, (argv, err)
    assert cli.main(["which", folder, "--step", "1", "--dataset", str(script)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and f"expected {script}:NAME" in err
    assert cli.main(["which", folder, "--step", "99", "--dataset", f"{__file__}:tokens", "--json", "-"]) == 2
    refused = json.loads(capsys.readouterr().out)
    assert refused["exit_code"] == 2 and "--step: found 99" in refused["error"]
