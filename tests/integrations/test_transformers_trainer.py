"""shufflepoint.integrations.transformers.Trainer in one process: the loader it builds from the Trainer's
settings, what it refuses (by name), the version range, and a checkpoint without loader state.
The resume itself is tested on 2 processes: tests/distributed/test_integration_transformers.py."""

import os

import pytest

transformers = pytest.importorskip("transformers", reason="the transformers extra is not installed")

import torch  # noqa: E402

import shufflepoint  # noqa: E402
from shufflepoint.integrations.transformers import LOADER_STATE_FILE, Trainer, _touch  # noqa: E402


class Tokens(torch.utils.data.Dataset):
    def __len__(self):
        return 24

    def __getitem__(self, index):
        ids = torch.tensor([index, index + 1, index + 2])
        return {"input_ids": ids, "labels": ids, "sample_id": index}  # sample_id: not a forward argument


def _model():
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=8, intermediate_size=16, num_hidden_layers=1,
                                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=4)
    return transformers.LlamaForCausalLM(config)


def _args(tmp_path, **overrides):
    settings = dict(output_dir=str(tmp_path), per_device_train_batch_size=4, num_train_epochs=2, report_to=[],
                    use_cpu=True, seed=7, save_strategy="no", logging_strategy="no", disable_tqdm=True)
    return transformers.TrainingArguments(**(settings | overrides))


def _collate(samples):
    return {key: torch.stack([s[key] for s in samples]) for key in ("input_ids", "labels")}


def test_the_loader_is_built_from_the_trainers_settings(tmp_path):
    args = _args(tmp_path, data_seed=99, dataloader_drop_last=True, per_device_train_batch_size=5)
    trainer = Trainer(model=_model(), args=args, train_dataset=Tokens(), data_collator=_collate)
    loader = trainer.get_train_dataloader()
    assert isinstance(loader, shufflepoint.DataLoader)
    assert (loader.batch_size, loader.seed, loader.drop_last, loader.world_size, loader.rank) == (5, 99, True, 1, 0)
    assert len(loader) == 24 // 5
    batch = next(iter(loader))
    assert set(batch) == {"input_ids", "labels"}, "the unused column was not removed"
    assert not hasattr(loader, "_is_accelerate_prepared")  # never through accelerator.prepare
    assert Trainer(model=_model(), args=_args(tmp_path), train_dataset=Tokens(),
                   data_collator=_collate).get_train_dataloader().seed == 7  # no data_seed: seed


def test_seed_per_sample_and_transform_reach_the_loader(tmp_path):
    def transform(sample, rng):
        return sample | {"input_ids": sample["input_ids"] + int(rng.integers(0, 10))}

    trainer = Trainer(model=_model(), args=_args(tmp_path), train_dataset=Tokens(), data_collator=_collate,
                      seed_per_sample=True, transform=transform)
    loader = trainer.get_train_dataloader()
    assert loader.dataset.dataset.__class__ is Tokens  # keyed: the loader wraps the dataset
    first = next(iter(loader))["input_ids"]
    again = next(iter(Trainer(model=_model(), args=_args(tmp_path), train_dataset=Tokens(), data_collator=_collate,
                              seed_per_sample=True, transform=transform).get_train_dataloader()))["input_ids"]
    assert torch.equal(first, again)


def test_what_it_cannot_do_is_refused_by_name(tmp_path):
    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter([])

    with pytest.raises(TypeError, match="train_dataset: found an IterableDataset\n  expected: a map-style dataset"):
        Trainer(model=_model(), args=_args(tmp_path, max_steps=2), train_dataset=Stream()).get_train_dataloader()
    grouping = {"train_sampling_strategy": "group_by_length"} if hasattr(
        transformers.TrainingArguments, "train_sampling_strategy") else {"group_by_length": True}
    trainer = Trainer(model=_model(), args=_args(tmp_path, **grouping), train_dataset=Tokens())
    with pytest.raises(ValueError, match="train_sampling_strategy / group_by_length: found '.*'\n  expected: 'random'"):
        trainer.get_train_dataloader()


