"""accelerator.prepare(shufflepoint.DataLoader(...)) in one process: the wrapper, its refusals, the
tail arithmetic for gather_for_metrics, and what happens without the patch.

Resume across fresh processes, with 2 and 3 ranks, is in
tests/distributed/test_accelerate_native_resume.py.
"""

from __future__ import annotations

import pytest

pytest.importorskip("accelerate")

import torch  # noqa: E402
from torch.utils.data import TensorDataset  # noqa: E402

import shufflepoint  # noqa: E402
from shufflepoint.integrations.accelerate import tail_trim as _tail_trim  # noqa: E402


@pytest.fixture
def unpatched():
    shufflepoint.unpatch_accelerate()
    yield
    shufflepoint.unpatch_accelerate()


@pytest.fixture
def patched():
    shufflepoint.unpatch_accelerate()
    shufflepoint.patch_accelerate()
    yield
    shufflepoint.unpatch_accelerate()


def _accelerator(**config):
    from accelerate import Accelerator, DataLoaderConfiguration

    return Accelerator(cpu=True, dataloader_config=DataLoaderConfiguration(**config))


def _loader(n: int = 10, **kwargs) -> shufflepoint.DataLoader:
    return shufflepoint.DataLoader(TensorDataset(torch.arange(n)), batch_size=4, seed=7, **kwargs)


def _ids(batches) -> list[list[int]]:
    return [batch[0].tolist() for batch in batches]


def test_without_the_patch_iteration_is_refused_with_the_fix(unpatched) -> None:
    prepared = _accelerator().prepare(_loader())
    with pytest.raises(RuntimeError, match=r"found its sampler iterated by another loader.*\n.*\n"
                                           r"  why: .*without shufflepoint.patch_accelerate\(\).*\n  fix: call"):
        next(iter(prepared))


def test_prepare_wraps_the_loader_without_resharding(patched) -> None:
    accelerator = _accelerator()
    loader = _loader()
    prepared = accelerator.prepare(loader)
    assert prepared.loader is loader and prepared in accelerator._dataloaders
    assert accelerator.prepare(prepared) is prepared  # a second prepare changes nothing
    assert len(prepared) == len(loader) == 3
    expected = _ids(_loader())
    got, ends = [], []
    for batch in prepared:
        got.append(batch[0].tolist())
        ends.append((accelerator.gradient_state.end_of_dataloader, accelerator.gradient_state.remainder))
    assert got == expected
    assert ends == [(False, 2), (False, 2), (True, 2)]  # 10 = 4 + 4 + 2: 2 real samples in the tail
    assert not accelerator.gradient_state.in_dataloader
    assert prepared.epoch == 1 and prepared.cursor == 0


def test_break_loses_nothing_the_state_counts_what_was_received(patched) -> None:
    prepared = _accelerator().prepare(_loader(n=20))
    whole = _ids(_loader(n=20))
    first = []
    for batch in prepared:
        first.append(batch[0].tolist())
        if len(first) == 2:
            break
    assert prepared.state_dict()["cursor"] == 8 and prepared.cursor == 8
    assert first + _ids(prepared) == whole


def test_save_state_and_load_state_resume_mid_epoch(patched, tmp_path) -> None:
    accelerator = _accelerator()
    prepared = accelerator.prepare(_loader(n=40))
    epoch0 = _ids(prepared)
    head = []
    for batch in prepared:
        head.append(batch[0].tolist())
        if len(head) == 3:
            accelerator.save_state(str(tmp_path / "ckpt"))
            break
    tail = _ids(prepared)
    fresh = _accelerator()
    restored = fresh.prepare(_loader(n=40))
    fresh.load_state(str(tmp_path / "ckpt"))
    assert (restored.epoch, restored.cursor) == (1, 12)
    assert _ids(restored) == tail and head + tail != epoch0


@pytest.mark.parametrize("config, option", [
    (dict(split_batches=True), "split_batches=True"),
    (dict(even_batches=False), "even_batches=False"),
    (dict(dispatch_batches=True), "dispatch_batches=True"),
])
def test_options_that_change_who_reads_what_are_refused(patched, config, option) -> None:
    with pytest.raises(ValueError, match=rf"found DataLoaderConfiguration\({option}\)\n.*\n.*\n  fix: drop the option"):
        _accelerator(**config).prepare(_loader())


def test_a_loader_built_for_another_rank_layout_is_refused(patched) -> None:
    with pytest.raises(ValueError, match=r"found a loader that shards for rank 1 of 2\n  expected: rank 0 of 1, "
                                         r"this Accelerator's process\n.*\n  fix: "):
        _accelerator().prepare(_loader(rank=1, world_size=2))


