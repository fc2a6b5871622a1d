"""``shufflepoint demo``: the seed's bug and its fixes, in real processes, in under a minute.

A tiny model is trained for 2 epochs on a synthetic regression set by 2 processes on Gloo,
checkpointed mid-epoch 1 (model, optimizer, loader state), SIGKILLed, and resumed in new
processes, once per variant:

- ``stock``: Accelerate with ``use_stateful_dataloader=True`` (the seed's setup, when installed)
- ``patched``: the same with ``shufflepoint.patch_accelerate()``
- ``shufflepoint``: ``shufflepoint.DataLoader`` with plain DDP
- ``elastic``: the ``shufflepoint`` checkpoint resumed by 1 process (batch 8 instead of 2 x 4)

Three launches, each running every variant it can (a launch costs seconds, a variant
milliseconds): 2 processes that run each variant uninterrupted (the reference) and then again from
scratch up to the checkpoint, and are SIGKILLed right after the last checkpoint is written; 2 new
processes that resume every variant; and, concurrently, 1 new process for the elastic resume.
The reference and the interrupted run share processes (each built from scratch); that both
served the same batches up to the checkpoint is checked. The data order is judged with the
audit's judge; the final weights are compared with the uninterrupted run's, bit for bit.


Modules: ``variants`` (what is shown), ``worker`` (inside the launched processes, run as
``python -m shufflepoint._tools.demo PHASE OUT VARIANT...``), ``orchestrator`` (the launches and
the verdicts), ``report`` (the table and the loss plot).

Words: docs/glossary.md (verdict, resume, elastic).
"""

from shufflepoint._tools.demo.orchestrator import run_demo
from shufflepoint._tools.demo.report import render

__all__ = ["render", "run_demo"]
