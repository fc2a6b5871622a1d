"""The two ways shufflepoint speaks up: a refused state, and a resume that cannot be exact."""

from __future__ import annotations


class StateError(ValueError):
    """A state was refused: malformed, from another library or version, or for another setup.

    The message names the field, the value found, the value expected, and the likely fix. A load
    that raises this leaves the object it was called on exactly as it was.
    """


class ResumeWarning(UserWarning):
    """A resume cannot be exact, and here is why. Never silenced by shufflepoint itself."""


def field_error(field: str, found: object, expected: str, fix: str) -> StateError:
    """Build a StateError in the house format: the rule, found vs expected, the fix."""
    return StateError(f"state field {field!r}: found {found!r}, expected {expected}. {fix}")
