"""Writes the golden states of a scheduled ``Mixture`` read under ``spans`` in mixture order version 6 (every window's
slots numbered part after part), as shufflepoint 0.5 and 0.6's development before version 7 read it. Run against
the code of the commit before version 7 (``mixture/pass_edges.py``), never today's::

    git worktree add --detach /tmp/old-v6 3737efa
    PYTHONPATH=/tmp/old-v6/src python tests/states/v6/write_v6.py tests/states/v6

Each file holds the state rank 0 saved mid-run and the batches every rank read next in the uninterrupted run
(``next``), across two epochs' ends, through windows where a source's pass ends (where versions 6 and 7 differ):
today's code, loading the state, must read exactly those (``test_v6_states.py``).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixed"))

from write_fixed import take  # noqa: E402  (the same reading of the next batches, into the next epochs)

WORLD, BATCH, SAVE_AFTER, NEXT = 2, 3, 5, 14  # 36 rows an epoch: 6 global batches


def build(rank: int, world: int = WORLD, batch: int = BATCH) -> Any:
    """Rank ``rank``'s loader: three sources of 3:1:2 (counts 18, 6, 12 of 36), the small one read 1.2 times an
    epoch, a second phase from row 50; shuffle_block 8."""
    import shufflepoint

    mixture = shufflepoint.Mixture([[f"a{i}" for i in range(20)], [f"b{i}" for i in range(5)],
                                    [f"c{i}" for i in range(30)]], samples_per_epoch=36,
                                   schedule=[(0, [3, 1, 2]), (50, [1, 1, 1])])
    return shufflepoint.DataLoader(mixture, batch, seed=4, rank=rank, world_size=world, shuffle_block=8,
                                   collate_fn=list)


def main(folder: str) -> None:
    import shufflepoint

    loaders = [build(rank) for rank in range(WORLD)]
    iterators = [iter(loader) for loader in loaders]
    for _ in range(SAVE_AFTER):
        for iterator in iterators:
            next(iterator)
    state = loaders[0].state_dict()
    assert state["order_version"] == 6, state["order_version"]
    following = [take(iterator, loader, NEXT) for iterator, loader in zip(iterators, loaders, strict=True)]
    record = {"written_by": f"shufflepoint {shufflepoint.__version__} ({os.environ.get('OLD_COMMIT', '3737efa')})",
              "state": state, "next": following}
    with open(os.path.join(folder, "v6-spans.json"), "w") as f:
        json.dump(record, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main(sys.argv[1])
