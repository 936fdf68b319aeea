"""Fixtures of the core tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.core.held import Gates


@pytest.fixture
def gates(tmp_path: Path) -> Iterator[Gates]:
    """Gates for held sub-envs (``tests/core/held.py``), all released when the test ends,
    failed or not, so that no step is left held."""
    held = Gates(tmp_path)
    yield held
    held.release_all()
