"""The documentation site's strict build fails on what it promises to catch, and its pages work.

Each test copies the tree (git's tracked and untracked, not ignored, files) to a temporary folder, breaks
one thing there, and runs ``mkdocs build --strict`` from .venv-docs on the copy: the build must fail, naming
what broke. The three breakages of issue 46.3: a broken link (and a broken anchor, a broken link to the
repository outside docs/), a docs page left out of the navigation, a public name without a docstring. One
unbroken build checks what the hook makes: README.md as the home page with its links mapped to the site, the
API reference with every public name, the doctests shown as code.

Marker ``docs``: ``make docs-build`` runs these (a build each: 46 s for the four at a load of 7 on the
2-CPU box); ``make test`` does not.
"""

from __future__ import annotations

import pathlib
import re
import shutil
import subprocess

import pytest

pytestmark = pytest.mark.docs

ROOT = pathlib.Path(__file__).resolve().parents[2]
MKDOCS = ROOT / ".venv-docs" / "bin" / "mkdocs"


def tree_copy(destination: pathlib.Path) -> pathlib.Path:
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=ROOT,
                            check=True, capture_output=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():  # a file deleted but not yet committed is still listed
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination / name)
    return destination


def build(tree: pathlib.Path) -> tuple[int, str]:
    """``mkdocs build --strict`` of ``tree`` into ``tree/out/site``: the exit code and everything it printed."""
    if not MKDOCS.is_file():
        pytest.fail(f"{MKDOCS} is missing: make docs-build creates .venv-docs")
    done = subprocess.run([str(MKDOCS), "build", "--strict", "--site-dir", str(tree / "out" / "site")], cwd=tree,
                          capture_output=True, text=True, timeout=240, env={"PATH": "/usr/bin:/bin",
                                                                            "NO_MKDOCS_2_WARNING": "1"})
    return done.returncode, done.stdout + done.stderr


def warnings(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("WARNING")]


@pytest.fixture
def tree(tmp_path: pathlib.Path) -> pathlib.Path:
    return tree_copy(tmp_path / "tree")


def append(path: pathlib.Path, text: str) -> None:
    path.write_text(path.read_text() + text)


def test_a_broken_link_or_anchor_fails_the_build(tree: pathlib.Path) -> None:
    append(tree / "docs" / "glossary.md", "\n[gone](no-such-page.md) and [nowhere](shards.md#no-such-heading)\n")
    append(tree / "docs" / "ray.md", "\n[an example that is not there](../examples/no_such_example.py)\n")
    append(tree / "README.md", "\nSee [the missing guide](docs/no-such-guide.md).\n")
    code, output = build(tree)
    assert code != 0, output
    found = "\n".join(warnings(output))
    assert "'glossary.md' contains a link 'no-such-page.md', but the target is not found" in found, output
    assert "'glossary.md' contains a link 'shards.md#no-such-heading', but the doc 'shards.md' does not contain " \
           "an anchor '#no-such-heading'" in found, output
    assert "'ray.md' contains a link '../examples/no_such_example.py', but the target" in found, output
    assert "'index.md' contains a link 'docs/no-such-guide.md', but the target" in found, output
    assert "Aborted with" in output and "in strict mode" in output, output


def test_a_page_left_out_of_the_navigation_fails_the_build(tree: pathlib.Path) -> None:
    (tree / "docs" / "left-out.md").write_text("# A page nobody listed\n\nIt links [home](../README.md).\n")
    code, output = build(tree)
    assert code != 0, output
    omitted = re.search(r"WARNING\s+-\s+The following pages exist in the docs directory, but are not included in "
                        r"the \"nav\" configuration:\n((?:\s+- .*\n)+)", output)
    assert omitted is not None and "left-out.md" in omitted.group(1), output
    assert "Aborted with" in output, output


def drop_docstring(path: pathlib.Path, opening: str) -> None:
    """Replace the docstring that starts with ``opening`` (once in the file) by ``pass``."""
    text = path.read_text()
    assert text.count(opening) == 1, f"{opening!r} is not once in {path}"
    start = text.index(opening)
    closing = text.index('"""', start + 3) + 3
    path.write_text(text[:start] + "pass" + text[closing:])


def test_a_public_name_without_a_docstring_fails_the_build(tree: pathlib.Path) -> None:
    """A name of shufflepoint.__all__, a public integration's name, and a public method of a public class."""
    src = tree / "src" / "shufflepoint"
    drop_docstring(src / "_order" / "__init__.py", '"""The data order of one epoch: a seekable permutation')
    drop_docstring(src / "integrations" / "accelerate" / "_patch.py", '"""Whether ``version`` is a final release')
    drop_docstring(src / "_loading" / "loader.py", '"""Jump to the first batch of ``epoch``.')
    code, output = build(tree)
    assert code != 0, output
    found = "\n".join(warnings(output))
    for name in ("shufflepoint.permutation", "shufflepoint.integrations.accelerate.version_in_range",
                 "shufflepoint.DataLoader.set_epoch"):
        assert f"public name without a docstring: {name} " in found, output
    assert "Aborted with" in output, output


def test_the_site_home_page_and_api_reference(tree: pathlib.Path) -> None:
    code, output = build(tree)
    assert code == 0, output
    site = tree / "out" / "site"
    home = (site / "index.html").read_text()
    assert "<h1 id=\"shufflepoint\">shufflepoint" in home  # README.md's title
    for link in ('href="many-nodes/"', 'href="cli/#which"', 'href="changelog/"',
                 'href="repo/examples/quickstart.py/"'):
        assert link in home, f"README's link not mapped to the site: {link}"
    assert "docs/many-nodes.md" not in re.sub(r"<code>.*?</code>", "", home)
    assert (site / "repo" / "examples" / "quickstart.py" / "index.html").is_file()
    accelerate = (site / "accelerate" / "index.html").read_text()
    assert 'href="../api/integrations/accelerate/"' in accelerate  # a module folder links its API page
    api = (site / "api" / "shufflepoint" / "index.html").read_text()
    absent = [name for name in exported(tree / "src" / "shufflepoint") if f'id="shufflepoint.{name}"' not in api]
    assert not absent, f"public names missing from the API reference: {absent}"
    assert "&gt;&gt;&gt;" in api and "<blockquote>" not in api  # doctests as code, not as nested quotes
    packages = (tree / "src" / "shufflepoint" / "integrations").glob("*/__init__.py")
    integrations = sorted(path.parent.name for path in packages if not path.parent.name.startswith("_"))
    assert {"accelerate", "transformers", "torchtitan"} <= set(integrations)
    for integration in integrations:
        page = (site / "api" / "integrations" / integration / "index.html").read_text()
        module = f"shufflepoint.integrations.{integration}"
        absent = [name for name in exported(tree / "src" / "shufflepoint" / "integrations" / integration)
                  if f'id="{module}.{name}"' not in page]
        assert not absent, f"{module}: names of its __all__ missing from its API page: {absent}"


def exported(package: pathlib.Path) -> list[str]:
    """The names of a package's ``__all__`` (read from its ``__init__.py``), dunders left out."""
    found = re.search(r"^__all__ = \[(.*?)\]", (package / "__init__.py").read_text(), re.S | re.M)
    assert found is not None, f"{package}/__init__.py has no __all__"
    return [name for name in re.findall(r'"(\w+)"', found.group(1)) if not name.startswith("__")]
