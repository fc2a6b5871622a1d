"""A ``Mixture``'s *pass-edge windows* (order version 7): where a source's pass ends inside a window, that window's
slots of the source are numbered in the *interleave order*, so that every global batch edge reads whole passes.

Under ``spans`` on a grid every edge of a global batch a loader reads, on any world and at any global batch, is a
prefix of the epoch's interleave order: position j of part r comes before position j' of part r' when (j, r) <
(j', r') (``global_batch.py``): the parts' own global batches (every part at the same j), a fixed global batch on
another world (the same), another global batch its first world divides (the same), and an epoch read interleaved
(every part within one of the others). Window k of every part (``stretches.py``) is one run of that order, the
rounds j in ``[kw, (k + 1)w)``, so an edge inside it has read every earlier window whole and none of the later
ones. Version 6 numbers a source's slots of window k part after part: an edge inside the window (a restart on
another global batch puts edges there) reads some of them, not the first ones, and where one of the source's
passes ends inside the window, a row of the next pass could be read before the last rows of this one (max - min
reads 2; issue 43, item 0). Version 7 numbers the slots of such a window in the interleave order instead: the
window's positions that hold the source, ranked by (j, r), take its slots ``E_k, E_k + 1, ...`` of the epoch's
virtual order (``stretches.py``); every edge then reads a prefix of each source's stream, so every pass is whole at
every global batch edge, whatever the worlds. A slot keeps its row (the part that holds it in version 6's numbering
maps it, ``passes.py``): the window's rows are version 6's, permuted among its positions. Windows without a pass
edge are numbered as in version 6 (a part's slots its own; version 7 spreads them among its positions,
``spread.py``), so a pass-edge window (a few an epoch: one a pass of each source) is where a part's rows differ.

Cost: a pass-edge window ranks all its G positions (the grid; every part's piece of the window, spread), once per
window and process, kept for the window's reads; a window without a pass edge costs
nothing more. A rank's positions there read rows another part's share holds (its locality, for that one window).

The torchft loader reads whole lots, a step's edge after whole pieces of the parts in turn (``live.py``): version
6's own numbering is its prefix order, and it keeps it.

Worked (``interleave_ranks``' doctest): two parts, windows of 2; the source at part 0's offsets 0 and 1 and at
part 1's offset 1 ranks (j, r) = (0, 0), (1, 0), (1, 1) as 0, 1, 2, so they take the window's slots ``E_k``,
``E_k + 1``, ``E_k + 2`` of it: an edge after (1, 0) has read ``E_k`` and ``E_k + 1``, a prefix, whichever part
holds which in version 6's numbering. ``tests/shards/test_pass_edges.py`` pins a window where version 6 reads a row a
third time at an interleave prefix while another row of its source was read once, and 7 does not.

Words: docs/glossary.md (pass-edge window, interleave, window, pass, part).
"""

from __future__ import annotations

import numpy as np


def pass_edges(before: np.ndarray, edges: np.ndarray, lengths: list[int]) -> np.ndarray:
    """Which windows hold an edge of a source's pass strictly inside them (windows x sources, bool): window k's
    slots of source s, ``before[s] + edges[k, s] .. before[s] + edges[k + 1, s] - 1`` of its stream, span two
    passes or more (a pass ending on the window's edge needs nothing).

    >>> pass_edges(np.array([0]), np.array([[0], [3], [6], [9]]), [5]).ravel().tolist()
    [False, True, False]
    """
    sizes = np.asarray(lengths, dtype=np.int64)
    first = (before + edges[:-1]) // sizes
    last = (before + edges[1:] - 1) // sizes
    found: np.ndarray = (edges[1:] > edges[:-1]) & (last > first)
    return found


def interleave_ranks(held: np.ndarray) -> np.ndarray:
    """For a window's positions (rows: the offset j inside the window; columns: the part r) that hold a source
    (``held``, bool), each one's rank among them in the interleave order, (j, r) ascending; -1 elsewhere.

    >>> interleave_ranks(np.array([[True, False], [True, True]])).tolist()
    [[0, -1], [1, 2]]
    """
    flat = held.ravel()
    ranks = np.cumsum(flat, dtype=np.int64) - 1
    found: np.ndarray = np.where(flat, ranks, -1).reshape(held.shape)
    return found
