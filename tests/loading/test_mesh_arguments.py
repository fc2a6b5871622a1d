"""mesh= and process_group= refused by name where one process can tell (the rest: tests/distributed/test_mesh.py)."""

import pytest

import shufflepoint
from shufflepoint._loading.mesh import resolve_data_parallel


def test_without_a_mesh_the_world_is_as_before():
    assert tuple(resolve_data_parallel(3, 1)) == (3, 1, None)
    assert tuple(resolve_data_parallel(None, None)) == (1, 0, None)  # no process group initialised


def test_a_mesh_that_is_not_a_device_mesh_is_refused_by_name():
    with pytest.raises(TypeError, match=r"mesh: found list\n  expected: a torch.distributed DeviceMesh"):
        shufflepoint.DataLoader(list(range(8)), 2, mesh=[0, 1])


def test_mesh_dims_without_a_mesh_is_refused():
    with pytest.raises(ValueError, match=r"mesh_dims: found 'dp'\n  expected: None without a mesh"):
        shufflepoint.DataLoader(list(range(8)), 2, mesh_dims="dp")


def test_a_process_group_that_is_not_one_is_refused_by_name():
    with pytest.raises(TypeError, match=r"process_group: found int\n  expected: a torch.distributed ProcessGroup"):
        shufflepoint.DataLoader(list(range(8)), 2, process_group=3)


def test_a_process_group_without_torch_distributed_is_refused(monkeypatch):
    import torch.distributed

    monkeypatch.setattr(torch.distributed, "ProcessGroup", object)  # a group left from a torn-down job
    with pytest.raises(RuntimeError, match=r"process_group: found a group\n"
                                           r"  expected: torch.distributed initialised first\n"
                                           r"  fix: call torch.distributed.init_process_group"):
        shufflepoint.ResumableSampler(list(range(8)), process_group=object())


def test_two_sources_of_the_world_are_refused_naming_both():
    with pytest.raises(ValueError, match=r"process_group and num_replicas: found 2 sources of rank and world size\n"
                                         r"  expected: one"):
        shufflepoint.ResumableSampler(list(range(8)), 2, process_group=object())
    with pytest.raises(ValueError, match=r"mesh and rank: found 2 sources"):
        shufflepoint.DataLoader(list(range(8)), 2, mesh=object(), rank=0)