def test_an_untested_transformers_is_refused_unless_forced(tmp_path, monkeypatch):
    monkeypatch.setattr(_touch, "installed_version", lambda: "5.99.0")
    with pytest.raises(RuntimeError, match=r"transformers: found transformers 5\.99\.0\n  expected: a tested version"):
        Trainer(model=_model(), args=_args(tmp_path), train_dataset=Tokens())
    with pytest.warns(shufflepoint.ResumeWarning, match="outside the tested range"):
        Trainer(model=_model(), args=_args(tmp_path), train_dataset=Tokens(), force_version=True)
    assert [_touch.version_in_range(v) for v in ("4.56.2", "4.57.1", "5.25.0", "5.25.1.dev0", "5.26.0")] == [
        False, True, True, False, False]


def _train_and_save(tmp_path):
    args = _args(tmp_path, save_strategy="steps", save_steps=4, max_steps=4)
    trainer = Trainer(model=_model(), args=args, train_dataset=Tokens(), data_collator=_collate)
    trainer.train()
    folder = os.path.join(str(tmp_path), "checkpoint-4")
    assert os.path.exists(os.path.join(folder, LOADER_STATE_FILE))
    return folder


def test_a_checkpoint_without_loader_state_is_placed_by_global_step_with_a_warning(tmp_path):
    folder = _train_and_save(tmp_path)
    os.remove(os.path.join(folder, LOADER_STATE_FILE))
    trainer = Trainer(model=_model(), args=_args(tmp_path), train_dataset=Tokens(), data_collator=_collate)
    with pytest.warns(shufflepoint.ResumeWarning, match=f"{LOADER_STATE_FILE} not found"):
        trainer.train(resume_from_checkpoint=folder)
    assert trainer.state.global_step == 2 * 6


