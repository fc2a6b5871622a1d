"""Writes the golden states of older shufflepoint versions (``tests/states/*.json``), run against that
version's code, never today's::

    git worktree add /tmp/old-0.3 32b6272   # the last commit writing state version 2 (0.3)
    git worktree add /tmp/old-0.4 7521bbc   # the last commit writing state version 3 (0.4) before version 4
    PYTHONPATH=/tmp/old-0.3/src:tests python tests/states/write_states.py v2 tests/states
    PYTHONPATH=/tmp/old-0.4/src:tests python tests/states/write_states.py v3 tests/states

Each file holds the state rank 0 saved mid-run, how the loaders were built (``case``), and the batches
every rank of the saved world read next in the uninterrupted run (``next``): today's code, loading
the state, must read exactly those (``tests/states/test_old_states.py``). The loaders are built by
``cases.py``, shared with the test so that both read the same datasets.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))

from cases import CASES, build, take  # noqa: E402


def main(tag: str, folder: str) -> None:
    import shufflepoint

    for name, case in CASES.items():
        if tag not in case["written_by"]:
            continue
        with tempfile.TemporaryDirectory() as corpus:
            loaders = [build(case, rank, corpus) for rank in range(case["world_size"])]
            iterators = [iter(loader) for loader in loaders]
            for _ in range(case["save_after"]):
                for iterator in iterators:
                    next(iterator)
            state = loaders[0].state_dict()
            following = [take(iterator, loader, case["next"])
                         for iterator, loader in zip(iterators, loaders, strict=True)]
        record = {"written_by": f"shufflepoint at {tag} ({os.environ.get('OLD_COMMIT', 'unknown commit')})",
                  "case": name, "state": state, "next": following}
        path = os.path.join(folder, f"{tag}-{name}.json")
        with open(path, "w") as f:
            json.dump(record, f, indent=1)
            f.write("\n")
        print(path, "version", state["version"], shufflepoint.__file__)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
