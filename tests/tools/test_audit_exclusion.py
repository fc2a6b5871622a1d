"""The audit's exclusion check (``--exclude K``), without launches: which indices, and the verdict."""

import pytest
import torch

import shufflepoint
from shufflepoint._tools.audit import SERVED_EXCLUDED, SavePoint, UsageError, judge, sample_ids
from shufflepoint._tools.audit.exclusion import apply_exclusion, exclude_at_save, pick, served_excluded


def test_the_indices_are_fixed_distinct_and_in_range():
    assert pick(67, 9) == pick(67, 9) and len(set(pick(67, 9))) == 9 and all(0 <= i < 67 for i in pick(67, 9))
    with pytest.raises(UsageError, match=r"--exclude: found 68, expected at most the dataset's 67 samples"):
        pick(67, 68)


def streams(loader_class, world):
    """Each rank's epochs 0 and 1, excluding at epoch 0 after 2 batches, as the audit's worker records them."""
    ranks = [loader_class(list(range(40)), 2, seed=5, rank=r, world_size=world) for r in range(world)]
    excluded = [exclude_at_save(loader, 6, 40, sample_ids) for loader in ranks]
    assert all(ids == excluded[0] for ids in excluded) and sorted(excluded[0]) == pick(40, 6)
    fresh = [loader_class(list(range(40)), 2, seed=5, rank=r, world_size=world) for r in range(world)]
    reference = []
    for loader in fresh:
        epochs = []
        for epoch in range(2):
            loader.set_epoch(epoch)
            batches = []
            for batch in loader:
                batches.append(batch.tolist())
                if epoch == 0 and len(batches) == 2:
                    loader.exclude(pick(40, 6))
            epochs.append(batches)
        reference.append(epochs)
    return excluded[0], reference


class Forgetful(shufflepoint.DataLoader):
    """A loader whose exclude() skips nothing."""

    def exclude(self, indices):
        self.forgotten = list(indices)


@pytest.mark.parametrize(("loader_class", "verdict"), [(shufflepoint.DataLoader, "EXACT"),
                                                        (Forgetful, SERVED_EXCLUDED)])
def test_served_excluded_samples_get_a_verdict_of_their_own(loader_class, verdict):
    excluded, reference = streams(loader_class, 2)
    save = SavePoint(0, 2)
    resumed = [[epochs[0][2:], epochs[1]] for epochs in reference]  # an exact resume of the same streams
    judgement = judge(reference, resumed, save)
    assert judgement.verdict == "EXACT"
    apply_exclusion(judgement, 6, served_excluded(excluded, reference, resumed, save))
    assert judgement.verdict == verdict
    if verdict == SERVED_EXCLUDED:
        assert "excluded samples served after the exclusion (uninterrupted rank 0 epoch 0" in judgement.summary
    else:
        assert judgement.notes == ["6 samples excluded at the save point; none was served after it"]


def test_a_loader_without_exclude_is_a_usage_error():
    plain = torch.utils.data.DataLoader(list(range(10)), batch_size=2)
    with pytest.raises(UsageError, match=r"--exclude: the loader \(DataLoader\) has no exclude\(\)"):
        exclude_at_save(plain, 2, 10, sample_ids)
