"""``except*`` picks sub-env failures out of the group (Python 3.11+ syntax; see conftest)."""

from __future__ import annotations

import numpy as np
import pytest

import aiovec
from aiovec.testing import CountingEnv
from tests.envs import RaisingEnv


@pytest.mark.anyio
async def test_sub_env_errors_work_with_except_star() -> None:
    seen: list[int] = []
    factories = [lambda: RaisingEnv("step"), CountingEnv, lambda: RaisingEnv("step")]
    async with aiovec.AsyncVectorEnv(factories, backend="inline") as envs:
        await envs.reset()
        try:
            await envs.step(np.zeros(3, np.int64))
        except* aiovec.SubEnvError as group:
            seen.extend(error.env_id for error in group.exceptions)  # type: ignore[attr-defined]
    assert seen == [0, 2]
