"""SkyRL-gym envs written with its API for the tests (importable by worker processes)."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Any

from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput


class LedgerEnv(BaseTextEnv):
    """Holds a file in ``extras["ledger"]`` from its making to its ``close`` (a sandbox it
    would lease). The action ``extras["answer"]`` ends the episode with reward 1; ``"raise"``
    raises, ``"die"`` ends its process, ``"hang"`` takes 30 s; anything else, reward 0 and
    the user says try again."""

    def __init__(self, env_config: Any = None, extras: dict[str, Any] | None = None) -> None:
        super().__init__()
        extras = extras or {}
        self.answer = extras["answer"]
        self.max_turns = int(extras.get("max_turns", 3))
        self.lease = Path(extras["ledger"]) / uuid.uuid4().hex
        self.lease.touch()

    def step(self, action: str) -> BaseTextEnvStepOutput:
        if action == "raise":
            raise RuntimeError(f"the tool crashed on {self.answer!r}")
        if action == "die":
            os._exit(3)
        if action == "hang":
            time.sleep(30.0)
        self.turns += 1
        right = action == self.answer
        done = right or self.turns >= self.max_turns
        return BaseTextEnvStepOutput(
            observations=[] if done else [{"role": "user", "content": "try again"}],
            reward=1.0 if right else 0.0, done=done, metadata={"turn": self.turns})

    def close(self) -> None:
        self.lease.unlink(missing_ok=True)
