"""Examples in docstrings are executed, so they cannot drift from the code."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import schedc


def _with_examples(name: str) -> bool:
    """Whether a module's docstrings hold an example (a ``>>>`` line) for doctest to run."""
    return any(test.examples for test in doctest.DocTestFinder().find(importlib.import_module(name)))


MODULES = sorted(m.name for m in pkgutil.walk_packages(schedc.__path__, "schedc.")
                 if not m.name.endswith("__main__") and _with_examples(m.name))


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0


def test_readme_schedule_script_builds(tmp_path):
    """The README's schedule script runs as written (its package goes to a temporary folder)."""
    import re
    from pathlib import Path

    from schedc.package.build import session

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    script = re.findall(r"```python\n(.*?)```", readme, re.S)[0]
    with session(output_dir=tmp_path) as built:
        exec(compile(script, "README.md", "exec"), {})
    (hat,) = built.built
    assert hat.name == "tensor_matmul.hat" and hat.exists()


def test_readme_loads_packages_where_schedc_build_writes_them():
    """``schedc build samples/X.py`` writes hat_packages/X/X.hat: every load in the README says so."""
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    paths = re.findall(r'schedc\.load\("(hat_packages/[^"]+)"\)', readme)
    assert paths
    for path in paths:
        folder, _, file = path.removeprefix("hat_packages/").partition("/")
        assert file == f"{folder}.hat", path
