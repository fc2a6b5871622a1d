"""``shufflepoint which`` on a real HF Trainer checkpoint: with gradient accumulation 2, each optimizer step
(numbered as the Trainer numbers them, across an epoch's short last step) is answered with the samples the
Trainer's collator saw for it. The renumbering at a resize is covered by
``tests/tools/test_cli_which.py`` and ``test_which_trainer.py``."""

import json
import os

import pytest

transformers = pytest.importorskip("transformers", reason="the transformers extra is not installed")

import torch  # noqa: E402

from shufflepoint._tools import cli  # noqa: E402
from shufflepoint.integrations.transformers import Trainer  # noqa: E402
from trainer_parts import Tokens, tiny_llama  # noqa: E402

SAMPLES = 20  # batch 4: 5 batches an epoch, 3 optimizer steps of GA 2 (the last one short)


def tokens():
    return Tokens(SAMPLES)


def test_optimizer_steps_of_a_trainer_checkpoint(tmp_path, capsys):
    seen = []

    def collate(samples):
        seen.append([int(s["input_ids"][0]) for s in samples])
        return {key: torch.stack([s[key] for s in samples]) for key in ("input_ids", "labels")}

    args = transformers.TrainingArguments(
        output_dir=str(tmp_path), per_device_train_batch_size=4, gradient_accumulation_steps=2, max_steps=5,
        save_strategy="steps", save_steps=5, report_to=[], use_cpu=True, seed=7, logging_strategy="no",
        disable_tqdm=True)
    Trainer(model=tiny_llama(), args=args, train_dataset=Tokens(SAMPLES),
            data_collator=collate).train()
    capsys.readouterr()  # the Trainer's own printout
    # the Trainer's steps: 1 = batches 0-1, 2 = 2-3, 3 = 4 (the epoch's short last step), 4 = 5-6, 5 = 7-8
    batches_of = {1: [0, 1], 2: [2, 3], 3: [4], 4: [5, 6], 5: [7, 8]}
    assert len(seen) == 9
    folder = os.path.join(str(tmp_path), "checkpoint-5")
    for update, batches in batches_of.items():
        assert cli.main(["which", folder, "--step", str(update), "--accumulation", "2", "--dataset",
                         f"{__file__}:tokens", "--json", "-"]) == 0
        answer = json.loads(capsys.readouterr().out)
        assert answer["kind"] == "hf_trainer" and answer["trainer_step"] == 5
        assert [e["index"] for e in answer["ranks"]["0"]] == [i for b in batches for i in seen[b]], update
    assert cli.main(["which", folder, "--step", "5", "--accumulation", "1", "--dataset", f"{__file__}:tokens"]) == 2
    assert "--accumulation: found 1" in capsys.readouterr().err
