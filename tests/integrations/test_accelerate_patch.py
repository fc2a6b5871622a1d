"""patch_accelerate() in one process: what it replaces, what it refuses, what it warns about.

The resume behaviour itself is tested with real processes in
tests/distributed/test_accelerate_resume.py.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("accelerate")
pytest.importorskip("torchdata")

import torch  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

import shufflepoint  # noqa: E402
from shufflepoint.integrations import accelerate as integration  # noqa: E402
from shufflepoint.integrations.accelerate import _patch  # noqa: E402


def _touched() -> list[tuple[object, str]]:
    import accelerate
    import accelerate.accelerator as accelerator_module
    import accelerate.data_loader as data_loader_module

    pairs: list[tuple[object, str]] = []
    for cls in (data_loader_module.DataLoaderShard, data_loader_module.DataLoaderDispatcher):
        pairs += [(cls, "state_dict"), (cls, "load_state_dict"), (cls, "begin"), (cls, "end")]
    pairs += [(data_loader_module, "skip_first_batches"), (accelerator_module, "skip_first_batches"),
              (accelerate, "skip_first_batches"), (accelerator_module, "save_accelerator_state"),
              (accelerator_module, "load_accelerator_state"),
              (accelerator_module.Accelerator, "prepare_data_loader")]
    return pairs


def _snapshot() -> dict[tuple[int, str], tuple[bool, object]]:
    return {(id(owner), name): (name in vars(owner), getattr(owner, name)) for owner, name in _touched()}


@pytest.fixture
def unpatched():
    shufflepoint.unpatch_accelerate()
    yield
    shufflepoint.unpatch_accelerate()


def _prepared(stateful: bool = True, seedable: bool = False):
    from accelerate import Accelerator, DataLoaderConfiguration

    accelerator = Accelerator(cpu=True, dataloader_config=DataLoaderConfiguration(
        use_stateful_dataloader=stateful, use_seedable_sampler=seedable))
    torch.manual_seed(1234)
    loader = DataLoader(TensorDataset(torch.arange(64)), batch_size=4, shuffle=True)
    return accelerator.prepare(loader)


def test_patch_is_idempotent_and_unpatch_restores_the_originals(unpatched) -> None:
    before = _snapshot()
    shufflepoint.patch_accelerate()
    patched = _snapshot()
    assert all(patched[key][1] is not before[key][1] for key in before), "every touch point replaced"
    shufflepoint.patch_accelerate()
    assert _snapshot() == patched
    shufflepoint.unpatch_accelerate()
    assert _snapshot() == before
    shufflepoint.unpatch_accelerate()  # a second unpatch is a no-op
    assert _snapshot() == before


@pytest.mark.parametrize("version", ["1.12.0", "1.16.0", "2.0.0", "1.15.0.dev0"])
def test_unknown_version_is_refused_with_version_and_range(unpatched, monkeypatch, version) -> None:
    monkeypatch.setattr(_patch, "_installed_accelerate_version", lambda: version)
    before = _snapshot()
    with pytest.raises(RuntimeError, match=rf"patch_accelerate: found Accelerate {version}\n  expected: a tested "
                                           rf"version, 1\.13\.0 up to \(not including\) 1\.16\.0\n.*\n"
                                           rf"  fix: .*force=True"):
        shufflepoint.patch_accelerate()
    assert _snapshot() == before


def test_force_patches_an_unknown_version_with_a_warning(unpatched, monkeypatch) -> None:
    monkeypatch.setattr(_patch, "_installed_accelerate_version", lambda: "1.99.0")
    with pytest.warns(shufflepoint.ResumeWarning, match=r"force=True.*1\.99\.0.*not guaranteed"):
        shufflepoint.patch_accelerate(force=True)
    assert integration.is_patched()


@pytest.mark.parametrize("version", ["1.13.0", "1.14.0", "1.15.0", "1.15.2"])
def test_tested_versions_are_accepted(version) -> None:
    assert integration.version_in_range(version)


def test_state_keys_contain_iteration_and_are_json(unpatched) -> None:
    shufflepoint.patch_accelerate()
    loader = _prepared()
    iterator = iter(loader)
    next(iterator)
    state = loader.state_dict()
    assert state["_iteration"] == 0
    assert state["_shufflepoint"]["order_source"] == "generator"
    json.dumps(state)  # small and JSON-able: ints, bools, None and one base64 string
    assert len(json.dumps(state)) < 10_000


def test_state_of_the_seedable_sampler_carries_its_seed(unpatched) -> None:
    shufflepoint.patch_accelerate()
    loader = _prepared(seedable=True)
    for _ in loader:
        pass
    state = loader.state_dict()
    assert state["_iteration"] == 1  # the epoch is over: the next pass is epoch 1
    assert state["_shufflepoint"] == {"format": 1, "order_source": "seedable",
                                      "initial_seed": loader.get_sampler().initial_seed}


def test_old_checkpoint_without_iteration_loads_with_a_position_only_warning(unpatched) -> None:
    stock = _prepared()
    iterator = iter(stock)
    for _ in range(3):
        next(iterator)
    old_state = stock.state_dict()  # written without the patch
    assert "_iteration" not in old_state
    shufflepoint.patch_accelerate()
    loader = _prepared()
    with pytest.warns(shufflepoint.ResumeWarning, match=r"no '_iteration'.*only the position is restored, "
                                                        r"not the order"):
        loader.load_state_dict(old_state)
    assert len(list(loader)) == 16 - 3  # the position is restored


def test_refused_state_leaves_the_loader_as_it_was(unpatched) -> None:
    shufflepoint.patch_accelerate()
    loader = _prepared()
    for _ in loader:
        pass
    state = loader.state_dict()
    before = (loader.iteration, loader.get_sampler().generator.get_state().clone())
    for broken, message in [
        ({**state, "_iteration": -1}, r"'_iteration': found -1\n  expected: an integer >= 0"),
        ({**state, "_shufflepoint": {**state["_shufflepoint"], "format": 7}}, r"format': found 7"),
        ({**state, "_shufflepoint": {**state["_shufflepoint"], "order_source": "seedable"}},
         r"order_source': found 'seedable'\n  expected: 'generator'.*\n  fix: .*use_seedable_sampler"),
        ({**state, "_shufflepoint": {**state["_shufflepoint"], "generator_state": "AAAA"}},
         r"generator_state': found '3 bytes'"),
    ]:
        with pytest.raises(shufflepoint.StateError, match=message):
            loader.load_state_dict(broken)
        assert loader.iteration == before[0]
        assert torch.equal(loader.get_sampler().generator.get_state(), before[1])


def test_import_works_without_accelerate() -> None:
    code = ("import sys; sys.modules['accelerate'] = None; import shufflepoint; "
            "print(shufflepoint.patch_accelerate.__name__)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "patch_accelerate"
