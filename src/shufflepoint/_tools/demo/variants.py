"""What the demo shows: its sizes, its save point, and the variants with the verdicts they must get."""

from __future__ import annotations

from dataclasses import dataclass

from shufflepoint._tools import audit as _audit

N, BATCH, EPOCHS, FEATURES, SEED = 96, 4, 2, 8, 1234
SAVE = _audit.SavePoint(epoch=1, step=5)
NPROC = 2
ELASTIC_BATCH = 8  # 1 process x 8 = the same global batch as 2 x 4


@dataclass(frozen=True)
class Variant:
    name: str
    label: str
    expected: str  # the verdict the demo expects
    weights_equal: bool  # whether the final weights should equal the uninterrupted run's
    needs_accelerate: bool


VARIANTS = (
    Variant("stock", "stock Accelerate", _audit.ORDER_LOST, False, True),
    Variant("patched", "Accelerate + patch_accelerate()", _audit.EXACT, True, True),
    Variant("shufflepoint", "shufflepoint.DataLoader", _audit.EXACT, True, False),
    Variant("elastic", "elastic 2 -> 1 (shufflepoint)", _audit.SAME_GLOBAL_BATCHES, False, False),
)


def accelerate_available() -> bool:
    import importlib.util

    return all(importlib.util.find_spec(m) is not None for m in ("accelerate", "torchdata"))
