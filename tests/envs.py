"""Small in-process environments for tests that need to misbehave on cue."""

from __future__ import annotations

import contextlib
import functools
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import anyio.to_thread
import gymnasium as gym
import numpy as np

import aiovec
from aiovec.testing import AsyncAdapter, CountingEnv, EpisodeEnv


class RaisingEnv(CountingEnv):
    """Raises ``error`` once, in the ``phase`` call ("reset" or "step") numbered ``after``."""

    def __init__(self, phase: str, after: int = 0,
                 error: Exception | None = None) -> None:
        super().__init__()
        self.phase, self.after = phase, after
        self.error = error or ValueError(f"injected failure in {phase}")

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> Any:
        if self.phase == "reset" and self.resets == self.after:
            self.resets += 1
            raise self.error
        return super().reset(seed=seed, options=options)

    def step(self, action: int) -> Any:
        if self.phase == "step" and self.steps == self.after:
            self.steps += 1
            raise self.error
        return super().step(action)


class GatedEnv(CountingEnv):
    """``step`` announces itself on ``entered`` and then waits for ``release`` (if gated)."""

    def __init__(self, gated: bool = True) -> None:
        super().__init__()
        self.gated = gated
        self.entered = threading.Event()
        self.release = threading.Event()
        self.closed_event = threading.Event()
        self.thread_ids: set[int] = {threading.get_ident()}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        self.thread_ids.add(threading.get_ident())
        return super().reset(seed=seed, options=options)

    def step(self, action: int) -> Any:
        self.thread_ids.add(threading.get_ident())
        if self.gated:
            self.entered.set()
            if not self.release.wait(timeout=60):
                raise TimeoutError("the test never released this env")
        return super().step(action)

    def close(self) -> None:
        self.thread_ids.add(threading.get_ident())
        super().close()
        self.closed_event.set()


class GateFileEnv(EpisodeEnv):
    """An ``EpisodeEnv`` whose ``step`` waits until the file at ``path`` exists: its replies
    come only once the test lets them, wherever it runs."""

    def __init__(self, path: str) -> None:
        super().__init__("box")
        self.path = path

    def step(self, action: Any) -> Any:
        deadline = time.monotonic() + 60
        while not os.path.exists(self.path):  # polled: a gate another process opens
            if time.monotonic() > deadline:
                raise TimeoutError(f"the test never created {self.path}")
            time.sleep(0.005)
        return super().step(action)


def failing_factory() -> CountingEnv:
    raise RuntimeError("the factory exploded")


class PidEnv(CountingEnv):
    """Reports the process it runs in, so tests can find (and kill) a worker."""

    @property
    def pid(self) -> int:
        return os.getpid()


class SurroundingsEnv(PidEnv):
    """Reports what its process inherited: working directory and environment; writes to its
    standard error on request."""

    @property
    def cwd(self) -> str:
        return os.getcwd()

    @property
    def umask(self) -> str:
        with open("/proc/self/status") as status:
            return next(line.split()[1] for line in status if line.startswith("Umask:"))

    def variable(self, name: str) -> str | None:
        return os.environ.get(name)

    def global_random(self) -> float:
        """A draw from NumPy's legacy global generator (which envs should not use, and do)."""
        return float(np.random.random())

    def complain(self, text: str) -> None:
        sys.stderr.write(text)
        sys.stderr.flush()


async def worker_pids(envs: aiovec.AsyncVectorEnv) -> list[int]:
    """The process each ``PidEnv`` sub-env runs in."""
    return list(await envs.get_attr("pid"))


class OverlapProbeEnv(PidEnv):
    """Notes how many probes sharing ``directory`` are inside ``step`` at once (each holds a
    marker file there meanwhile); ``most`` is the largest number it saw."""

    def __init__(self, directory: str) -> None:
        super().__init__()
        self.directory = directory
        self.most = 0

    def step(self, action: int) -> Any:
        marker = os.path.join(self.directory, f"{os.getpid()}-{id(self)}")
        with open(marker, "w"):
            pass
        try:
            self.most = max(self.most, len(os.listdir(self.directory)))
            time.sleep(0.002)  # a step's work: long enough for steps elsewhere to overlap
        finally:
            os.remove(marker)
        return super().step(action)


class FifoStepEnv(PidEnv):
    """On step ``block_at``, announces itself through the FIFO at ``path``, then hangs."""

    def __init__(self, path: str, block_at: int = 1) -> None:
        super().__init__()
        self.path, self.block_at = path, block_at

    def step(self, action: int) -> Any:
        if self.steps + 1 == self.block_at:
            with open(self.path, "wb") as fifo:  # blocks until the test opens it to read
                fifo.write(b"x")
            threading.Event().wait(120)  # hang until killed
        return super().step(action)


class UnpicklableInfoEnv(CountingEnv):
    """Its step info holds a lock, which cannot cross a process boundary."""

    def step(self, action: int) -> Any:
        obs, reward, terminated, truncated, _ = super().step(action)
        return obs, reward, terminated, truncated, {"lock": threading.Lock()}


class StubbornError(Exception):
    """An exception that pickles but cannot be unpickled (its __init__ needs two arguments)."""

    def __init__(self, code: int, detail: str) -> None:
        super().__init__(f"{code}: {detail}")


