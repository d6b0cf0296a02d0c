"""Examples in docstrings are executed, so they cannot drift from the code."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import schedc

MODULES = sorted(
    m.name for m in pkgutil.walk_packages(schedc.__path__, "schedc.") if not m.name.endswith("__main__")
)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0