def test_skip_first_batches_is_refused_the_position_is_in_the_state(patched) -> None:
    accelerator = _accelerator()
    loader = _loader()
    prepared = accelerator.prepare(loader)
    for target in (prepared, loader):
        with pytest.raises(TypeError, match="skipping on top would skip those batches twice"):
            accelerator.skip_first_batches(target, 1)


def test_gather_for_metrics_trims_the_tail_in_one_process(patched) -> None:
    accelerator = _accelerator()
    prepared = accelerator.prepare(_loader(n=10))
    gathered = [i for batch in prepared for i in accelerator.gather_for_metrics(batch[0]).tolist()]
    assert sorted(gathered) == list(range(10))


def _positioned(n: int, world_size: int, batch_size: int, deal: str, taken: int, drop_last: bool = False):
    """Rank 0's loader after every rank received ``taken`` samples of epoch 0 (restored from a state)."""
    loader = shufflepoint.DataLoader(range(n), batch_size, world_size=world_size, rank=0, deal=deal,
                                     drop_last=drop_last)
    saved = shufflepoint.DataLoader(range(n), 1, world_size=world_size, rank=0, deal=deal, drop_last=drop_last)
    saved.seek(0, taken)  # a run in batches of 1: ``taken`` steps are ``taken`` samples per rank
    loader.load_state_dict(saved.state_dict())
    return loader


def _brute_force_keep(loader, world_size: int, batch_size: int) -> list[int]:
    """Positions of real samples in the rank-major gather of the last step, from the deal itself."""
    start = loader._position.rest()[0]
    per_rank = start.samples_per_rank()
    last = per_rank - (per_rank - 1) % batch_size - 1  # first sample of the last batch
    keep, offset = [], 0
    for rank in range(world_size):
        for t in range(last, per_rank):
            if t < start.real_samples(rank):  # past it, the padding
                keep.append(offset)
            offset += 1
    return keep


@pytest.mark.parametrize("deal", ["strided", "spans"])
@pytest.mark.parametrize("world_size", [1, 2, 3, 4, 5])
def test_tail_trim_matches_the_deal(world_size: int, deal: str) -> None:
    for n in range(1, 31):
        for batch_size in (1, 2, 3, 4):
            whole = -(-n // world_size)
            for taken in range(whole):
                loader = _positioned(n, world_size, batch_size, deal, taken)
                remainder, keep = _tail_trim(loader)
                expected = _brute_force_keep(loader, world_size, batch_size)
                step = world_size * batch_size
                if len(expected) == step:
                    assert (remainder, keep) == (0, None)  # the last step is whole: nothing to trim
                    continue
                assert remainder == len(expected)
                assert (keep if keep is not None else list(range(remainder))) == expected
                if world_size <= 2 and deal == "strided":
                    assert keep is None  # Accelerate's prefix trim is exact with two ranks
                    assert remainder == (n - loader.cursor) % step


def test_tail_trim_with_drop_last_trims_nothing() -> None:
    for deal in ("strided", "spans"):
        assert _tail_trim(_positioned(67, 2, 4, deal, 0, drop_last=True)) == (0, None)


def test_each_pass_logs_its_data_wait_with_the_runs_logger(patched, caplog) -> None:
    """Without trackers: one line on the ``shufflepoint`` logger at each pass's end; with trackers, the numbers
    through ``accelerator.log``. ``log_data_wait`` logs the window since its last call at any step."""
    from shufflepoint.integrations.accelerate import log_data_wait

    accelerator = _accelerator()
    prepared = accelerator.prepare(_loader())
    with caplog.at_level("INFO", logger="shufflepoint"):
        list(prepared)
    (line,) = [r.getMessage() for r in caplog.records if r.name == "shufflepoint"]
    assert line.startswith("data wait: rank 0: 3 batches, waited ")
    logged = []
    accelerator.trackers = [object()]  # a tracker is set: accelerator.log is the run's logger
    accelerator.log = lambda values, step=None: logged.append((values, step))
    iterator = iter(prepared)
    next(iterator)
    assert log_data_wait(accelerator, prepared, step=7).batches == 4  # the first pass's 3, and 1 since
    ((values, step),) = logged
    assert step == 7 and set(values) == {"data_wait_share", "data_wait_s", "data_batches", "data_prefetch_depth",
                                          "data_workers_busy"}
    assert log_data_wait(accelerator, prepared).batches == 0 and len(logged) == 1  # nothing new: nothing logged
    with pytest.raises(TypeError, match="log_data_wait\\(loader=\\): found list"):
        log_data_wait(accelerator, [])
