"""A sub-env for the error test: CartPole that raises on step if it was seeded ``crash_seed``."""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium.envs.classic_control import CartPoleEnv
from gymnasium.envs.registration import EnvSpec


class CrashingCartPole(CartPoleEnv):
    """CartPole that raises ``RuntimeError`` on step once a reset seeded it ``crash_seed``
    (aiovec seeds sub-env ``i`` with ``seed + i``, so the seed picks the sub-env that fails)."""

    def __init__(self, crash_seed: int) -> None:
        super().__init__()
        self.crash_seed = crash_seed
        self.crashes = False

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        if seed is not None:
            self.crashes = seed == self.crash_seed
        return super().reset(seed=seed, options=options)

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self.crashes:
            raise RuntimeError("the simulator crashed")
        return super().step(action)


#: Not registered: ``aiovec.rllib.env_creator`` takes the spec itself.
CRASHING_CARTPOLE = EnvSpec("CrashingCartPole-v0", entry_point=CrashingCartPole)
