"""shufflepoint.integrations.transformers.Trainer in one process: the loader it builds from the Trainer's
settings, what it refuses (by name), the version range, and a checkpoint without loader state.
The resume itself is tested on 2 processes: tests/distributed/test_integration_transformers.py."""

import os
import warnings

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


def test_ignore_data_skip_is_refused_on_resume(tmp_path):
    folder = _train_and_save(tmp_path)
    trainer = Trainer(model=_model(), args=_args(tmp_path, ignore_data_skip=True), train_dataset=Tokens(),
                      data_collator=_collate)
    with warnings.catch_warnings(), pytest.raises(ValueError, match="ignore_data_skip: found True\n  expected: False"):
        trainer.train(resume_from_checkpoint=folder)


def test_the_mixin_goes_on_another_trainer_subclass(tmp_path):
    """A TRL-like subclass with its own constructor arguments and loss: the mixin goes first."""
    from shufflepoint.integrations.transformers import ResumableTrainerMixin

    class SFTLike(transformers.Trainer):
        def __init__(self, *args, formatting_func=None, **kwargs):
            super().__init__(*args, **kwargs)
            self.formatting_func = formatting_func

        def compute_loss(self, model, inputs, *args, **kwargs):
            return super().compute_loss(model, inputs, *args, **kwargs)

    class Resumable(ResumableTrainerMixin, SFTLike):
        pass

    trainer = Resumable(model=_model(), args=_args(tmp_path), train_dataset=Tokens(), data_collator=_collate,
                        formatting_func=str, seed_per_sample=True)
    assert trainer.formatting_func is str
    assert isinstance(trainer.get_train_dataloader(), shufflepoint.DataLoader)


def test_the_schedule_continues_at_the_placed_step():
    from shufflepoint.integrations.transformers._schedule import continue_schedule

    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    linear = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1 - step / 10)
    continue_schedule(linear, optimizer, 4)
    assert linear.last_epoch == 4 and optimizer.param_groups[0]["lr"] == pytest.approx(0.6)
    assert linear.get_last_lr() == [pytest.approx(0.6)]
    stepped = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2)
    with pytest.warns(shufflepoint.ResumeWarning, match="StepLR continues at its saved step count"):
        continue_schedule(stepped, optimizer, 4)


def test_a_trainer_listed_before_the_mixin_is_refused_at_class_creation():
    """Listed after a Trainer, the mixin's methods are shadowed: the class would be the stock Trainer."""
    from shufflepoint.integrations.transformers import ResumableTrainerMixin

    class SFTLike(transformers.Trainer):
        pass

    with pytest.raises(TypeError, match=r"class Wrong\(SFTLike, ResumableTrainerMixin\): found SFTLike comes before "
                                        r"ResumableTrainerMixin\n(.|\n)*  fix: list the mixin first, "
                                        r"class Wrong\(ResumableTrainerMixin, SFTLike\)"):
        class Wrong(SFTLike, ResumableTrainerMixin):
            pass
    with pytest.raises(TypeError, match="Trainer comes before ResumableTrainerMixin"):
        class AlsoWrong(transformers.Trainer, ResumableTrainerMixin):
            pass
    with pytest.raises(TypeError, match="SFTLike comes before ResumableTrainerMixin"):
        class OverOurs(SFTLike, Trainer):  # our Trainer after another Trainer subclass: the same shadowing
            pass

    class Right(ResumableTrainerMixin, SFTLike):
        pass

    class Further(Right):  # a subclass of a right one is right, and so is a plain mixin on the left
        pass

    class Logging:
        pass

    class WithAnotherMixin(Logging, ResumableTrainerMixin, SFTLike):
        pass

    assert [Right.get_train_dataloader, Further.get_train_dataloader, WithAnotherMixin.get_train_dataloader] == [
        ResumableTrainerMixin.get_train_dataloader] * 3


def test_the_mixin_without_a_trainer_is_refused_at_init(tmp_path):
    from shufflepoint.integrations.transformers import ResumableTrainerMixin

    class Alone(ResumableTrainerMixin):
        pass

    with pytest.raises(TypeError, match="Alone: found ResumableTrainerMixin found no transformers.Trainer among its "
                                        "bases\n  expected: a transformers.Trainer base"):
        Alone(model=_model(), args=_args(tmp_path))


def test_trl_sft_trainer_before_the_mixin_is_refused():
    trl = pytest.importorskip("trl")
    from shufflepoint.integrations.transformers import ResumableTrainerMixin

    with pytest.raises(TypeError, match=r"found SFTTrainer comes before ResumableTrainerMixin\n(.|\n)*"
                                        r"  fix: list the mixin first, "
                                        r"class Wrong\(ResumableTrainerMixin, SFTTrainer\)"):
        class Wrong(trl.SFTTrainer, ResumableTrainerMixin):
            pass

    class Right(ResumableTrainerMixin, trl.SFTTrainer):
        pass

    assert Right.get_train_dataloader is ResumableTrainerMixin.get_train_dataloader


def test_the_trainer_state_file_is_transformers_own():
    from transformers.trainer import TRAINER_STATE_NAME

    assert _touch.TRAINER_STATE_FILE == TRAINER_STATE_NAME
