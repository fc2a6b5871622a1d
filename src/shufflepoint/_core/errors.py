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


class ResumeWarning(UserWarning):
    """A resume cannot be exact, and here is why. Never silenced by shufflepoint itself."""


def field_error(field: str, found: object, expected: str, fix: str) -> StateError:
    """Build a StateError in the house format: the rule, found vs expected, the fix."""
    return StateError(f"state field {field!r}: found {found!r}, expected {expected}. {fix}")


_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # .../shufflepoint


def warn_user(message: str, category: type[Warning] = UserWarning) -> None:
    """``warnings.warn`` attributed to the first line outside shufflepoint (the user's call), however deep
    inside the package it is said: a fixed ``stacklevel`` breaks whenever a layer is added."""
    frame, level = sys._getframe(1), 2  # stacklevel 2: the caller of warn_user
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE + os.sep):
        frame, level = frame.f_back, level + 1  # type: ignore[assignment]
    warnings.warn(message, category, stacklevel=level)
