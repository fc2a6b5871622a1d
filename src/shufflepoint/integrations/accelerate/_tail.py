"""The padded tail of a pass as ``gather_for_metrics`` sees it: which gathered samples are real.

Pure arithmetic on the loader's position (no Accelerate import): the native wrapper
(``_prepared.PreparedDataLoader``) asks it when a pass begins, and the patched ``gather_for_metrics``
(``_native``) keeps what it says."""

from __future__ import annotations

from typing import Any


def tail_trim(loader: Any) -> tuple[int, list[int] | None]:
    """What ``gather_for_metrics`` must keep of the last gathered batch of a pass starting now.

    Returns ``(remainder, keep)``: ``remainder`` is the number of real samples in the last global
    step (0 when nothing is padded), which Accelerate keeps as a prefix of the gathered batch.
    ``keep`` is None when that prefix is exactly the real samples; otherwise it lists their
    positions. The gather is rank-major and the tail strided, so with r real samples left, each
    rank's last batch has m = ceil(r / W) samples and rank k's t-th is real when k + W*t < r. Two
    ranks, r = 3 (one padded sample, P)::

        rank 0: [s0, s2]   rank 1: [s1, P]   gathered: [s0, s2, s1, P]   keep the first 3

    Four ranks, r = 5: ``[s0, s4 | s1, P | s2, P | s3, P]``, keep positions 0, 1, 2, 4, 6: no prefix.
    Under the ``spans`` deal the padded samples are those of ranks whose stretch is one shorter.
    """
    batch_size, world_size = int(loader.batch_size), int(loader.world_size)
    samples = int(loader.samples_left())  # per rank, padding included: the same on every rank
    real = [int(loader.real_samples_left(rank)) for rank in range(world_size)]
    if bool(loader.drop_last) or samples == 0:
        return 0, None
    before_last = (-(-samples // batch_size) - 1) * batch_size
    size = samples - before_last  # samples per rank in the last batch
    if size == batch_size and all(count == samples for count in real):
        return 0, None  # a full last step: nothing to trim
    keep = [rank * size + t for rank in range(world_size) for t in range(size) if before_last + t < real[rank]]
    return len(keep), (None if keep == list(range(len(keep))) else keep)
