"""Every argument a public class takes is documented where it is taken: an ``Args:`` block (Google style,
as Grain's ``DataLoader.__init__`` has) in the class docstring or its ``__init__``'s, one entry per
parameter (``name (type): meaning, default and effect``). A catch-all (``*args``, ``**kwargs``) is exempt."""

from __future__ import annotations

import inspect
import re

import pytest

import shufflepoint

_ENTRY = re.compile(r"^(?P<name>\*{0,2}\w+)\s*(\([^)]*\))?\s*:")


def documented(doc: str | None) -> set[str]:
    """The names the ``Args:`` blocks of a docstring document: entries indented one step under ``Args:``,
    up to the next line indented no deeper than ``Args:`` itself."""
    names: set[str] = set()
    lines = inspect.cleandoc(doc or "").splitlines()
    for number, line in enumerate(lines):
        if line.strip() != "Args:":
            continue
        margin = len(line) - len(line.lstrip())
        entry_margin = None
        for following in lines[number + 1:]:
            if not following.strip():
                continue
            indent = len(following) - len(following.lstrip())
            if indent <= margin:
                break
            entry_margin = indent if entry_margin is None else entry_margin
            match = _ENTRY.match(following.strip())
            if indent == entry_margin and match:
                names.add(match.group("name").lstrip("*"))
    return names


def undocumented(cls: type) -> list[str]:
    """The parameters of ``cls(...)`` missing from the Args blocks of its docstring and its __init__'s."""
    found = documented(cls.__doc__) | documented(cls.__init__.__doc__)
    catch_alls = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    return [name for name, parameter in inspect.signature(cls).parameters.items()
            if parameter.kind not in catch_alls and name != "self" and name not in found]


@pytest.mark.parametrize("cls", [
    shufflepoint.Shards, shufflepoint.Packed, shufflepoint.Mixture,
    shufflepoint.DataLoader, shufflepoint.ResumableSampler,
], ids=lambda cls: cls.__name__)
def test_every_constructor_argument_is_in_an_args_block(cls: type) -> None:
    missing = undocumented(cls)
    assert not missing, f"{cls.__name__}: parameters missing from an Args: block of its docstring: {missing}"


def test_the_args_reader_finds_entries_and_stops_at_the_next_section() -> None:
    def example(self, a, b=1, *rest, c=None, **options):  # type: ignore[no-untyped-def]
        """Summary.

        Args:
            a (int): first. Required.
            b (int): second, over
                two lines: not_an_entry (x): continued.
            *rest: the catch-all, documented or not.

        Returns:
            c: not an argument: a later section.
        """

    assert documented(example.__doc__) == {"a", "b", "rest"}
    holder = type("Holder", (), {"__init__": example, "__doc__": "No Args block."})
    assert undocumented(holder) == ["c"]
