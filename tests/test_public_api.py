"""The public surface: ``__all__`` is complete and every public name reports ``aiovec``."""

from __future__ import annotations

import re
import types
from pathlib import Path

import aiovec
import aiovec.testing


def test_all_lists_exactly_the_public_names() -> None:
    public = {name for name in vars(aiovec)
              if not name.startswith("_") and not isinstance(getattr(aiovec, name),
                                                             types.ModuleType)}
    assert set(aiovec.__all__) == public
    assert list(aiovec.__all__) == sorted(aiovec.__all__)


def test_public_names_report_aiovec_as_their_module() -> None:
    for name in aiovec.__all__:
        assert getattr(aiovec, name).__module__ == "aiovec", name


def test_testing_module_is_curated() -> None:
    for name in aiovec.testing.__all__:
        assert hasattr(aiovec.testing, name)


def test_version() -> None:
    assert isinstance(aiovec.__version__, str) and aiovec.__version__.count(".") == 2


def test_the_api_reference_documents_every_public_name() -> None:
    reference = (Path(__file__).resolve().parent.parent / "docs" / "api.md").read_text()
    documented = set(re.findall(r"^::: aiovec\.(\w+)$", reference, flags=re.MULTILINE))
    assert documented == set(aiovec.__all__)
