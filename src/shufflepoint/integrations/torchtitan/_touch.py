"""Every place shufflepoint meets torchtitan, named and checked against the versions it was tested on.

TOUCH POINTS (torchtitan 0.3.0):

1. ``torchtitan.components.dataloader.BaseDataLoader``: the class a data loader of a torchtitan job
   derives from (``Stateful``: ``state_dict``/``load_state_dict``; ``__iter__`` yields
   ``(input_dict, labels)``), with its nested ``Config`` (``@dataclass(kw_only=True, slots=True)``,
   fields ``dataset`` and ``dataset_path``) whose ``build(**kwargs)`` constructs the owner class.
2. The trainer's ``config.dataloader.build(dp_world_size=, dp_rank=, tokenizer=, seq_len=,
   local_batch_size=, snapshot_every_n_steps=)`` (``torchtitan/trainer.py``): the keyword arguments
   the loader is built with.
3. The batch: ``({"input": ids, "positions": positions}, labels)``, ``labels`` already shifted by
   one token inside each document, ``-100`` (``torchtitan.components.loss.IGNORE_INDEX``) skipped.
4. The checkpointer stores the loader under the key ``"dataloader"`` of the state it hands to
   ``torch.distributed.checkpoint`` and calls ``load_state_dict`` with what that key loads back.

torchtitan versions outside ``TESTED_TORCHTITAN`` are refused unless ``SHUFFLEPOINT_TORCHTITAN_FORCE=1``.
"""

from __future__ import annotations

import os

from shufflepoint._errors import Plain, refusal

TESTED_TORCHTITAN = ("0.3.0",)
"""The torchtitan releases the data loader is tested on (``make test-torchtitan``); ``check_version`` refuses
any other unless ``SHUFFLEPOINT_TORCHTITAN_FORCE=1``."""


def torchtitan_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("torchtitan")
    except PackageNotFoundError as error:
        raise ImportError(refusal("shufflepoint.integrations.torchtitan", Plain("no torchtitan installed"),
                                  "torchtitan 0.3.0", "pip install torchtitan==0.3.0 (see docs/integrations.md, "
                                  "torchtitan)")) from error


def check_version(found: str | None = None) -> str:
    """The installed torchtitan's version, refused (``RuntimeError``) outside ``TESTED_TORCHTITAN``."""
    found = torchtitan_version() if found is None else found
    if found not in TESTED_TORCHTITAN and os.environ.get("SHUFFLEPOINT_TORCHTITAN_FORCE") != "1":
        raise RuntimeError(refusal(
            "torchtitan", Plain(f"version {found}"), f"one of {', '.join(TESTED_TORCHTITAN)}",
            f"pip install torchtitan=={TESTED_TORCHTITAN[-1]}, or set SHUFFLEPOINT_TORCHTITAN_FORCE=1 to try this "
            "version at your own risk",
            why="the data loader derives from torchtitan's BaseDataLoader and follows its build() keywords, batch "
            "format and checkpoint key (shufflepoint/integrations/torchtitan/_touch.py), which change between "
            "torchtitan versions"))
    return found


check_version()

# TOUCH POINT 1: the base class (its module imports torchtitan's config machinery, not its models).
from torchtitan.components.dataloader import BaseDataLoader  # noqa: E402

# TOUCH POINT 3: torchtitan.components.loss.IGNORE_INDEX (not imported: that module needs spmd_types).
IGNORE_INDEX = -100

__all__ = ["IGNORE_INDEX", "TESTED_TORCHTITAN", "BaseDataLoader", "check_version"]
