"""``shufflepoint audit --exclude K``: exclusion audited like the resume, with a verdict of its own.

At the save point every run of the audit (the uninterrupted one, the interrupted one) calls
``loader.exclude`` with the same K dataset indices, spread over the dataset by a fixed seed, right
before the state is saved; the resumed run gets them from the state alone. The usual judgement then
compares like with like (both sides excluded the same samples at the same point), and this module
adds the check only exclusion needs: no excluded sample is served after the save point, neither by
the uninterrupted run nor by the resumed one. One that is gives ``SERVED_EXCLUDED``.

Samples are recognised by their ids (``identity.sample_ids``), so the excluded ones are identified
the same way: their ids are those of ``collate([dataset[i] for i in indices])``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from shufflepoint._tools.audit.config import SavePoint
from shufflepoint._tools.audit.judge import Judgement
from shufflepoint._tools.audit.verdicts import SERVED_EXCLUDED, UsageError, worst

SEED = 26  # the indices an audit excludes: the same in every process and every run


def pick(dataset_length: int, count: int) -> list[int]:
    """``count`` distinct indices of ``[0, dataset_length)``, spread by a fixed seed, sorted."""
    import numpy as np

    if count > dataset_length:
        raise UsageError(f"--exclude: found {count}, expected at most the dataset's {dataset_length} samples")
    return sorted(np.random.default_rng(SEED).choice(dataset_length, count, replace=False).tolist())


def exclude_at_save(loader: Any, count: int, dataset_length: int | None,
                    identify: Callable[[Any], list[Any]]) -> list[Any]:
    """Exclude ``count`` indices on ``loader``; the ids of the excluded samples (UsageError when it cannot)."""
    if not callable(getattr(loader, "exclude", None)):
        raise UsageError(f"--exclude: the loader ({type(loader).__name__}) has no exclude(); it needs "
                         "shufflepoint.DataLoader")
    if dataset_length is None:
        raise UsageError("--exclude: the loader's dataset has no length, so no indices can be chosen")
    indices = pick(dataset_length, count)
    dataset = getattr(loader.dataset, "dataset", loader.dataset)  # keyed randomness wraps the user's dataset
    try:
        collate = getattr(loader.collate_fn, "collate_fn", loader.collate_fn)  # the loader times it (wait.py)
        ids = identify(collate([dataset[i] for i in indices])) if indices else []
    except Exception as error:
        raise UsageError(f"--exclude: the excluded samples could not be identified ({type(error).__name__}: "
                         f"{error}); pass --sample-id") from error
    loader.exclude(indices)
    return list(ids)


def served_excluded(excluded_ids: Sequence[Any], reference: list[list[list[list[Any]]]],
                    resumed: list[list[list[list[Any]]]], save: SavePoint) -> tuple[int, str] | None:
    """(count, where) of excluded samples served after the save point, or None when none was.

    ``reference[rank][epoch]`` and ``resumed[rank][pass]`` are lists of batches of sample ids; the
    resumed passes start at the save point's epoch, where the reference is read from ``save.step``.
    """
    excluded = set(excluded_ids)
    found: list[str] = []
    for rank, epochs in enumerate(reference):
        for epoch, batches in enumerate(epochs):
            later = batches[save.step:] if epoch == save.epoch else batches if epoch > save.epoch else []
            found += [f"uninterrupted rank {rank} epoch {epoch}: {i!r}" for b in later for i in b if i in excluded]
    for rank, passes in enumerate(resumed):
        for number, batches in enumerate(passes):
            found += [f"resumed rank {rank} epoch {save.epoch + number}: {i!r}"
                      for b in batches for i in b if i in excluded]
    return (len(found), "; ".join(found[:4])) if found else None


def apply_exclusion(judgement: Judgement, count: int, served: tuple[int, str] | None) -> None:
    """Add the exclusion check to a judgement: a note when it passed, SERVED_EXCLUDED when it did not."""
    if served is None:
        judgement.notes.append(f"{count} samples excluded at the save point; none was served after it")
        return
    judgement.verdict = worst([judgement.verdict, SERVED_EXCLUDED])
    if judgement.verdict == SERVED_EXCLUDED:
        judgement.summary = f"{served[0]} excluded samples served after the exclusion ({served[1]})"
    judgement.notes.append(f"SERVED_EXCLUDED: {served[0]} excluded samples served after the exclusion ({served[1]})")