class StubbornEnv(CountingEnv):
    def step(self, action: int) -> Any:
        raise StubbornError(7, "simulator refused")


class TextEnv(gym.Env[str, str]):
    """Text observations and actions: spaces shared memory cannot hold."""

    observation_space = gym.spaces.Text(8)
    action_space = gym.spaces.Text(8)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        self.text = "start"
        return self.text, {}

    def step(self, action: str) -> Any:
        self.text = (action + self.text)[:8]
        return self.text, float(len(action)), False, False, {}


class MisshapenEnv(CountingEnv):
    """Steps with action 1 return an observation one element short of its space's shape."""

    def step(self, action: int) -> Any:
        obs, *rest = super().step(action)
        return (obs[:1] if action == 1 else obs), *rest


@contextlib.contextmanager
def ctrl_c_once(ready: Callable[[], bool]) -> Iterator[None]:
    """Within the block, a thread presses Ctrl-C (SIGINT to this process) once ``ready()``,
    which it calls and which waits (say, for a sub-env to say it is stepping), returns True;
    the thread is joined on the way out."""
    def press() -> None:
        if ready():
            os.kill(os.getpid(), signal.SIGINT)

    presser = threading.Thread(target=press)
    presser.start()
    try:
        yield
    finally:
        presser.join()


def wait_for_fifo(path: str, timeout: float) -> bool:
    """Block until a writer has written to the FIFO at ``path`` (True) or ``timeout`` passed."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # does not wait for a writer to open
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        return bool(poller.poll(timeout * 1000)) and bool(os.read(fd, 1))
    finally:
        os.close(fd)


async def close_while_a_step_hangs(envs: aiovec.AsyncVectorEnv, fifo: str,
                                   actions: Any) -> None:
    """Step ``envs`` in a task until a ``FifoStepEnv`` announces through ``fifo`` that it
    hangs, then close them: the step must end with the closing's error (or its worker's
    death), and the close must not wait for the hung sub-env."""
    import pytest  # here, not above: worker processes import this module for its envs

    with anyio.fail_after(60):
        async with anyio.create_task_group() as group:
            async def step() -> None:
                with pytest.raises((aiovec.WorkerDiedError, aiovec.ClosedError)):
                    await envs.step(actions)

            group.start_soon(step)
            assert await anyio.to_thread.run_sync(wait_for_fifo, fifo, 30)
            await envs.aclose()
    assert envs.closed


class ActionDtypeEnv(CountingEnv):
    """Reports the dtype of the action it received, in its step info."""

    action_space = gym.spaces.Box(0.0, 1.0, (), np.float32)

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, _ = super().step(0)
        return obs, reward, terminated, truncated, {"dtype": str(np.asarray(action).dtype)}


class NodeEnv(CountingEnv):
    """Reports, through ``call("node_id")``, the Ray node whose actor hosts it."""

    def node_id(self) -> str:
        import ray

        return str(ray.get_runtime_context().get_node_id())


class SleepingEnv(CountingEnv):
    """Waits 20 ms per step without computing (an env talking to a remote simulator)."""

    def step(self, action: Any) -> Any:
        time.sleep(0.02)
        return super().step(action)


class BusyEnv(CountingEnv):
    """Computes for 2 ms of CPU time per step, holding the GIL."""

    def step(self, action: Any) -> Any:
        until = time.thread_time() + 0.002
        while time.thread_time() < until:
            pass
        return super().step(action)


class HeavyEnv(CountingEnv):
    """Computes for 20 ms of CPU time per step, holding the GIL: so heavy that worker
    processes win by far even when a loaded machine slows their round trips tenfold."""

    def step(self, action: Any) -> Any:
        until = time.thread_time() + 0.02
        while time.thread_time() < until:
            pass
        return super().step(action)


class CrashingEnv(CountingEnv):
    """Takes its process down at its third step."""

    def step(self, action: Any) -> Any:
        if self.steps == 2:
            os._exit(7)
        return super().step(action)


class TaskEnv(gym.Env[np.ndarray, int]):
    """Plays the task its reset options name (``{"task": t}``; none: task -1) for ``length``
    steps; the observation is ``[task, steps taken]``. Action 7 raises (a tool that crashes),
    8 ends the process it runs in (a worker taken down: never on the inline backend), any
    other steps."""

    observation_space = gym.spaces.Box(-1, 1e6, (2,), np.float64)
    action_space = gym.spaces.Discrete(10)

    def __init__(self, length: int = 2) -> None:
        self.length = length
        self.task, self.taken = -1, 0

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.task = -1 if options is None else int(options["task"])
        self.taken = 0
        return np.array([self.task, 0.0]), {"task": self.task}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if action == 7:
            raise RuntimeError(f"the tool crashed in task {self.task}")
        if action == 8:
            os._exit(3)
        self.taken += 1
        return (np.array([self.task, self.taken]), 1.0, self.taken >= self.length, False,
                {"task": self.task})


def task_envs(backend: str, num_envs: int, length: int = 2) -> list[Callable[[], Any]]:
    """``num_envs`` ``TaskEnv`` factories for ``backend`` (coroutine envs on the async one)."""
    make = functools.partial(TaskEnv, length)
    if backend == "async":
        return [functools.partial(AsyncAdapter, make)] * num_envs
    return [make] * num_envs
