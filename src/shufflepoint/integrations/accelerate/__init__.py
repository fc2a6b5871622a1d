"""Exact resume of the data order for stock Hugging Face Accelerate: ``patch_accelerate()``.

With ``DataLoaderConfiguration(use_stateful_dataloader=True)``, stock Accelerate (1.13 to 1.15)
checkpoints the *position* of a prepared loader but not its *order*: the epoch counter
``iteration`` that seeds the shuffle is never saved, nor is the private shuffle generator, so new
processes replay epoch 0's permutation at the saved cursor (Accelerate issue #4195). One call
before ``accelerator.prepare(...)`` fixes that, and the bug family around it::

    import shufflepoint
    shufflepoint.patch_accelerate()          # once, before accelerator.prepare(...)

    loader = accelerator.prepare(DataLoader(dataset, batch_size=4, shuffle=True))
    state = loader.state_dict()              # now carries "_iteration" and the order source
    ...                                      # new processes, same script:
    loader.load_state_dict(state)            # same samples, same order, every rank

What the saved state holds, next to torchdata's own keys:

- ``_iteration``: the epoch the next pass serves (the key upstream PR #4238 uses). A state taken
  after the last batch of epoch ``e`` (inside the loop or after it) says ``e + 1``: the next pass
  is the next epoch, as torchdata itself does for a finished iterator.
- ``_shufflepoint``: where the order comes from, and what pins it. ``order_source`` is one of
  ``generator`` (a ``RandomSampler`` and its generator's state at the start of the epoch, before
  the permutation was drawn), ``seedable`` (Accelerate's ``SeedableRandomSampler``: its seed; the
  epoch does the rest), ``fixed`` (no shuffle, or an order that is a pure function of the epoch:
  ``SequentialSampler``, ``DistributedSampler``), ``dataset`` (an iterable dataset: its own order,
  given the epoch) or ``unknown`` (any other sampler: ``ResumeWarning`` at save and at load).

Native path: with the patch installed, ``accelerator.prepare(shufflepoint.DataLoader(...))`` wraps
the loader (``PreparedDataLoader``) instead of re-sharding it: batches go to the device,
``GradientState`` learns where each pass ends (``accumulate()`` syncs on the last batch,
``gather_for_metrics()`` drops the tail padding, each sample once), and ``save_state`` /
``load_state`` checkpoint the loader's own state. Without the patch, Accelerate rebuilds the loader
and shards it a second time; the loader refuses to be iterated that way (``RuntimeError`` naming
``patch_accelerate()``), at the first batch. ``skip_first_batches`` of a shufflepoint loader is
refused: its position is already in its state. The prepared loader logs each pass's data wait at its end
(``accelerator.log`` with trackers, else the ``shufflepoint`` logger); ``log_data_wait`` logs it at any step.

Every place where this module reaches into Accelerate (or torchdata) is a *touch point*, listed
in ``_TOUCH_POINTS`` and marked ``TOUCH POINT`` in a comment naming the Accelerate source it
replaces or reads. The patch refuses Accelerate versions it was not tested on
(``TESTED_ACCELERATE``), unless ``force=True``.

Modules, one concern each: ``_patch`` (the machinery and its version range), ``_order``
(capturing and restoring a stock sampler's order), ``_hooks`` (the replaced loader methods),
``_save_state`` (per-rank ``save_state`` files), ``_native`` and ``_prepared`` (the native
``prepare`` path and its wrapper), ``_data_wait`` (the data wait, logged),
``_tail`` (the ``gather_for_metrics`` tail trim's arithmetic).

Words: docs/glossary.md (state, epoch, cursor, resume).
"""

from shufflepoint.integrations.accelerate._data_wait import log_data_wait
from shufflepoint.integrations.accelerate._patch import (
    TESTED_ACCELERATE,
    is_patched,
    patch_accelerate,
    unpatch_accelerate,
    version_in_range,
)
from shufflepoint.integrations.accelerate._tail import tail_trim

__all__ = ["TESTED_ACCELERATE", "is_patched", "log_data_wait", "patch_accelerate", "tail_trim", "unpatch_accelerate",
           "version_in_range"]
