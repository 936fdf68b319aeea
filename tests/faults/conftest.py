"""Fault-injection fixtures: a ledger per test; hung threads released at teardown in the tests
that hang on purpose, a leak in any other."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from aiovec.testing import FaultLedger
from tests.leaks import settle_hangs


@pytest.fixture
def ledger(tmp_path: Path) -> FaultLedger:
    """Where this test's ``FaultyEnv`` instances record what they did."""
    return FaultLedger(tmp_path / "ledger")


@pytest.fixture(autouse=True)
def _settle_hung_threads(request: pytest.FixtureRequest) -> Iterator[None]:
    """A hang fault on an in-process backend blocks a thread: ended once a test marked
    ``hangs_on_purpose`` is done, a leak in any other (``tests.leaks.settle_hangs``)."""
    yield
    settle_hangs(request.node)
