"""Writes the golden states of a ``Mixture`` built without a schedule, read by a loader in its fixed order (mixture
order version 1 under ``strided``, 5 under ``spans``), as every shufflepoint before 0.6 read it. Run against the
code of the commit before 0.6's change (``mixture/fixed.py``), never today's::

    git worktree add /tmp/old-fixed 7d177ba
    PYTHONPATH=/tmp/old-fixed/src python tests/states/fixed/write_fixed.py tests/states/fixed

Each file holds the state rank 0 saved mid-run and the batches every rank read next in the uninterrupted run
(``next``), across two epochs' ends: today's code, loading the state, must read exactly those
(``test_fixed_states.py``). The loaders are built by ``build`` here, shared with the test.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

WORLD, BATCH, SAVE_AFTER, NEXT = 2, 3, 5, 14  # 36 rows an epoch: 6 global batches


def build(deal: str, rank: int) -> Any:
    """Rank ``rank``'s loader: three sources of 3:1:2 (counts 18, 6, 12 of 36), shuffle_block 8."""
    import shufflepoint

    mixture = shufflepoint.Mixture([([f"a{i}" for i in range(20)], 3), ([f"b{i}" for i in range(5)], 1),
                                    ([f"c{i}" for i in range(30)], 2)], samples_per_epoch=36)
    return shufflepoint.DataLoader(mixture, BATCH, seed=4, rank=rank, world_size=WORLD, deal=deal, shuffle_block=8,
                                   collate_fn=list)


def take(iterator: Any, loader: Any, count: int) -> list[list[Any]]:
    """The next ``count`` batches of a live ``iterator`` of ``loader``, into the next epochs."""
    found: list[list[Any]] = []
    while len(found) < count:
        for batch in iterator:
            found.append(list(batch))
            if len(found) == count:
                break
        else:
            iterator = iter(loader)
    return found


def main(folder: str) -> None:
    import shufflepoint

    for deal in ("strided", "spans"):
        loaders = [build(deal, rank) for rank in range(WORLD)]
        iterators = [iter(loader) for loader in loaders]
        for _ in range(SAVE_AFTER):
            for iterator in iterators:
                next(iterator)
        state = loaders[0].state_dict()
        following = [take(iterator, loader, NEXT) for iterator, loader in zip(iterators, loaders, strict=True)]
        record = {"written_by": f"shufflepoint {shufflepoint.__version__} ({os.environ.get('OLD_COMMIT', '7d177ba')})",
                  "deal": deal, "state": state, "next": following}
        path = os.path.join(folder, f"fixed-{deal}.json")
        with open(path, "w") as f:
            json.dump(record, f, indent=1)
            f.write("\n")
        print(path, "order version", state["order_version"], shufflepoint.__file__)


if __name__ == "__main__":
    main(sys.argv[1])
