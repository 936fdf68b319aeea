"""The servers the serve and remote tests talk to, each run by ``python -m tests.serve.apps
NAME`` under a real uvicorn on 127.0.0.1 (``conftest.serve`` starts and stops them)."""

from __future__ import annotations

import functools
import sys
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import gymnasium as gym
import numpy as np
from starlette.applications import Starlette
from starlette.routing import Mount

import aiovec
from aiovec.serve import EnvServer, Limits, ServedEnv, run
from aiovec.testing import CountingEnv, EpisodeEnv, Fault, FaultyEnv
from tests.envs import TaskEnv
from tests.object_envs import ChatEnv, UnicodeTextEnv

#: Bearer tokens of the ``tokens`` server, by principal.
TOKENS = {"alice": "alice-token-0123456789", "bob": "bob-token-0123456789ab"}
ALLOWED_ORIGIN = "https://trusted.example"


class WaitingCartPole(gym.Wrapper[Any, Any, Any, Any]):
    """CartPole whose steps wait ``seconds`` (a slow remote simulator); the wait ends early
    when the step is abandoned, as the thread backend's sub-envs cannot be interrupted."""

    def __init__(self, seconds: float) -> None:
        super().__init__(gym.make("CartPole-v1"))
        self.seconds = seconds

    def step(self, action: Any) -> Any:
        threading.Event().wait(self.seconds)
        return super().step(action)


class CrashingCartPole(gym.Wrapper[Any, Any, Any, Any]):
    """CartPole that raises on every third step."""

    def __init__(self) -> None:
        super().__init__(gym.make("CartPole-v1"))
        self.count = 0

    def step(self, action: Any) -> Any:
        self.count += 1
        if self.count % 3 == 0:
            raise RuntimeError(f"simulator fault at step {self.count}")
        return super().step(action)


class BadCloseCartPole(gym.Wrapper[Any, Any, Any, Any]):
    """CartPole whose ``close`` raises (a simulator that fails to shut down cleanly)."""

    def __init__(self) -> None:
        super().__init__(gym.make("CartPole-v1"))

    def close(self) -> None:
        super().close()
        raise RuntimeError("the simulator would not shut down")


class FlakyCounter(CountingEnv):
    """``CountingEnv`` (deterministic whatever the seed) whose episodes last 3 steps, and
    whose every instance raises at its 5th step, 10th, ...: autoresets and restarts a
    differential can compare."""

    def __init__(self) -> None:
        super().__init__(episode_length=3)
        self.calls = 0

    def step(self, action: int) -> Any:
        self.calls += 1
        if self.calls % 5 == 0:
            raise RuntimeError(f"flaky at call {self.calls}")
        return super().step(action)


class SeedHangingCartPole(gym.Wrapper[Any, Any, Any, Any]):
    """CartPole whose reset with seed 666 hangs for 10 s (one sub-env of a batch can be made
    to hang, by its seed)."""

    def __init__(self) -> None:
        super().__init__(gym.make("CartPole-v1"))

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        if seed == 666:
            threading.Event().wait(10.0)
        return super().reset(seed=seed, options=options)


def hanging_env(seconds: float = 30.0) -> FaultyEnv:
    """An env whose every instance hangs (``seconds``) at its first step."""
    return FaultyEnv(0, faults=[Fault("hang", "step", at=0)], hang_seconds=seconds)


class ActionHangingEnv(FaultyEnv):
    """``FaultyEnv`` whose step with action 666 hangs for 30 s (one sub-env of a batch can be
    made to hang, by its action)."""

    def step(self, action: Any) -> Any:
        if float(action) == 666.0:
            threading.Event().wait(30.0)
        return super().step(action)


class SequenceObservations(gym.Env[Any, Any]):
    """Observations in a ``Sequence`` space, which has no schema on the wire."""

    observation_space = gym.spaces.Sequence(gym.spaces.Discrete(3))
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        super().reset(seed=seed)
        return (0,), {}

    def step(self, action: Any) -> Any:
        return (0,), 0.0, False, False, {}


class SleepyEnv(aiovec.AsyncEnv):
    """A coroutine env whose step sleeps for its action (seconds): a tool call, which the
    async backend cancels when its step is aborted. Its observation is how many steps it
    started, its reward the action."""

    observation_space = gym.spaces.Box(0, 1e9, (1,), np.float64)
    action_space = gym.spaces.Box(0.0, 60.0, (), np.float64)

    async def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        await super().reset(seed=seed)
        self.steps = 0
        return np.zeros(1), {}

    async def step(self, action: Any) -> Any:
        self.steps += 1
        await anyio.sleep(float(action))
        return np.array([float(self.steps)]), float(action), False, False, {}


