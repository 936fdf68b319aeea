"""RLlib's tests run in their own venv (``make rllib``): RLlib pins its own Gymnasium."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.ray_runtime import ensure_ray


@pytest.fixture(scope="module")
def ray_runtime() -> Iterator[Any]:
    """The tests' loopback Ray runtime, shut down after the module (RLlib's actors with it)."""
    ray = ensure_ray()
    yield ray
    ray.shutdown()