def test_every_callback_sees_the_runs_step_numbers_from_on_train_begin(tmp_path):
    """Resumed with accumulation 2 from a checkpoint at step 4 of accumulation 1 (4 of 6 batches), the data is
    placed at step 2 of this run's cut (3 steps an epoch), and the run goes on from its saved global_step 4: a
    callback passed to the constructor (listed before the integration's own) sees 4, and the run's end,
    4 + 1 + 3 = 8, from on_train_begin on (4.x numbers the run in a callback's on_train_begin; 5.x before the
    callbacks are called)."""
    folder = _train_and_save(tmp_path)
    seen = []

    class Seen(transformers.TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            seen.append((state.global_step, state.max_steps))

    trainer = Trainer(model=_model(), args=_args(tmp_path, gradient_accumulation_steps=2), train_dataset=Tokens(),
                      data_collator=_collate, callbacks=[Seen()])
    trainer.train(resume_from_checkpoint=folder)
    assert seen == [(4, 8)] and trainer.state.global_step == 8


class Seen(Trainer):
    """Records the sample ids (first token) of every batch it trains."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.seen = []

    def training_step(self, model, inputs, *args, **kwargs):
        self.seen.append(inputs["input_ids"][:, 0].tolist())
        return super().training_step(model, inputs, *args, **kwargs)


def test_ignore_data_skip_restarts_the_checkpoints_epoch_as_stock_with_a_warning(tmp_path):
    """Stock: on resume, no data skipped: the checkpoint's epoch from its first batch, global_step and the run's
    end (max_steps) going on from the checkpoint's. Saved at step 4 of epoch 0 (6 steps an epoch, 12 in all)."""
    folder = _train_and_save(tmp_path)
    whole = Seen(model=_model(), args=_args(tmp_path / "whole"), train_dataset=Tokens(), data_collator=_collate)
    whole.train()
    trainer = Seen(model=_model(), args=_args(tmp_path, ignore_data_skip=True), train_dataset=Tokens(),
                   data_collator=_collate)
    with pytest.warns(shufflepoint.ResumeWarning, match=r"ignore_data_skip=True: the data restarts at the first "
                      r"batch of epoch 0, while global_step goes on from 4\. Up to 16 samples of epoch 0"):
        trainer.train(resume_from_checkpoint=folder)
    assert trainer.seen == whole.seen[:8], "not epoch 0 from its first batch, then epoch 1"
    assert trainer.state.global_step == 12


def test_ignore_data_skip_continues_on_a_dataset_whose_length_changed(tmp_path):
    """An exact resume refuses a dataset of another length; ignore_data_skip=True restarts the checkpoint's epoch
    in the new dataset's order, and says what may repeat."""

    class More(Tokens):
        def __len__(self):
            return 28

    folder = _train_and_save(tmp_path)
    refused = Trainer(model=_model(), args=_args(tmp_path), train_dataset=More(), data_collator=_collate)
    with pytest.raises(shufflepoint.StateError, match="state field 'n': found 24\n  expected: 28 .*\n.*\n  fix: "
                       "resume with the dataset the checkpoint was written with; or, to go on with this one, pass "
                       "ignore_data_skip=True: epoch 0 restarts"):
        refused.train(resume_from_checkpoint=folder)
    fresh = Seen(model=_model(), args=_args(tmp_path / "fresh", max_steps=3), train_dataset=More(),
                 data_collator=_collate)
    fresh.train()
    trainer = Seen(model=_model(), args=_args(tmp_path, ignore_data_skip=True), train_dataset=More(),
                   data_collator=_collate)
    with pytest.warns(shufflepoint.ResumeWarning, match="the dataset has 28 samples now, the checkpoint's 24: "
                      "epoch 0 is this dataset's order.*Up to 16 samples of epoch 0"):
        trainer.train(resume_from_checkpoint=folder)
    assert trainer.seen[:3] == fresh.seen, "not epoch 0 of the new dataset from its first batch"
    assert trainer.state.global_step == 2 * 7  # 28 / 4 = 7 steps an epoch now


def test_split_batches_on_one_process_and_even_batches_without_drop_last_are_named(tmp_path):
    split = Trainer(model=_model(), args=_args(tmp_path, accelerator_config={"split_batches": True}),
                    train_dataset=Tokens(), data_collator=_collate)
    assert split.get_train_dataloader().batch_size == 4  # one process: the whole batch
    with pytest.raises(ValueError, match="accelerator_config.even_batches: found False\n  expected: True, or "
                       "even_batches=False with dataloader_drop_last=True"):
        Trainer(model=_model(), args=_args(tmp_path, accelerator_config={"even_batches": False}),
                train_dataset=Tokens(), data_collator=_collate)
    kept = Trainer(model=_model(), args=_args(tmp_path, accelerator_config={"even_batches": False},
                                               dataloader_drop_last=True), train_dataset=Tokens(),
                   data_collator=_collate)
    assert kept.get_train_dataloader().drop_last


def test_every_log_carries_the_data_wait_share(tmp_path):
    trainer = Trainer(model=_model(), args=_args(tmp_path, logging_strategy="steps", logging_steps=2, max_steps=4),
                      train_dataset=Tokens(), data_collator=_collate)
    trainer.train()
    logged = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert len(logged) == 2 and all(0 <= entry["data_wait_share"] <= 1 for entry in logged)
    assert trainer._shufflepoint_loader.data_wait().batches == 4


def test_a_stock_checkpoint_resumed_with_ignore_data_skip_starts_its_epoch_from_the_first_batch(tmp_path):
    folder = _train_and_save(tmp_path)
    os.remove(os.path.join(folder, LOADER_STATE_FILE))
    whole = Seen(model=_model(), args=_args(tmp_path / "whole", max_steps=2), train_dataset=Tokens(),
                 data_collator=_collate)
    whole.train()
    trainer = Seen(model=_model(), args=_args(tmp_path, ignore_data_skip=True), train_dataset=Tokens(),
                   data_collator=_collate)
    with pytest.warns(shufflepoint.ResumeWarning, match=f"{LOADER_STATE_FILE} not found"):
        trainer.train(resume_from_checkpoint=folder)
    assert trainer.seen[:2] == whole.seen and trainer.state.global_step == 12


def test_the_refusal_of_another_length_names_the_epoch_that_would_restart():
    """A checkpoint written at an epoch's end restarts the next epoch under ignore_data_skip: the refusal says so."""
    from shufflepoint.integrations.transformers._restart import refuse_another_length

    loader = shufflepoint.DataLoader(list(range(28)), batch_size=4, rank=0, world_size=1)
    for cursor, epoch in ((8, 0), (24, 1)):
        state = {"n": 24, "epoch": 0, "cursor": cursor, "world_size": 1, "batch_size": 4, "drop_last": False}
        with pytest.raises(shufflepoint.StateError, match=f"ignore_data_skip=True: epoch {epoch} restarts"):
            refuse_another_length(loader, state, "checkpoint-3")
