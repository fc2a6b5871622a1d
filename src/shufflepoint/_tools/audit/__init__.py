"""The audit: run a user's loader in real processes, interrupt it, resume it in new ones, judge.

Three layers, each testable alone:

- **Identity** (``sample_ids``): what a batch *is*, as a list of sample ids (ints or short hash
  strings). Integer tensors and lists count by value; a tuple, list or dict counts by its first
  tensor; anything else by a stable hash of each sample.
- **Judge** (``judge``): pure functions from recorded streams to a verdict, one of ``VERDICTS``.
  No processes, no torch: hypothesis and unit tests drive it directly.
- **Runner** (``run_audit``): the phases, each a launch of fresh processes on Gloo
  (``shufflepoint._tools.launch.launch``) running ``shufflepoint._tools.audit.worker``.

The vocabulary, worked on the seed (64 samples, batch 4, 2 ranks, saved after 3 batches of epoch 1)::

    uninterrupted rank 0, epoch 1 : [39 18 10 13] [63 27 2 62] [25 6 37 50] | [55 16 59 0] [22 46 17 57] ...
    resumed rank 0                :                                          | [15 41 52 61] [5 50 18 14] ...
    -> ORDER_LOST: right position (5 batches of 4 follow), wrong order: epoch 0's order replayed.

``EXACT``: every rank's resumed stream equals its uninterrupted one, batch for batch.
``EXACTLY_ONCE``: the world size changed; per epoch, the union over old and new ranks is the
epoch's samples, each once (tail padding or dropping only as the sizes allow).
``SAME_GLOBAL_BATCHES``: EXACTLY_ONCE at a fixed global batch (world size x batch size the same),
and every global batch after the resume holds the uninterrupted run's samples, cut among other ranks.
``ORDER_LOST``: the right number of batches of the right sizes, other samples (position right,
order wrong). ``DUPLICATED`` / ``DROPPED``: more / fewer samples than the uninterrupted run.
``DIVERGED``: the resumed epoch was right, a later one differs; or the pipeline is not
reproducible between two fresh runs. ``CONTENT_DIVERGED``: the ids are EXACT or EXACTLY_ONCE,
but some sample's tensors differ from the same sample's in the same epoch of the uninterrupted
run (an augmentation drew from an RNG the checkpoint does not restore). ``ERROR``: a process failed.

Modules: ``verdicts`` (the words), ``config`` (TARGET, save point, AuditConfig), ``identity``
(sample ids and content digests), ``judge``, ``content`` (the content check), ``report``,
``runner`` (the phases), ``worker`` (inside the processes).

Words: docs/glossary.md (verdict, resume, elastic).
"""

from shufflepoint._tools.audit.config import AuditConfig, SavePoint, Target, load_target, parse_save_at, parse_target
from shufflepoint._tools.audit.identity import sample_ids
from shufflepoint._tools.audit.judge import (
    Difference,
    EpochResult,
    Judgement,
    RankResult,
    check_reproducible,
    judge,
    judge_epoch,
    judge_rank,
    tail_allowance,
)
from shufflepoint._tools.audit.report import SCHEMA_VERSION, render, report_dict
from shufflepoint._tools.audit.runner import run_audit
from shufflepoint._tools.audit.verdicts import (
    CONTENT_DIVERGED,
    DIVERGED,
    DROPPED,
    DUPLICATED,
    ERROR,
    EXACT,
    EXACTLY_ONCE,
    ORDER_LOST,
    PASSING,
    SAME_GLOBAL_BATCHES,
    SERVED_EXCLUDED,
    VERDICTS,
    UsageError,
    exit_code,
    worst,
)

__all__ = [
    "CONTENT_DIVERGED", "DIVERGED", "DROPPED", "DUPLICATED", "ERROR", "EXACT", "EXACTLY_ONCE", "ORDER_LOST", "PASSING",
    "SAME_GLOBAL_BATCHES", "SCHEMA_VERSION", "SERVED_EXCLUDED", "VERDICTS",
    "AuditConfig", "Difference", "EpochResult", "Judgement", "RankResult",
    "SavePoint", "Target", "UsageError", "check_reproducible", "exit_code", "judge", "judge_epoch",
    "judge_rank", "load_target", "parse_save_at", "parse_target", "render", "report_dict", "run_audit",
    "sample_ids", "tail_allowance", "worst",
]
