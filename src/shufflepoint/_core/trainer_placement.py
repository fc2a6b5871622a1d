"""From a loader's restored position to the numbers the Hugging Face Trainer's loop counts with. Pure
arithmetic, kept in _core so that `shufflepoint which` places Trainer checkpoints without importing transformers.

The Trainer resumes from ``global_step`` alone::

    num_update_steps_per_epoch  = ceil(len(loader) / GA)                 # "nupe"
    epochs_trained              = global_step // nupe
    steps_trained_in_current_epoch = (global_step % nupe) * GA           # per-rank batches

That is right only while the world size, per-device batch size and GA are those of the saved run.
Here the loader's own state says where the data is (epoch ``e``, ``cursor`` samples of the epoch's
global stream already trained, by all ranks together), and the Trainer's numbers follow from it
in the *new* cut of the epoch::

    L = len(loader)                        batches per rank in a whole epoch (new world, new batch)
    R = batches per rank left from cursor  (the loader deals the rest of the epoch anew)
    k = L - R                              the batches the loop numbers as already done
    global_step = e * nupe + k // GA

Worked example: 64 samples, saved on 2 ranks x batch 4 after 3 steps of epoch 1 (cursor 24,
``global_step`` 8 + 3 = 11); resumed on 1 rank x batch 4, GA 1: L = 16, R = 10, k = 6,
global_step = 1 * 16 + 6 = 22. The stock Trainer would compute epoch 11 // 16 = 0, batch 11: the
wrong epoch's order, 40 samples of it trained again.

A finished epoch (R == 0) is the next epoch at k = 0. When ``k`` is not a multiple of GA, the
first optimizer step of the resumed epoch accumulates fewer batches (``aligned`` is False); every
later one is whole, and the epoch still ends at global_step (e + 1) * nupe.
"""

from __future__ import annotations

from dataclasses import dataclass

from shufflepoint._errors import refusal


@dataclass(frozen=True)
class Placement:
    """Where the Trainer's loop stands for a loader's position (``place``): the epoch, the per-rank batches
    done in it, the ``global_step`` they make, and the optimizer steps per epoch."""

    epoch: int  # the Trainer's epochs_trained
    batches_done: int  # k: the Trainer's steps_trained_in_current_epoch, in per-rank batches
    global_step: int
    updates_per_epoch: int  # nupe

    @property
    def aligned(self) -> bool:
        """Whether ``batches_done`` is a whole number of optimizer steps (always, with GA 1)."""
        return self.batches_done % self.accumulation == 0

    accumulation: int = 1


def updates_per_epoch(batches_per_epoch: int, accumulation: int) -> int:
    """The Trainer's num_update_steps_per_epoch: ceil(L / GA), at least 1."""
    return max(-(-batches_per_epoch // accumulation), 1)


def place(epoch: int, batches_per_epoch: int, batches_left: int, accumulation: int) -> Placement:
    """Where the Trainer's loop must stand for a loader in ``epoch`` with ``batches_left`` of its
    ``batches_per_epoch`` per-rank batches still to serve.

    >>> place(1, batches_per_epoch=16, batches_left=10, accumulation=1)
    Placement(epoch=1, batches_done=6, global_step=22, updates_per_epoch=16, accumulation=1)
    >>> place(1, 16, 10, accumulation=4).aligned   # 6 batches = 1.5 optimizer steps
    False
    """
    for name, value in (("epoch", epoch), ("batches_per_epoch", batches_per_epoch),
                        ("batches_left", batches_left), ("accumulation", accumulation)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(refusal(name, value, "an integer >= 0", f"pass {name} as an int >= 0"))
    if accumulation < 1:
        raise ValueError(refusal("accumulation", accumulation, "an int >= 1", "pass accumulation >= 1"))
    if batches_left > batches_per_epoch:
        raise ValueError(refusal("batches_left", batches_left, f"at most batches_per_epoch {batches_per_epoch}",
                                 "pass the batches left of this epoch"))
    nupe = updates_per_epoch(batches_per_epoch, accumulation)
    if batches_left == 0:  # the epoch is over: the next one, from its start
        return Placement(epoch + 1, 0, (epoch + 1) * nupe, nupe, accumulation)
    done = batches_per_epoch - batches_left
    return Placement(epoch, done, epoch * nupe + done // accumulation, nupe, accumulation)
