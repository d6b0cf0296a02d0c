"""Examples in docstrings are executed, so they cannot drift from the code."""

from __future__ import annotations

import doctest
import importlib
import pkgutil
from pathlib import Path

import pytest

import schedc


def _with_examples(name: str) -> bool:
    """Whether a module's docstrings hold an example (a ``>>>`` line) for doctest to run."""
    return any(test.examples for test in doctest.DocTestFinder().find(importlib.import_module(name)))


ROOT = Path(__file__).resolve().parent.parent
MODULES = sorted(m.name for m in pkgutil.walk_packages(schedc.__path__, "schedc.")
                 if not m.name.endswith("__main__") and _with_examples(m.name))


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0


def test_readme_first_kernel_builds_and_emulates_as_written(tmp_path, monkeypatch):
    """The README's first kernel runs as written, then its emulate example: the package where
    the script asks for it (in a temporary folder), the function emulated on the caller's arrays."""
    import re

    readme = (ROOT / "README.md").read_text()
    script, emulated = re.findall(r"```python\n(.*?)```", readme, re.S)[:2]
    monkeypatch.chdir(tmp_path)
    exec(compile(script, "README.md", "exec"), {})
    assert (tmp_path / "hat_packages/first_matmul/first_matmul.hat").exists()
    exec(compile(emulated, "README.md", "exec"), {})  # asserts the product itself


def test_every_relative_link_of_the_docs_reaches_a_file():
    import re

    for page in (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))):
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", page.read_text()):
            assert (page.parent / target).exists(), f"{page.name}: {target}"


def test_the_docs_load_packages_where_schedc_build_writes_them():
    """``schedc build samples/X.py`` writes hat_packages/X/X.hat: every load in the README and
    the docs says so."""
    import re

    paths = [path for page in (ROOT / "README.md", *(ROOT / "docs").glob("*.md"))
             for path in re.findall(r'schedc\.load\("(hat_packages/[^"]+)"\)', page.read_text())]
    assert paths
    for path in paths:
        folder, _, file = path.removeprefix("hat_packages/").partition("/")
        assert file == f"{folder}.hat", path