ENVS: dict[str, ServedEnv] = {
    "CartPole-v1": ServedEnv("CartPole-v1", max_envs=8, description="Gymnasium's CartPole"),
    "ProcessCartPole-v1": ServedEnv("CartPole-v1", backend="process", max_envs=4,
                                    vector_options={"num_workers": 2}),
    "Waiting-v0": ServedEnv(functools.partial(WaitingCartPole, 3.0), max_envs=2,
                            timeout=60.0),
    "Crashing-v0": ServedEnv(CrashingCartPole, max_envs=4),
    "Flaky-v0": ServedEnv(FlakyCounter, max_envs=6),
    # Served deadline 30 s: a client's shorter one is what ends a hung step.
    "Hung-v0": ServedEnv(hanging_env, max_envs=2, timeout=30.0),
    "SeedHanging-v0": ServedEnv(SeedHangingCartPole, max_envs=2, timeout=30.0),
    "Waiting1s-v0": ServedEnv(functools.partial(WaitingCartPole, 1.0), max_envs=2,
                              timeout=60.0),
    "HungProcess-v0": ServedEnv(hanging_env, backend="process", max_envs=2, timeout=30.0),
    # Both sub-envs in one worker: a hung one's worker is killed under its neighbour.
    "SharedWorkerHang-v0": ServedEnv(ActionHangingEnv, backend="process", max_envs=2,
                                     timeout=30.0, vector_options={"num_workers": 1}),
    # Each sub-env on a thread of its own: one hung by its action holds back no other.
    "ActionHanging-v0": ServedEnv(ActionHangingEnv, backend="thread", max_envs=2,
                                  timeout=30.0),
    "Dict-v0": ServedEnv(functools.partial(EpisodeEnv, "dict"), max_envs=4),
    "Tuple-v0": ServedEnv(functools.partial(EpisodeEnv, "tuple"), max_envs=4),
    "Box-v0": ServedEnv(functools.partial(EpisodeEnv, "box"), max_envs=4),
    "Options-v0": ServedEnv(functools.partial(EpisodeEnv, "box"), max_envs=2,
                            reset_options=True),
    # Each episode plays the task its reset options name (a task per episode).
    "Tasks-v0": ServedEnv(TaskEnv, max_envs=3, reset_options=True),
    "BadClose-v0": ServedEnv(BadCloseCartPole, max_envs=2),
    "Unservable-v0": ServedEnv(SequenceObservations, max_envs=1),
    # Observations that are Python objects (a chat) and text of any Unicode.
    "Chat-v0": ServedEnv(ChatEnv, max_envs=4),
    "ProcessChat-v0": ServedEnv(ChatEnv, backend="process", max_envs=4,
                                vector_options={"num_workers": 2}),
    "UnicodeText-v0": ServedEnv(UnicodeTextEnv, max_envs=4),
    # Coroutine sub-envs that sleep for their action; capped: one steps at a time, and recv
    # returns two by default.
    "Sleepy-v0": ServedEnv(SleepyEnv, backend="async", max_envs=8, reset_options=True),
    "CappedSleepy-v0": ServedEnv(SleepyEnv, backend="async", max_envs=8,
                                 vector_options={"max_in_flight": 1, "batch_size": 2}),
}


def _open() -> EnvServer:
    return EnvServer(ENVS, max_sessions=24, max_sessions_per_client=24)


def _tokens() -> EnvServer:
    return EnvServer(ENVS, auth={token: name for name, token in TOKENS.items()},
                     max_sessions=8, max_sessions_per_client=2)


def _strict() -> EnvServer:
    return EnvServer(ENVS, max_sessions=3, max_sessions_per_client=3, idle_timeout=1.0,
                     allowed_origins=[ALLOWED_ORIGIN],
                     limits=Limits(max_body_bytes=256 * 1024, max_json_depth=8,
                                   offload_bytes=1024))


def _brief() -> EnvServer:
    """Short patience: idle keep-alive connections (KEEP_ALIVE) and silent ``/ws``."""
    return EnvServer(ENVS, limits=Limits(opening_seconds=1.0))


def _api_key(connection: Any) -> str | None:
    """A custom scheme: ``X-Api-Key: key-NAME`` is principal NAME."""
    key = connection.headers.get("x-api-key", "")
    return key.removeprefix("key-") if key.startswith("key-") and len(key) > 4 else None


def _hook() -> EnvServer:
    return EnvServer(ENVS, auth=_api_key, max_sessions=8, max_sessions_per_client=4)


def _mounted(server: EnvServer) -> Starlette:
    """A host app that mounts the server under /rl and runs its lifespan."""

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with server.lifespan():
            yield

    return Starlette(routes=[Mount("/rl", app=server.app)], lifespan=lifespan)


def _unstarted(server: EnvServer) -> Starlette:
    """A host app that mounts the server but forgets its lifespan."""
    return Starlette(routes=[Mount("/rl", app=server.app)])


#: The servers by name, and the host app each is served in (none: the server's own app).
APPS: dict[str, tuple[Callable[[], EnvServer], Callable[[EnvServer], Starlette] | None]] = {
    "open": (_open, None), "tokens": (_tokens, None), "strict": (_strict, None),
    "hook": (_hook, None), "brief": (_brief, None),
    "mounted": (_open, _mounted), "unstarted": (_open, _unstarted)}
#: Seconds an idle keep-alive connection stays open, per server (uvicorn_config's default: 30).
#: Only a server no test reuses connections of: a client may send on a connection just as
#: the server closes it (why the default is longer than clients keep theirs).
KEEP_ALIVE = {"brief": 1.0}


def main(name: str) -> None:
    make_server, host_app = APPS[name]
    server = make_server()
    run(server, port=0, announce=True, keep_alive=KEEP_ALIVE.get(name, 30.0),
        app=None if host_app is None else host_app(server), timeout_graceful_shutdown=5)


if __name__ == "__main__":
    main(sys.argv[1])
