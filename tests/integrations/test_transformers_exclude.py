"""ExcludeSamples: the Trainer's train loader skips the excluded samples from the given step on, and a
resume from a checkpoint keeps skipping them (the loader's state carries them)."""

import json
import os

import pytest

transformers = pytest.importorskip("transformers", reason="the transformers extra is not installed")

import torch  # noqa: E402

from shufflepoint.integrations.transformers import LOADER_STATE_FILE, ExcludeSamples, Trainer  # noqa: E402
from shufflepoint.integrations.transformers._trainer import RUN_FILE  # noqa: E402
from trainer_parts import Tokens, tiny_llama  # noqa: E402

BAD = [3, 4, 17, 20]


class Seen(transformers.TrainerCallback):
    """Which dataset indices each optimizer step trained on (input_ids[:, 0] is the index)."""

    def __init__(self, collate_log):
        self.log, self.steps = collate_log, []

    def on_step_end(self, args, state, control, **kwargs):
        self.steps.append((state.global_step, list(self.log)))
        self.log.clear()


def _trainer(tmp_path, callbacks, **overrides):
    settings = dict(output_dir=str(tmp_path), per_device_train_batch_size=4, num_train_epochs=2, report_to=[],
                    use_cpu=True, seed=7, save_strategy="steps", save_steps=3, logging_strategy="no",
                    disable_tqdm=True)
    log = []

    def collate(samples):
        log.extend(int(s["input_ids"][0]) for s in samples)
        return {key: torch.stack([s[key] for s in samples]) for key in ("input_ids", "labels")}

    seen = Seen(log)
    trainer = Trainer(model=tiny_llama(), args=transformers.TrainingArguments(
        **(settings | overrides)), train_dataset=Tokens(24), data_collator=collate, callbacks=[*callbacks, seen])
    return trainer, seen


def test_excluded_samples_are_not_trained_on_from_the_step_on_and_after_a_resume(tmp_path):
    trainer, seen = _trainer(tmp_path, [ExcludeSamples(BAD, from_step=2)])
    trainer.train()
    later = [i for step, indices in seen.steps if step > 2 for i in indices]
    assert later and not set(later) & set(BAD)
    epoch_1 = [i for _, indices in seen.steps[-5:] for i in indices]  # 20 samples left: 5 steps of 4
    assert sorted(epoch_1) == sorted(set(range(24)) - set(BAD))
    with open(os.path.join(str(tmp_path), "checkpoint-3", LOADER_STATE_FILE)) as f:
        assert json.load(f)["excluded"] == [3, 2, 12, 1, 2, 1]  # [3, 5), [17, 18), [20, 21)
    resumed, seen_again = _trainer(tmp_path, [])  # no callback: the checkpoint's state excludes them
    resumed.train(resume_from_checkpoint=os.path.join(str(tmp_path), "checkpoint-3"))
    after = [i for _, indices in seen_again.steps for i in indices]
    assert after and not set(after) & set(BAD)
    assert after == [i for step, indices in seen.steps if step > 3 for i in indices]  # exactly, after step 3


def test_it_needs_a_shufflepoint_trainer_and_int_indices(tmp_path):
    with pytest.raises(TypeError, match=r"indices: found 1.5 of type float"):
        ExcludeSamples([1.5])
    with pytest.raises(ValueError, match=r"from_step: found -1"):
        ExcludeSamples([1], from_step=-1)
    args = transformers.TrainingArguments(output_dir=str(tmp_path), report_to=[], use_cpu=True)
    stock_loader = torch.utils.data.DataLoader(Tokens(24), batch_size=4)  # what a stock Trainer trains from
    with pytest.raises(TypeError, match=r"found a DataLoader as the Trainer's train loader\n"
                                        r"  expected: a shufflepoint.DataLoader"):
        ExcludeSamples([1]).on_train_begin(args, transformers.TrainerState(), None, train_dataloader=stock_loader)


class Rates(transformers.TrainerCallback):
    def __init__(self):
        self.rates = []

    def on_step_end(self, args, state, control, lr_scheduler=None, **kwargs):
        self.rates.append((state.global_step, lr_scheduler.get_last_lr()[0]))


def _run(tmp_path, callbacks, resume=None, **overrides):
    rates = Rates()
    trainer, seen = _trainer(tmp_path, [*callbacks, rates], save_steps=1, lr_scheduler_type="linear", **overrides)
    trainer.train(resume_from_checkpoint=resume)
    return trainer, seen.steps, rates.rates


@pytest.mark.skipif(int(transformers.__version__.split(".")[0]) < 5,
                    reason="a resume keeps its own steps by _init_training_state and _run_epoch (transformers 5)")
@pytest.mark.parametrize(("from_step", "accumulation", "max_steps"), [(2, 1, -1), (0, 1, -1), (3, 2, -1), (2, 1, 9)])
def test_a_run_with_an_exclusion_resumes_with_its_own_steps_batches_and_learning_rates(
        tmp_path, from_step, accumulation, max_steps):
    # Excluding samples shortens the epochs after the Trainer counted them: the resume is placed by what
    # the loader received in its epoch (batches_this_epoch) and keeps the saved run's global_step.
    settings = dict(gradient_accumulation_steps=accumulation, max_steps=max_steps)
    trainer, steps, rates = _run(tmp_path / "full", [ExcludeSamples(BAD, from_step=from_step)], **settings)
    last = trainer.state.global_step
    if max_steps < 0:  # the last epoch: every sample left, once
        assert sorted([i for _, indices in steps for i in indices][-20:]) == sorted(set(range(24)) - set(BAD))
    if max_steps < 0:
        assert trainer.state.max_steps == last and rates[-1][1] == 0.0  # the schedule ends with the data
    for checkpoint in range(1, last):
        saved = os.path.join(tmp_path / "full", f"checkpoint-{checkpoint}")  # the callback again: harmless
        resumed, steps_after, rates_after = _run(tmp_path / f"resumed-{checkpoint}",
                                                 [ExcludeSamples(BAD, from_step=from_step)], saved, **settings)
        assert steps_after == [(step, indices) for step, indices in steps if step > checkpoint], checkpoint
        assert rates_after == [(step, rate) for step, rate in rates if step > checkpoint], checkpoint
        assert resumed.state.global_step == last


@pytest.mark.skipif(int(transformers.__version__.split(".")[0]) < 5,
                    reason="a resume keeps its own steps by _init_training_state and _run_epoch (transformers 5)")
def test_a_resume_with_another_accumulation_is_placed_by_the_data_not_the_saved_steps(tmp_path):
    # The saved run's accumulation is recorded beside its loader state (TrainerState does not keep it): with
    # another one, its global_step counts other steps, so the resume is placed by the loader's position.
    trainer, steps, _ = _run(tmp_path / "full", [ExcludeSamples(BAD)])
    assert json.load(open(tmp_path / "full" / "checkpoint-7" / RUN_FILE))["gradient_accumulation_steps"] == 1
    resumed, steps_after, _ = _run(tmp_path / "resumed", [ExcludeSamples(BAD)],
                                   os.path.join(tmp_path / "full", "checkpoint-7"), gradient_accumulation_steps=2)
    left = [i for step, indices in steps if step > 7 for i in indices]
    assert sorted(i for _, indices in steps_after for i in indices) == sorted(left)
    # the data is placed at step 4 of this run's cut (20 samples an epoch: 5 batches, 3 steps of 2; 2 batches in):
    # its 2 steps left are numbered on from the saved global_step 7
    assert [step for step, _ in steps_after] == [8, 9] and resumed.state.global_step == 9
