"""A ``Packed``'s fingerprint, in parts a refused resume can name, and what changed since a state's.

``packed:<hash of the whole>-<8 hex digits per part>-<the packing in clear>``, the parts being the documents
(the dataset's own fingerprint, else its length), what a token is (field or tokenizer), every document's token
count, and the packing (seq_len, bos, eos), e.g. ``...-seq_len=2048,bos=None,eos=2``: so that a refused resume
can name the saved values. Shufflepoint 0.3 wrote it without the packing in clear (``fingerprint_of_0_3``).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

FINGERPRINT_PREFIX = "packed:"
PARTS = ("documents", "tokens", "counts", "packing")


def short(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def fingerprint_of_0_3(parts: dict[str, str]) -> str:
    """The fingerprint shufflepoint 0.3 wrote: the digests, without the packing in clear."""
    whole = hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]
    return f"{FINGERPRINT_PREFIX}{whole}-" + "".join(short(parts[name]) for name in PARTS)


def fingerprint(parts: dict[str, str], packing: dict[str, int | None]) -> str:
    return f"{fingerprint_of_0_3(parts)}-{','.join(f'{name}={value}' for name, value in packing.items())}"


def explain(saved: str, parts: dict[str, str], packing: dict[str, int | None], source: Any, counts_digest: str,
            bound: tuple[int, int] | None) -> str:
    """Which part of the packing differs from the one a state with fingerprint ``saved`` was taken on
    (``source``: the ``TokenSource``; ``bound``: the (seed, shuffle_block) a loader bound, or None)."""
    body, _, suffix = saved.removeprefix(FINGERPRINT_PREFIX).partition(":")
    _, _, rest = body.partition("-")
    digests, _, clear = rest.partition("-")
    if not saved.startswith(FINGERPRINT_PREFIX) or len(digests) != 8 * len(PARTS):
        return "the packed corpus changed: its documents or their token counts, seq_len, the tokens, bos or eos"
    changed = [name for k, name in enumerate(PARTS) if digests[8 * k:8 * (k + 1)] != short(parts[name])]
    why = {"documents": "the documents changed (the dataset's fingerprint)",
           "tokens": (f"the tokenizer changed: this Packed tokenizes with tokenizer={source.tokenizer!r}, the "
                      "state was taken with another tokenizer (or the tokens field)" if source.tokenize
                      else f"the tokens changed: this Packed reads the field {source.field!r}, the state was "
                      "taken with another field or a tokenizer"),
           "counts": "the documents' token counts changed" + (
               " (or the state was saved before shufflepoint counted tokens per shard, whose digest of a Shards "
               "corpus's counts was taken over all of them at once: with the same corpus and tokens, load with "
               "strict=False to resume)" if counts_digest.startswith("shards:") else ""),
           "packing": _explain_packing(clear, packing)}
    found = [why[name] for name in changed]
    if not clear and not changed:
        found.append("the state was saved by shufflepoint 0.3, whose Packed fingerprint did not hold the packing "
                     "in clear; by its measure this Packed is the same (documents, tokens, counts, seq_len, bos, "
                     "eos): load with strict=False to resume")
    blocks = suffix.split(":", 1)[0]
    if bound is not None and blocks.startswith("blocks=") and blocks != f"blocks={bound[1]}":
        found.append(f"shuffle_block changed ({blocks[7:]} when saved, {bound[1]} now)")
    return "; ".join(found) or "the packed corpus is the same; the state's fingerprint differs elsewhere"


def _explain_packing(clear: str, packing: dict[str, int | None]) -> str:
    """The packing parameters that differ, each with its saved and its new value, and the fix."""
    now = {name: str(value) for name, value in packing.items()}
    saved = dict(item.partition("=")[::2] for item in clear.split(",")) if clear else {}
    if set(saved) != set(now):  # a state of shufflepoint 0.3: only a digest of the packing
        return (f"the packing changed: now seq_len={packing['seq_len']}, bos={packing['bos']}, eos={packing['eos']} "
                "(the state holds a digest of its seq_len, bos and eos, not their values)")
    differ = [name for name in now if saved[name] != now[name]]
    named = ", ".join(f"{name}: saved {saved[name]}, now {now[name]}" for name in differ)
    fix = ", ".join(f"{name}={saved[name]}" for name in differ)
    return (f"the packing changed: packing parameter {named}; build the Packed with {fix} to resume this run, "
            "or start a new run")


def seq_lens_making(tokens: list[int], rows: int) -> tuple[int, int] | None:
    """The seq_lens L (a range ``(low, high)``) at which sources of ``tokens`` tokens an epoch pack into ``rows``
    rows in all, ``sum(t // L)``; None where no L does. The sum only falls as L grows: two binary searches.

    >>> seq_lens_making([100, 50], 18), seq_lens_making([100, 50], 7), seq_lens_making([100, 50], 17)
    ((8, 8), (17, 20), None)
    """
    def made(length: int) -> int:
        return sum(t // length for t in tokens)

    def first_at_most(count: int) -> int:  # the least L with made(L) <= count
        low, high = 1, max(max(tokens, default=1), 1) + 1
        while low < high:
            middle = (low + high) // 2
            low, high = (low, middle) if made(middle) <= count else (middle + 1, high)
        return low

    low, high = first_at_most(rows), first_at_most(rows - 1) - 1 if rows > 0 else 2**62
    return (low, high) if rows >= 0 and low <= high and made(low) == rows else None
