"""An OpenEnv server for the tests, written with OpenEnv's own server API (``Environment``,
``create_app``) and run by uvicorn on 127.0.0.1: ``python openenv_server.py LEDGER`` prints
``PORT <n>`` once it listens.

``GuessEnv`` plays the task its reset names (``task=t``): guess ``t`` for reward 1 and the
episode's end; any other guess, reward 0, up to three guesses. Guess -7 raises (a tool that
crashes), -8 takes 3 s (a hung tool, for a deadline). Each env instance (one per WebSocket
session) holds a file in LEDGER from its making to its ``close``: what is left there are
sessions the server still holds.
"""

from __future__ import annotations

import os
import socket
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import uvicorn
from openenv.core.env_server import Action, Environment, Observation, State, create_app

LEDGER = Path(os.environ.get("AIOVEC_OPENENV_LEDGER", "."))


class GuessAction(Action):
    guess: int


class GuessObservation(Observation):
    task: int = -1
    turn: int = 0


class GuessEnv(Environment[GuessAction, GuessObservation, State]):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._session = LEDGER / uuid.uuid4().hex
        self._session.touch()
        self._state = State(episode_id=None, step_count=0)
        self._task = -1

    def reset(self, seed: int | None = None, episode_id: str | None = None,
              **kwargs: Any) -> GuessObservation:
        self._task = int(kwargs.get("task", -1))
        self._state = State(episode_id=episode_id, step_count=0)
        return GuessObservation(task=self._task, turn=0, done=False, reward=None)

    def step(self, action: GuessAction, timeout_s: float | None = None,
             **kwargs: Any) -> GuessObservation:
        if action.guess == -7:
            raise RuntimeError(f"the tool crashed in task {self._task}")
        if action.guess == -8:
            time.sleep(3.0)
        self._state.step_count += 1
        right = action.guess == self._task
        return GuessObservation(task=self._task, turn=self._state.step_count,
                                done=right or self._state.step_count >= 3,
                                reward=1.0 if right else 0.0)

    @property
    def state(self) -> State:
        return self._state

    def close(self) -> None:
        self._session.unlink(missing_ok=True)


app = create_app(GuessEnv, GuessAction, GuessObservation, max_concurrent_envs=256)


def main() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    server.run(sockets=[sock])


if __name__ == "__main__":
    LEDGER = Path(sys.argv[1])
    main()
