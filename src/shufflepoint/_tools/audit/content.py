"""The content check: the right samples, but did they come out the same?

A resume can be exact by ids and still change what the model sees: random crops, flips and
masking drawn from a worker RNG that the checkpoint does not hold. The worker records a digest of
every sample's tensors beside its id; here each resumed sample is compared with the same sample in
the same epoch of the uninterrupted run. Per (epoch, id), not per batch, so it holds for an elastic
resume too, where batches are cut differently but every sample must still look the same.

Pure functions over the records, like the judge. The verdict it can add is ``CONTENT_DIVERGED``:
the ids said EXACT or EXACTLY_ONCE, the content did not agree.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from shufflepoint._tools.audit.config import SavePoint
from shufflepoint._tools.audit.judge import Judgement
from shufflepoint._tools.audit.verdicts import CONTENT_DIVERGED, PASSING, SampleId

Digests = Sequence[Sequence[Sequence[str] | None]]  # per epoch (or pass): per batch, a digest per sample
_SHOWN = 5


@dataclass
class ContentResult:
    judged: bool  # False: the batches carry no per-sample tensors, or no digests were recorded
    compared: int = 0  # resumed samples whose (epoch, id) the uninterrupted run also served
    differing: int = 0
    reshaped: int = 0  # elastic only: not compared, their rows have other shapes (padded to another batch)
    examples: list[tuple[int, SampleId]] = field(default_factory=list)  # (epoch, id), the first few
    unreproducible: str | None = None  # --kill: two fresh runs already differed before the save point

    def as_dict(self) -> dict[str, Any]:
        if not self.judged:
            why = (f"{self.reshaped} resumed samples, none with the shapes of the uninterrupted run"
                   if self.reshaped else "no tensor in the batches has a row per sample")
            return {"judged": False, "detail": f"not recorded: {why}"}
        return {"judged": True, "compared": self.compared, "differing": self.differing, "reshaped": self.reshaped,
                "examples": [{"epoch": e, "id": i} for e, i in self.examples], "unreproducible": self.unreproducible}


def _shape(digest: str) -> str:
    return digest.partition(":")[0]  # see identity.sample_digests: SHAPE:CONTENT


def _expected(reference_ids: Sequence[Sequence[Sequence[Sequence[SampleId]]]],
              reference_digests: Sequence[Digests], first_epoch: int) -> dict[tuple[int, SampleId], set[str]]:
    """(epoch, id) -> the digests the uninterrupted run gave it (a padded repeat may add one)."""
    expected: dict[tuple[int, SampleId], set[str]] = {}
    for ids_by_epoch, digests_by_epoch in zip(reference_ids, reference_digests, strict=True):
        for epoch in range(first_epoch, len(ids_by_epoch)):
            for ids, digests in zip(ids_by_epoch[epoch], digests_by_epoch[epoch], strict=True):
                for sample, digest in zip(ids, digests or (), strict=False):
                    expected.setdefault((epoch, sample), set()).add(digest)
    return expected


def judge_content(reference_ids: Sequence[Sequence[Sequence[Sequence[SampleId]]]],
                  reference_digests: Sequence[Digests] | None,
                  resumed_ids: Sequence[Sequence[Sequence[Sequence[SampleId]]]],
                  resumed_digests: Sequence[Digests] | None, save: SavePoint) -> ContentResult:
    """``*_ids[r][e][b]``: rank r's batch b of epoch e (resumed: of pass e, epoch save.epoch + e),
    as ids; ``*_digests`` the same shape, a digest per sample, or None for a batch without tensors.

    Same world size, the batches are the same, so any other digest is other content. Another world
    size cuts other batches: a sample whose rows have other shapes than in the uninterrupted run
    (padded to another batch's longest) is counted as ``reshaped``, not compared.
    """
    if reference_digests is None or resumed_digests is None:
        return ContentResult(judged=False)
    expected = _expected(reference_ids, reference_digests, save.epoch)
    elastic = len(reference_ids) != len(resumed_ids)
    result = ContentResult(judged=True)
    for ids_by_pass, digests_by_pass in zip(resumed_ids, resumed_digests, strict=True):
        for offset, (batches, digests) in enumerate(zip(ids_by_pass, digests_by_pass, strict=True)):
            for ids, batch_digests in zip(batches, digests, strict=True):
                for sample, digest in zip(ids, batch_digests or (), strict=False):
                    wanted = expected.get((save.epoch + offset, sample))
                    if wanted is None:
                        continue  # a sample the ids judge already reports
                    if elastic and digest not in wanted and _shape(digest) not in {_shape(d) for d in wanted}:
                        result.reshaped += 1
                        continue
                    result.compared += 1
                    if digest not in wanted:
                        result.differing += 1
                        if len(result.examples) < _SHOWN:
                            result.examples.append((save.epoch + offset, sample))
    result.judged = result.compared > 0
    return result


def check_content_reproducible(reference_digests: Sequence[Digests], interrupted_digests: Sequence[Digests],
                               save: SavePoint) -> str | None:
    """With --kill the reference and the interrupted run are two fresh runs, the same batches up to
    the save point (``judge.check_reproducible``); their content must agree there too. Returns
    where it first does not."""
    for rank, (reference, interrupted) in enumerate(zip(reference_digests, interrupted_digests, strict=True)):
        for epoch in range(min(save.epoch + 1, len(reference))):
            want = reference[epoch] if epoch < save.epoch else reference[epoch][: save.step]
            have = interrupted[epoch] if epoch < len(interrupted) else []
            batch = next((b for b, (x, y) in enumerate(zip(want, have, strict=False)) if x != y), None)
            if batch is not None:
                return (f"two fresh runs already differ in content before the save point (rank {rank}, epoch "
                        f"{epoch}, batch {batch}): the augmentations are not reproducible even without a resume "
                        "(an RNG seeded from the clock or the OS?)")
    return None


def apply_content(judgement: Judgement, content: ContentResult) -> None:
    """Fold the content check into the ids' judgement: a passing verdict with other content becomes
    CONTENT_DIVERGED; a failing one keeps its verdict and gets the content as a note."""
    judgement.content = report = content.as_dict()
    if content.reshaped:
        judgement.notes.append(f"content: {content.reshaped} resumed samples not compared: their tensors have "
                               "other shapes than in the uninterrupted run (padded to the longest of another batch?)")
    if content.unreproducible:
        judgement.notes.append(f"content: {content.unreproducible}")
    if not content.judged:
        judgement.notes.append("content not judged: " + report["detail"].removeprefix("not recorded: "))
        return
    if not content.differing:
        judgement.notes.append(f"content: all {content.compared} resumed samples equal the uninterrupted run's")
        return
    shown = ", ".join(f"epoch {e} sample {i}" for e, i in content.examples)
    what = f"{content.differing} of {content.compared} resumed samples differ in content (e.g. {shown})"
    if judgement.verdict in PASSING:
        order = {"EXACT": "every batch in the right order",
                 "SAME_GLOBAL_BATCHES": "the same global batches"}.get(judgement.verdict, "every sample once")
        cause = ("the augmentations are not reproducible at all" if content.unreproducible else
                 "an augmentation drew from an RNG the checkpoint does not restore")
        judgement.summary = f"order right ({judgement.verdict}: {order}), content wrong: {what}; {cause}"
        judgement.verdict = CONTENT_DIVERGED
    else:
        judgement.notes.append(f"content: {what}")
