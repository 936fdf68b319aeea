"""The allow-list: the only environments clients may lease, by id, and how each one runs.

Clients name an env id; they never send code or pickles. Each entry fixes the factory, the
backend and the limits, so a client cannot make the server run anything else.
"""

from __future__ import annotations

import functools
import time
from typing import Any

import gymnasium as gym

from aiovec.serve import ServedEnv


class BusyCartPole(gym.Wrapper[Any, Any, Any, Any]):
    """CartPole that burns CPU (``cpu_seconds``) or waits (``wait_seconds``) on every step,
    like a heavy or remote simulator."""

    def __init__(self, cpu_seconds: float = 0.0, wait_seconds: float = 0.0) -> None:
        super().__init__(gym.make("CartPole-v1"))
        self.cpu_seconds, self.wait_seconds = cpu_seconds, wait_seconds

    def step(self, action: Any) -> Any:
        if self.cpu_seconds:
            deadline = time.perf_counter() + self.cpu_seconds
            while time.perf_counter() < deadline:
                pass
        if self.wait_seconds:
            time.sleep(self.wait_seconds)
        return super().step(action)


class CrashingCartPole(gym.Wrapper[Any, Any, Any, Any]):
    """CartPole whose simulator raises on one step in ``every`` (a flaky simulator)."""

    def __init__(self, every: int = 5) -> None:
        super().__init__(gym.make("CartPole-v1"))
        self.every, self.count = every, 0

    def step(self, action: Any) -> Any:
        self.count += 1
        if self.count % self.every == 0:
            raise RuntimeError(f"simulator fault at step {self.count}")
        return super().step(action)


#: The allow-list: public env id -> how sessions of it are built (aiovec.serve.ServedEnv).
SERVED: dict[str, ServedEnv] = {
    "CartPole-v1": ServedEnv("CartPole-v1", backend="thread", max_envs=16, timeout=10.0,
                             description="Gymnasium's CartPole, each sub-env on its own thread"),
    "HeavyCartPole-v0": ServedEnv(
        functools.partial(BusyCartPole, cpu_seconds=0.005), backend="process", max_envs=8,
        timeout=10.0, vector_options={"num_workers": 2},
        description="CartPole burning 5 ms of CPU per step, in worker processes (the event "
                    "loop never waits for it)"),
    "SlowCartPole-v0": ServedEnv(
        functools.partial(BusyCartPole, wait_seconds=2.0), backend="process", max_envs=4,
        timeout=30.0, vector_options={"num_workers": 2},
        description="CartPole waiting 2 s per step: a slow remote simulator"),
    "CrashingCartPole-v0": ServedEnv(
        functools.partial(CrashingCartPole, every=3), backend="thread", max_envs=4,
        timeout=10.0, description="CartPole whose simulator fails every third step"),
}
