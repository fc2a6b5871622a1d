"""How shufflepoint speaks up: a refused state, a resume that cannot be exact, a shard it cannot read."""

from __future__ import annotations

import os
import sys
import warnings


class StateError(ValueError):
    """A state was refused: malformed, from another library or version, or for another setup.

    The message names the field, the value found, the value expected, and the likely fix. A load
    that raises this leaves the object it was called on exactly as it was.
    """


class ShardError(OSError):
    """A shard of a corpus could not be read: missing, vanished, truncated, corrupt, or its
    storage kept failing after the retries. The message names the shard (``.shard``) and what was
    found; no sample is ever skipped silently in its place.
    """

    def __init__(self, shard: str, message: str) -> None:
        super().__init__(f"shard {shard}: {message}")
        self.shard = shard


class SampleError(ValueError):
    """One sample's content cannot become what the transform makes of it: an image that does not decode, a
    field that is missing. Raised by the transform, which knows the sample's key but not its file; the
    loader (and ``Shards``) re-raise it as a :class:`ShardError` naming the shard and the row, because a
    bad sample is reported, never skipped."""


REPLACE_SHARD = "replace the shard with a good copy (no sample is skipped in its place)"


def shard_error(shard: str, found: str, expected: str, fix: str = REPLACE_SHARD, *,
                why: str | None = None) -> ShardError:
    """A :class:`ShardError` in the house shape, ``shard <name>`` its subject; ``found`` a description. The
    library that failed to read it is quoted, when it must be, as ``why=str(error)``: its own message."""
    subject = f"shard {shard}"
    return ShardError(shard, refusal(subject, Plain(found), expected, fix, why=why).removeprefix(subject + ": "))


class ResumeWarning(UserWarning):
    """A resume cannot be exact, and here is why. Never silenced by shufflepoint itself."""


DAMAGED = "the state is damaged or was edited; use another checkpoint"


class Plain(str):
    """A ``found`` that is already a description (``"3 world sizes"``), shown as it is, not with repr."""

    def __repr__(self) -> str:
        return str(self)


def shown(found: object, limit: int = 80) -> str:
    """``found`` as a refusal shows it: repr (a :class:`Plain` as it is), cut at ``limit`` characters."""
    text = repr(found)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def refusal(subject: str, found: object, expected: str, fix: str, *, why: str | None = None) -> str:
    """The house shape of a refusal, one part a line, so that a person can scan it::

        seed: found -1
          expected: an int in [0, 2**64)
          fix: pass a seed >= 0

    ``subject`` names the argument or state field; ``found`` is shown with repr, cut at 80
    characters (wrap a description in :class:`Plain`); ``why`` is said only when given.
    """
    lines = [f"{subject}: found {shown(found)}", f"  expected: {expected}"]
    if why:
        lines.append(f"  why: {why}")
    lines.append(f"  fix: {fix}")
    return "\n".join(lines)


class Refused(ValueError):
    """A refusal that keeps its parts, so that a caller which re-says it under its own subject
    (a state field) passes the parts up instead of quoting the message inside its own."""

    def __init__(self, subject: str, found: object, expected: str, fix: str, *, why: str | None = None) -> None:
        super().__init__(refusal(subject, found, expected, fix, why=why))
        self.subject, self.found, self.expected, self.fix, self.why = subject, found, expected, fix, why

    def where(self) -> Plain:
        """What was found, and where: ``segments[1] = [4, 3]``, the ``found`` of a caller's refusal."""
        return Plain(f"{self.subject} = {shown(self.found, 60)}")


def field_error(field: str, found: object, expected: str, fix: str, *, why: str | None = None) -> StateError:
    """A StateError in the house shape, for the state field ``field``."""
    return StateError(refusal(f"state field {field!r}", found, expected, fix, why=why))


_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # .../shufflepoint


def warn_user(message: str, category: type[Warning] = UserWarning) -> None:
    """``warnings.warn`` attributed to the first line outside shufflepoint (the user's call), however deep
    inside the package it is said: a fixed ``stacklevel`` breaks whenever a layer is added."""
    frame, level = sys._getframe(1), 2  # private: CPython's documented frame walk; stacklevel 2: warn_user's caller
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE + os.sep):
        frame, level = frame.f_back, level + 1  # type: ignore[assignment]
    warnings.warn(message, category, stacklevel=level)


class HubError(ValueError):
    """A Hugging Face Hub dataset cannot be read as asked, for a reason a person must act on. ``reason``
    says which: ``"gated"`` (no token of an account that accepted its conditions), ``"not_found"`` (no
    such repository, or a private one without a token), ``"revision"`` (no such branch, tag or commit),
    ``"config"`` or ``"split"`` (not in the dataset), ``"rate_limited"`` (HTTP 429 after the retries). The
    message names the dataset, what was found and expected, and the fix."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
