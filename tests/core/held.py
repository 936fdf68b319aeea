"""Sub-envs whose steps the test holds and releases, on every backend (a worker process, a
Ray actor, a thread or a task alike): ``Gates`` lives in a directory the test owns.

``gates.hold(i)`` makes sub-env ``i``'s steps wait until ``gates.release(i)``; each step
leaves a marker when it starts (``gates.entered``), when it finishes (``gates.finished``)
and, on the async backend, when it is cancelled (``gates.cancelled``); ``gates.most_at_once``
is the most steps any step saw running at once (its own included). A step's observation is
how many steps its sub-env started in all (resets do not count), its reward its action.
``HeldEchoEnv`` takes a list for its action and observes it, as the step received it.
"""

from __future__ import annotations

import functools
import os
import time
from pathlib import Path
from typing import Any

import anyio
import gymnasium as gym
import numpy as np

import aiovec

#: Seconds a held step waits for its release before it gives up (the test failed).
HOLD_LIMIT = 60.0
#: How often a held step looks for its release (the gate is a file: any process can open it).
POLL = 0.005


class Gates:
    """The gates and markers of the sub-envs ``factories`` makes, in ``directory``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        (directory / "active").mkdir()

    def factories(self, backend: str, count: int, env_class: type | None = None) -> list[Any]:
        if env_class is None:
            env_class = AsyncHeldEnv if backend == "async" else HeldEnv
        return [functools.partial(env_class, str(self.directory), index)
                for index in range(count)]

    def hold(self, *env_ids: int) -> None:
        for env_index in env_ids:
            (self.directory / f"hold-{env_index}").touch()

    def release(self, *env_ids: int) -> None:
        for env_index in env_ids:
            (self.directory / f"hold-{env_index}").unlink(missing_ok=True)

    def release_all(self) -> None:
        for gate in self.directory.glob("hold-*"):
            gate.unlink(missing_ok=True)

    def entered(self, env_index: int, step: int) -> bool:
        return (self.directory / f"entered-{env_index}-{step}").exists()

    def finished(self, env_index: int, step: int) -> bool:
        return (self.directory / f"finished-{env_index}-{step}").exists()

    def cancelled(self, env_index: int, step: int) -> bool:
        return (self.directory / f"cancelled-{env_index}-{step}").exists()

    def most_at_once(self) -> int:
        seen = self.directory / "seen"
        return max(map(int, seen.read_text().split())) if seen.exists() else 0

    async def until(self, condition: Any, *args: Any) -> None:
        """Wait (at most 30 s) until ``condition(*args)`` holds: a marker another process
        writes, looked for every 5 ms."""
        with anyio.fail_after(30):
            while not condition(*args):  # noqa: ASYNC110
                await anyio.sleep(POLL)  # a file another process writes: no event to await


class _Steps:
    """What both env classes share: the spaces, the markers, the count."""

    observation_space = gym.spaces.Box(0, 1e9, (1,), np.float64)
    action_space = gym.spaces.Discrete(1000)

    def __init__(self, directory: str, index: int) -> None:
        self.directory = Path(directory)
        self.index = index
        self.steps = 0

    def _enter(self) -> tuple[int, Path]:
        self.steps += 1
        active = self.directory / "active" / str(self.index)
        active.touch()
        running = len(os.listdir(self.directory / "active"))
        with open(self.directory / "seen", "a") as seen:
            seen.write(f"{running}\n")
        (self.directory / f"entered-{self.index}-{self.steps}").touch()
        return self.steps, active

    def _held(self) -> bool:
        return (self.directory / f"hold-{self.index}").exists()

    def _finish(self, step: int, action: Any) -> Any:
        (self.directory / f"finished-{self.index}-{step}").touch()
        return np.array([step], dtype=np.float64), float(action), False, False, {}


class HeldEnv(_Steps, gym.Env[Any, Any]):
    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        return np.zeros(1), {}

    def step(self, action: Any) -> Any:
        step, active = self._enter()
        try:
            self.wait_for_release()
        finally:
            active.unlink()
        return self._finish(step, action)

    def wait_for_release(self) -> None:
        """Return once the sub-env is not held (``call`` it to hold up a call)."""
        deadline = time.monotonic() + HOLD_LIMIT
        while self._held():
            if time.monotonic() > deadline:
                raise TimeoutError(f"sub-env {self.index} was never released")
            time.sleep(POLL)


class AsyncHeldEnv(_Steps, aiovec.AsyncEnv[Any, Any]):
    async def reset(self, *, seed: int | None = None,
                    options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        await super().reset(seed=seed)
        return np.zeros(1), {}

    async def step(self, action: Any) -> Any:
        step, active = self._enter()
        try:
            with anyio.fail_after(HOLD_LIMIT):
                while self._held():  # noqa: ASYNC110
                    await anyio.sleep(POLL)  # the same file gate as every other backend's
        except anyio.get_cancelled_exc_class():
            (self.directory / f"cancelled-{self.index}-{step}").touch()
            raise
        finally:
            active.unlink()
        return self._finish(step, action)


class HeldEchoEnv(HeldEnv):
    """A ``HeldEnv`` whose action is a list (``aiovec.ObjectSpace(list)``), observed as the
    step received it."""

    observation_space = action_space = aiovec.ObjectSpace(list)  # type: ignore[assignment]

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        return [], {}

    def _finish(self, step: int, action: Any) -> Any:
        (self.directory / f"finished-{self.index}-{step}").touch()
        return list(action), 0.0, False, False, {}
