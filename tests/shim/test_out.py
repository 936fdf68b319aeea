"""The sync shim's ``step(out=)`` and ``reset(out=)``: the async core's, through the loop."""

from __future__ import annotations

import numpy as np
import pytest

import aiovec
from aiovec.testing import CountingEnv
from tests.backends_matrix import LOCAL_SYNC_BACKENDS


@pytest.mark.parametrize("backend", LOCAL_SYNC_BACKENDS)
def test_step_and_reset_fill_out_and_refuse_a_wrong_one(backend: str) -> None:
    with aiovec.VectorEnv([CountingEnv] * 3, backend=backend, copy=False) as envs:
        out = np.full((3, 2), -1, np.int64)
        with pytest.raises(ValueError, match="dtype int32"):
            envs.reset(seed=0, out=out.astype(np.int32))
        assert envs.get_attr("resets") == (0, 0, 0)
        obs, _ = envs.reset(seed=0, out=out)
        assert obs is out and out.tolist() == [[0, 1]] * 3
        with pytest.raises(TypeError, match="got list"):
            envs.step(np.ones(3, np.int64), out=out.tolist())
        with pytest.raises(ValueError, match="shape"):
            envs.step(np.ones(3, np.int64), out=out[:2])
        assert envs.get_attr("steps") == (0, 0, 0)
        obs, rewards, *_ = envs.step(np.ones(3, np.int64), out=out)
        assert obs is out and out.tolist() == [[1, 1]] * 3 and rewards.tolist() == [1.0] * 3
        view, *_ = envs.step(np.ones(3, np.int64))  # copy=False, no out: out stays as it was
        assert view is not out and view.tolist() == [[2, 1]] * 3
        assert out.tolist() == [[1, 1]] * 3
        # The *_async/*_wait pair works as before (Gymnasium's: no out).
        envs.step_async(np.ones(3, np.int64))
        assert envs.step_wait()[0].tolist() == [[3, 1]] * 3
