"""Fault-injection fixtures: a ledger per test, hung threads released at teardown."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from aiovec.testing import FaultLedger, release_hangs


@pytest.fixture
def ledger(tmp_path: Path) -> FaultLedger:
    """Where this test's ``FaultyEnv`` instances record what they did."""
    return FaultLedger(tmp_path / "ledger")


@pytest.fixture(autouse=True)
def _release_hung_threads() -> Iterator[None]:
    """A hang fault on an in-process backend blocks a thread: end it once the test is done."""
    yield
    release_hangs()
