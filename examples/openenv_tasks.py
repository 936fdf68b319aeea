"""OpenEnv environments under aiovec: a task per episode, the server's reward as the step's,
a session per sub-env, all of them closed with the vector env.

It starts an OpenEnv server on 127.0.0.1 (an env written with OpenEnv's own server API: guess
a number, hinted higher or lower), then plays a dataset of targets on 16 sub-envs
(``aiovec.openenv.OpenEnvEnv`` on the async backend), each episode's target handed out by
``episode_options``, with a "policy" that bisects on the hints. Needs OpenEnv's package:
``pip install aiovec[openenv]`` (openenv-core).

    python examples/openenv_tasks.py [--num-envs 16] [--tasks 200]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import socket
import threading
from typing import Any

import numpy as np
import uvicorn
from openenv.core.env_server import Action, Environment, Observation, State, create_app

import aiovec
from aiovec.openenv import OpenEnvEnv

#: The server's live sessions (one env instance each, from its making to its close).
SESSIONS: set[int] = set()


class Guess(Action):
    guess: int


class Hint(Observation):
    low: int = 0
    high: int = 1023
    hint: str = ""


class GuessNumber(Environment[Guess, Hint, State]):
    """Find ``target`` in [0, 1023]: each wrong guess narrows the range. Reward on the right
    guess: 1 minus 0.05 per guess before it."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        SESSIONS.add(id(self))
        self._state, self._target, self._low, self._high = State(step_count=0), 0, 0, 1023

    def reset(self, seed: int | None = None, episode_id: str | None = None,
              target: int = 0, **kwargs: Any) -> Hint:
        self._state, self._target, self._low, self._high = State(step_count=0), target, 0, 1023
        return Hint(low=0, high=1023)

    def step(self, action: Guess, timeout_s: float | None = None, **kwargs: Any) -> Hint:
        self._state.step_count += 1
        if action.guess == self._target:
            return Hint(low=self._low, high=self._high, hint="right", done=True,
                        reward=max(0.0, 1.0 - 0.05 * (self._state.step_count - 1)))
        if action.guess < self._target:
            self._low, hint = action.guess + 1, "higher"
        else:
            self._high, hint = action.guess - 1, "lower"
        return Hint(low=self._low, high=self._high, hint=hint, reward=0.0)

    @property
    def state(self) -> State:
        return self._state

    def close(self) -> None:
        SESSIONS.discard(id(self))


def serve() -> tuple[str, uvicorn.Server, threading.Thread]:
    """The OpenEnv app under uvicorn, in a thread of its own → its URL, server and thread."""
    app = create_app(GuessNumber, Guess, Hint, max_concurrent_envs=64)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    # openenv-core 0.3.0's server logs a harmless WebSocketDisconnect traceback each time a
    # client closes its session (it closes the socket again): errors only, not those.
    server = uvicorn.Server(uvicorn.Config(app, log_level="critical"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:  # (a demo: a readiness poll is enough)
        threading.Event().wait(0.01)
    return f"http://127.0.0.1:{sock.getsockname()[1]}", server, thread


def bisect(observations: Any) -> list[dict[str, int]]:
    """The "policy": the middle of each sub-env's range (observations are dicts)."""
    return [{"guess": (row["low"] + row["high"]) // 2} for row in observations]


async def play(url: str, num_envs: int, num_tasks: int) -> None:
    targets = iter(np.random.default_rng(0).permutation(1024)[:num_tasks].tolist())
    rewards: dict[int, float] = {}
    async with aiovec.AsyncVectorEnv(
            [functools.partial(OpenEnvEnv, url)] * num_envs, backend="async", timeout=30,
            episode_options=lambda env_index: {"target": next(targets, -1)}) as envs:
        observations, _ = await envs.reset(seed=0)
        print(f"{num_envs} sessions open on the server: {len(SESSIONS)}")
        while len(rewards) < num_tasks:
            observations, reward, terminated, _, infos = await envs.step(bisect(observations))
            for env_index in np.flatnonzero(terminated):  # next-step mode: the ending rows
                target = infos["episode_options"][env_index]["target"]
                if target >= 0:  # (-1: the dataset ran out: an idle episode)
                    rewards[target] = float(reward[env_index])
    for _ in range(1000):  # the server ends each session as its connection closes
        if not SESSIONS:
            break
        await asyncio.sleep(0.01)
    print(f"{len(rewards)} tasks played, mean reward {np.mean(list(rewards.values())):.3f}; "
          f"sessions left on the server after close: {len(SESSIONS)}")
    assert not SESSIONS
    print(f"every episode counted: {len(rewards)} rewards for {num_tasks} tasks")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--tasks", type=int, default=200, help="at most 1,024")
    args = parser.parse_args()
    url, server, thread = serve()
    try:
        asyncio.run(play(url, args.num_envs, args.tasks))
    finally:
        server.should_exit = True
        thread.join(10)


if __name__ == "__main__":
    main()
