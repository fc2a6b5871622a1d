"""A batch-size ramp inside a Hugging Face Trainer run: a callback calls ``train_dataloader.set_batch_size(b)``.
Every sample is trained once per epoch whatever the change (up, down, at an epoch's end, with gradient
accumulation), the run still ends where its epochs of data end, the learning rate's horizon follows, and a
run resumed after the ramp (in a new Trainer, from the checkpoint's files) trains the saved run's samples."""

from collections import Counter

import pytest

transformers = pytest.importorskip("transformers", reason="the transformers extra is not installed")

import torch  # noqa: E402

from shufflepoint.integrations.transformers import Trainer  # noqa: E402
from trainer_parts import Tokens, tiny_llama  # noqa: E402

N = 24
# 4.57's loop counts an epoch's steps once, before a callback can change the batch size (no _run_epoch to
# hook): a smaller batch there drops the epoch's tail (docs/integrations.md says so).
pytestmark = pytest.mark.skipif(int(transformers.__version__.split(".")[0]) < 5,
                                reason="a batch-size ramp needs transformers >= 5 (Trainer._run_epoch)")


class Recorder:
    """The collate_fn: records the sample of every batch the Trainer trains on (the id is input_ids[0])."""

    def __init__(self):
        self.batches = []

    def __call__(self, samples):
        self.batches.append([int(s["input_ids"][0]) for s in samples])
        return {key: torch.stack([s[key] for s in samples]) for key in ("input_ids", "labels")}


class Ramp(transformers.TrainerCallback):
    """The batch size by optimizer step: from ``at`` on, ``size``; applied again when a resumed run begins."""

    def __init__(self, at, size):
        self.at, self.size = at, size

    def _apply(self, state, loader):
        if state.global_step >= self.at and loader.batch_size != self.size:
            loader.set_batch_size(self.size)

    def on_train_begin(self, args, state, control, train_dataloader=None, **kwargs):
        self._apply(state, train_dataloader)

    def on_step_end(self, args, state, control, train_dataloader=None, **kwargs):
        self._apply(state, train_dataloader)


def _trainer(tmp_path, recorder, ramp, **overrides):
    settings = dict(output_dir=str(tmp_path), per_device_train_batch_size=4, num_train_epochs=2, report_to=[],
                    use_cpu=True, seed=7, save_strategy="no", logging_strategy="no", disable_tqdm=True,
                    lr_scheduler_type="linear")
    args = transformers.TrainingArguments(**(settings | overrides))
    return Trainer(model=tiny_llama(), args=args, train_dataset=Tokens(N), data_collator=recorder, callbacks=[ramp])


@pytest.mark.parametrize("at, size, accumulation", [
    (2, 2, 1),  # down, inside epoch 0
    (2, 8, 1),  # up
    (2, 2, 2),
    (2, 3, 4),  # at epoch 0's end (2 optimizer steps of 4 batches)
    (2, 5, 3),  # a size that leaves a short last batch
    (1, 1, 2),
])
def test_every_sample_is_trained_once_per_epoch_across_a_ramp(tmp_path, at, size, accumulation):
    recorder = Recorder()
    trainer = _trainer(tmp_path, recorder, Ramp(at, size), gradient_accumulation_steps=accumulation)
    trainer.train()
    trained = [x for batch in recorder.batches for x in batch]
    assert Counter(trained) == Counter({i: 2 for i in range(N)}), recorder.batches
    assert Counter(trained[:N]) == Counter(range(N))  # epoch 0 whole before epoch 1 begins
    assert {len(b) for b in recorder.batches[-3:]} <= {size, N % size or size}  # the ramp holds
    state = trainer.state
    assert state.global_step == state.max_steps  # the run ended where its epochs of data end
    lambdas = trainer.lr_scheduler.lr_lambdas
    assert all(f.keywords["num_training_steps"] == state.global_step for f in lambdas)  # the horizon followed


@pytest.mark.parametrize("checkpoint", [3, 6, 12])  # after the ramp inside epoch 0, and in epoch 1
def test_a_run_resumed_after_a_ramp_trains_the_saved_run_s_samples_at_its_steps(tmp_path, checkpoint):
    whole = Recorder()
    reference = _trainer(tmp_path / "whole", whole, Ramp(2, 2))
    reference.train()
    first = Recorder()
    _trainer(tmp_path / "first", first, Ramp(2, 2), save_strategy="steps", save_steps=3, max_steps=checkpoint).train()
    assert first.batches == whole.batches[:checkpoint]
    resumed = Recorder()
    trainer = _trainer(tmp_path / "first", resumed, Ramp(2, 2))
    trainer.train(resume_from_checkpoint=str(tmp_path / "first" / f"checkpoint-{checkpoint}"))
    assert resumed.batches == whole.batches[checkpoint:]  # batches of 2, the same samples
    assert trainer.state.global_step == trainer.state.max_steps == reference.state.global_step  # the same steps


def test_a_max_steps_run_keeps_its_steps_across_a_ramp_and_a_resume(tmp_path):
    """With max_steps the run keeps its number of steps (they then cover less data after a smaller batch);
    resumed after the ramp, it ends at the same step with the same batches."""
    whole = Recorder()
    reference = _trainer(tmp_path / "whole", whole, Ramp(2, 2), max_steps=10)
    reference.train()
    assert reference.state.global_step == 10 and [len(b) for b in whole.batches] == [4, 4] + [2] * 8
    _trainer(tmp_path / "first", Recorder(), Ramp(2, 2), save_strategy="steps", save_steps=5, max_steps=10).train()
    resumed = Recorder()
    trainer = _trainer(tmp_path / "first", resumed, Ramp(2, 2), max_steps=10)
    trainer.train(resume_from_checkpoint=str(tmp_path / "first" / "checkpoint-5"))
    assert resumed.batches == whole.batches[5:] and trainer.state.global_step == 10
