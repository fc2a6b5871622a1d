"""The torchtitan data loader in one process: torchtitan's config machinery builds it, bad input is refused by
name, and torchtitan's own loader refuses another data-parallel degree (what the integration adds)."""

import os
import sys

import pytest
import torch

TITAN = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".venv-titan"))
if os.path.isdir(TITAN) and TITAN not in sys.path:
    sys.path.append(TITAN)
pytest.importorskip("torchtitan", reason="torchtitan is not installed: make test-torchtitan")

import shufflepoint  # noqa: E402
from shufflepoint.integrations.torchtitan import ShufflepointDataLoader, check_version, next_token_batch  # noqa: E402


def documents():
    return [{"input_ids": [1000 * d + i for i in range(2 + d % 5)]} for d in range(40)]


def packed(tokenizer, row_tokens):
    return shufflepoint.Packed(documents(), row_tokens, progress=False)


def build(dp_world_size=1, dp_rank=0, **config):
    return ShufflepointDataLoader.Config(build_dataset=packed, seed=5, **config).build(
        dp_world_size=dp_world_size, dp_rank=dp_rank, tokenizer=None, seq_len=5, local_batch_size=2,
        snapshot_every_n_steps=None)


def test_torchtitan_s_config_builds_it_and_its_batches_are_torchtitan_s():
    from torchtitan.components.dataloader import BaseDataLoader

    loader = build()
    assert isinstance(loader, BaseDataLoader) and isinstance(loader.config, ShufflepointDataLoader.Config)
    inputs, labels = next(iter(loader))
    assert set(inputs) == {"input", "positions"}
    assert inputs["input"].shape == labels.shape == (2, 5) and inputs["input"].dtype == torch.int64


def test_next_token_batch_shifts_inside_documents():
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    inputs, labels = next_token_batch({"input_ids": ids, "position_ids": torch.tensor([[0, 1, 0, 1, 2]])})
    assert inputs["input"].tolist() == [[5, 6, 7, 8]] and inputs["positions"].tolist() == [[0, 1, 0, 1]]
    assert labels.tolist() == [[6, -100, 8, 9]]


def test_epochs_end_the_iteration_and_the_state_is_shufflepoint_s():
    loader = build(epochs=1)
    steps = list(loader)
    assert len(steps) == len(loader.loader) and loader.loader.epoch == 1
    fresh = build(dp_world_size=3, dp_rank=2)
    fresh.load_state_dict(loader.state_dict())  # another degree: accepted
    assert fresh.loader.epoch == 1 and fresh.loader.cursor == 0


def test_bad_input_is_refused_by_name():
    with pytest.raises(ValueError, match="build_dataset: found None\n  expected: fn\\(tokenizer=, row_tokens=\\)"):
        ShufflepointDataLoader.Config().build(dp_world_size=1, dp_rank=0, seq_len=5, local_batch_size=2)
    with pytest.raises(TypeError, match="ShufflepointDataLoader: found mystery\n  expected: the arguments torchtitan"):
        ShufflepointDataLoader.Config(build_dataset=packed).build(dp_world_size=1, dp_rank=0, seq_len=5,
                                                                   local_batch_size=2, mystery=1)
    with pytest.raises(RuntimeError, match=r"torchtitan: found version 0\.2\.9\n  expected: one of 0\.3\.0"):
        check_version("0.2.9")
    with pytest.raises(shufflepoint.StateError, match="format"):
        build().load_state_dict({"dp_rank_0": b"...", "world_size": 2})  # torchtitan's own loader's state


def test_torchtitan_s_own_loader_refuses_another_dp_degree():
    """The gap this integration fills, measured against torchtitan 0.3.0 itself."""
    from torchtitan.components.dataloader import ParallelAwareDataloader

    class Tokens(torch.utils.data.IterableDataset):
        def __iter__(self):
            yield from range(100)

    saved = ParallelAwareDataloader(Tokens(), dp_rank=0, dp_world_size=2, batch_size=2)
    next(iter(saved))
    state = saved.state_dict()
    with pytest.raises(AssertionError, match="dp_degree is inconsistent"):
        ParallelAwareDataloader(Tokens(), dp_rank=0, dp_world_size=4, batch_size=2).load_state_dict(state)


def test_torchtitan_s_command_line_overrides_keep_the_loader_and_its_dataset_function():
    """torchtitan's ConfigManager runs tyro over the job config, with the config_registry's as default."""
    from dataclasses import dataclass, field

    import tyro
    from torchtitan.components.dataloader import BaseDataLoader
    from torchtitan.config.manager import custom_registry

    @dataclass(kw_only=True)
    class Job:  # the dataloader field as Trainer.Config declares it
        dataloader: BaseDataLoader.Config = field(default_factory=BaseDataLoader.Config)

    default = Job(dataloader=ShufflepointDataLoader.Config(build_dataset=packed, seed=7))
    job = tyro.cli(Job, args=["--dataloader.seed", "9", "--dataloader.num-workers", "2"], default=default,
                   registry=custom_registry)
    assert isinstance(job.dataloader, ShufflepointDataLoader.Config)
    assert (job.dataloader.seed, job.dataloader.num_workers, job.dataloader.build_dataset) == (9, 2, packed)
