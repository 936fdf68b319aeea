"""Sub-envs that drive external simulator processes: the simulators come and go with them.

Each sub-env starts its own simulator (this script run with ``--serve``: a small physics server
on 127.0.0.1, in its own session like a daemonized game engine) and talks to it over TCP, and
registers a cleanup for its scratch directory (``aiovec.register_cleanup``). The run injects
what goes wrong with real simulators: a worker is SIGKILLed (a crash, the OOM killer), and a
simulator hangs past the step deadline. The restart policy replaces the sub-env each time,
and the count of live simulators shows that the old one died with it: always exactly one per
sub-env, and none after ``close``.

    python examples/simulator.py --num-envs 4 --steps 300
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any

import anyio
import gymnasium as gym
import numpy as np

import aiovec
from aiovec.testing import tagged_processes

EPISODE_LENGTH = 200


# ---------------------------------------------------------------------- the simulator


def serve() -> None:
    """The external simulator: a point mass pushed left or right, one client, line protocol
    (``reset SEED`` / ``step ACTION`` / ``hang``)."""
    listener = socket.create_server(("127.0.0.1", 0))
    print(listener.getsockname()[1], flush=True)  # the port, for the env that started us
    connection, _ = listener.accept()
    listener.close()
    rng = np.random.default_rng()
    position = velocity = 0.0
    with connection, connection.makefile("rw") as stream:
        for line in stream:
            command, _, argument = line.partition(" ")
            if command == "reset":
                rng = np.random.default_rng(int(argument))
                position, velocity = rng.uniform(-0.05, 0.05, 2)
                stream.write(f"{position} {velocity} 0 0\n")
            elif command == "step":
                velocity += 0.02 * (1 if int(argument) else -1) + rng.normal(0, 0.005)
                position += velocity
                stream.write(f"{position} {velocity} 1 {int(abs(position) > 1)}\n")
            elif command == "hang":  # a wedged engine: never answers again
                time.sleep(3600)
            stream.flush()
    time.sleep(3600)  # the client went: like many engines, it idles on until killed


# ---------------------------------------------------------------------- the env


class SimulatorEnv(gym.Env[np.ndarray, np.int64]):
    """A Gymnasium env whose dynamics run in an external simulator process."""

    def __init__(self, tag: str) -> None:
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float64)
        self.action_space = gym.spaces.Discrete(2)
        self.hang_next_step = False
        self.scratch = tempfile.mkdtemp(prefix="aiovec-simulator-")
        aiovec.register_cleanup(self, functools.partial(shutil.rmtree, self.scratch))
        self.simulator = subprocess.Popen(
            [sys.executable, __file__, "--serve"], stdout=subprocess.PIPE, text=True,
            start_new_session=True, env={**os.environ, "AIOVEC_TEST_TAG": tag})
        assert self.simulator.stdout is not None
        port = int(self.simulator.stdout.readline())
        self.connection = socket.create_connection(("127.0.0.1", port))
        self.stream = self.connection.makefile("rw")
        self.steps = 0

    @property
    def worker_pid(self) -> int:
        return os.getpid()

    def _ask(self, request: str) -> tuple[np.ndarray, float, bool]:
        self.stream.write(request + "\n")
        self.stream.flush()
        position, velocity, reward, done = self.stream.readline().split()
        return np.array([float(position), float(velocity)]), float(reward), done == "1"

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.steps = 0
        obs, _, _ = self._ask(f"reset {int(self.np_random.integers(2**31))}")
        return obs, {}

    def step(self, action: np.int64) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self.hang_next_step:
            self._ask("hang")  # never returns: the deadline will kill this worker
        self.steps += 1
        obs, reward, terminated = self._ask(f"step {int(action)}")
        return obs, reward, terminated, self.steps >= EPISODE_LENGTH, {}

    def close(self) -> None:
        # A careless env: leaves its simulator running (it only disconnects, and the engine
        # keeps its window open, as many do). aiovec ends it with the sub-env.
        self.stream.close()
        self.connection.close()


# ---------------------------------------------------------------------- the run


def alive(tag: str, num_envs: int) -> list[int]:
    return [len(tagged_processes(f"{tag}-{index}")) for index in range(num_envs)]


async def main(num_envs: int, num_steps: int) -> None:
    tag = f"simulator-{os.getpid()}"
    factories = [functools.partial(SimulatorEnv, f"{tag}-{index}") for index in range(num_envs)]
    crash_at, hang_at = num_steps // 3, 2 * num_steps // 3
    rng = np.random.default_rng(0)
    async with aiovec.AsyncVectorEnv(factories, backend="process", num_workers=num_envs,
                                     restart=True, timeout=2.0) as envs:
        await envs.reset(seed=0)
        print(f"started: simulators alive per sub-env {alive(tag, num_envs)}")
        episodes = 0
        for step in range(num_steps):
            if step == crash_at:
                workers = await envs.get_attr("worker_pid")
                os.kill(workers[0], signal.SIGKILL)
                print(f"step {step}: SIGKILLed the worker of sub-env 0")
            if step == hang_at:
                await envs.set_attr("hang_next_step", [index == 1 for index in range(num_envs)])
                print(f"step {step}: the simulator of sub-env 1 hangs")
            _, _, terminations, truncations, infos = await envs.step(
                rng.integers(0, 2, num_envs))
            episodes += int((terminations | truncations).sum())
            for index in np.flatnonzero(infos.get("_restart", np.zeros(num_envs, bool))):
                print(f"step {step}: sub-env {index} restarted ({infos['restart'][index]}); "
                      f"simulators alive per sub-env {alive(tag, num_envs)}")
    statistics = envs.statistics()
    print(f"{num_steps} steps, {episodes} episodes ended, {statistics.restarts} restarts, "
          f"{statistics.timeouts} timeouts")
    print(f"processes ended with their sub-envs: {statistics.descendants_reaped}; "
          f"cleanups run: {statistics.cleanups_run}, failed: {statistics.cleanups_failed}")
    print(f"after close: simulators alive {sum(alive(tag, num_envs))}")


if __name__ == "__main__":
    if sys.argv[1:] == ["--serve"]:
        serve()
        sys.exit()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-envs", type=int, default=4)
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    anyio.run(main, args.num_envs, args.steps)
