"""``which`` finds the loader state in every kind of checkpoint the integrations write, and refuses by
name what holds none."""

from __future__ import annotations

import json
import os

import pytest
import torch

import shufflepoint
from shufflepoint._tools.which_checkpoint import CheckpointError, read_checkpoint


@pytest.fixture
def state():
    loader = shufflepoint.DataLoader(list(range(50)), 4, seed=11, world_size=2, rank=0)
    batches = iter(loader)
    next(batches), next(batches)
    return loader.state_dict()


def test_a_torch_save_dict_and_a_json_file(tmp_path, state):
    torch.save({"model": {"w": torch.zeros(2)}, "loader": state, "step": 2}, tmp_path / "ckpt.pt")
    found = read_checkpoint(str(tmp_path / "ckpt.pt"))
    assert (found.state, found.kind, found.where) == (state, "file", "ckpt.pt [loader]")
    (tmp_path / "state.json").write_text(json.dumps(state))
    assert read_checkpoint(str(tmp_path / "state.json")).state == state


def test_a_dcp_folder_reads_the_loader_entries_alone(tmp_path, state):
    import torch.distributed.checkpoint as dcp

    loader = shufflepoint.DataLoader(list(range(50)), 4, seed=11, world_size=2, rank=0, verify_ranks=False)
    loader.load_state_dict(state)
    with pytest.warns(UserWarning, match="single process"):
        dcp.save({"model": {"w": torch.ones(3)}, "data": loader, "nested": {"state": loader.state_dict()}},
                 checkpoint_id=str(tmp_path / "dcp"))
    found = read_checkpoint(str(tmp_path / "dcp"))
    assert found.kind == "dcp" and found.where == "dcp [data]"  # the first of the two
    assert found.state == state


def test_a_dcp_folder_without_a_loader_is_refused(tmp_path):
    import torch.distributed.checkpoint as dcp

    with pytest.warns(UserWarning):
        dcp.save({"model": {"w": torch.ones(3)}, "meta": {"format": "other"}}, checkpoint_id=str(tmp_path / "dcp"))
    with pytest.raises(CheckpointError, match=r"a DCP checkpoint without a shufflepoint loader state .* 2 entries"):
        read_checkpoint(str(tmp_path / "dcp"))


def test_an_accelerate_save_state_folder(tmp_path, state):
    folder = tmp_path / "checkpoint_3"
    folder.mkdir()
    torch.save({"something": "else"}, folder / "dl_state_dict_rank1.bin")
    torch.save(state, folder / "dl_state_dict_rank0.bin")
    torch.save({}, folder / "random_states_0.pkl")
    found = read_checkpoint(str(folder))
    assert found.kind == "accelerate" and found.where == "checkpoint_3/dl_state_dict_rank0.bin"
    assert found.state == state


def test_an_accelerate_folder_of_a_stock_loader_is_refused(tmp_path):
    torch.save({"_num_yielded": 3, "_iterator_finished": False}, tmp_path / "dl_state_dict.bin")
    with pytest.raises(CheckpointError, match="a loader state of another library"):
        read_checkpoint(str(tmp_path))


def test_an_hf_trainer_folder_gives_the_global_step(tmp_path, state):
    folder = tmp_path / "checkpoint-12"
    folder.mkdir()
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": 12, "log_history": []}))
    (folder / "shufflepoint_loader.json").write_text(json.dumps(state))
    found = read_checkpoint(str(folder))
    assert (found.kind, found.trainer_step, found.state) == ("hf_trainer", 12, state)
    os.remove(folder / "shufflepoint_loader.json")
    with pytest.raises(CheckpointError, match="without shufflepoint_loader.json: it was not written by shufflepoint"):
        read_checkpoint(str(folder))


def test_nothing_to_find(tmp_path):
    with pytest.raises(CheckpointError, match="no such file"):
        read_checkpoint(str(tmp_path / "missing.pt"))
    torch.save({"model": {"w": torch.zeros(1)}}, tmp_path / "model.pt")
    with pytest.raises(CheckpointError, match="no shufflepoint loader state found; expected a dict"):
        read_checkpoint(str(tmp_path / "model.pt"))
    with pytest.raises(CheckpointError, match="none of a DCP checkpoint"):
        read_checkpoint(str(tmp_path))


def test_a_real_accelerate_save_state_of_a_prepared_loader(tmp_path, monkeypatch):
    accelerate = pytest.importorskip("accelerate")
    monkeypatch.chdir(tmp_path)
    shufflepoint.patch_accelerate()
    try:
        accelerator = accelerate.Accelerator(cpu=True)
        loader = accelerator.prepare(shufflepoint.DataLoader(list(range(40)), 4, seed=3))
        batches = iter(loader)
        next(batches), next(batches)
        accelerator.save_state(str(tmp_path / "ckpt"))
    finally:
        shufflepoint.unpatch_accelerate()
    found = read_checkpoint(str(tmp_path / "ckpt"))
    assert (found.kind, found.where) == ("accelerate", "ckpt/dl_state_dict_rank0.bin")
    assert (found.state["cursor"], found.state["steps"]) == (8, 2)
