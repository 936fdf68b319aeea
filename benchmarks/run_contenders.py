"""``run.py``'s workloads and contenders: how each vector env is built, stepped and timed.

Every runner takes (workload, num_envs, plan) and returns a ``harness.Timing``; ``run.py``
interleaves them and ``run_report.py`` writes the tables. ``pixels.py`` and
``process_floor.py`` reuse the runners for their own contenders.
"""

from __future__ import annotations

import importlib
import statistics
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import anyio
import gymnasium as gym
import numpy as np
from bench_envs import CpuEnv, PixelEnv, SleepEnv, make_cartpole, raw_loop, raw_loop_in_child
from harness import Plan, Timing, time_steps, time_steps_async, together

import aiovec

UVLOOP = {"use_uvloop": True}
ACTION_BATCHES = 64  # distinct action batches, drawn up front and cycled through

# Contender names, as printed.
RAW = "raw env loop (1 process)"
RAW_PAIR = "2 raw env loops (2 processes)"
SYNC = "gymnasium SyncVectorEnv"
GYM_ASYNC = "gymnasium AsyncVectorEnv (shm)"
INLINE = "aiovec inline (await, uvloop)"
THREAD = "aiovec thread (await, uvloop)"
PROCESS = "aiovec process (await, uvloop)"
PROCESS_PER_ENV = "aiovec process, 1 env/worker"
SHIM = "aiovec VectorEnv shim (process)"
PROCESS_VIEW = "aiovec process, copy=False (await, uvloop)"
AUTO = "aiovec auto (await, uvloop)"
#: The backends "auto" chooses among here, and what it chose, per (workload, num_envs).
AUTO_CHOICES = (INLINE, THREAD, PROCESS)
AUTO_PICKS: dict[tuple[str, int], set[str]] = {}
ENVPOOL = "EnvPool C++ CartPole"

warnings.filterwarnings("ignore", message=".*precision lowered by casting.*")  # EnvPool's spaces


@dataclass(frozen=True)
class Workload:
    name: str
    factory: Callable[[], gym.Env[Any, Any]]
    sizes: tuple[int, ...]
    description: str


@dataclass(frozen=True)
class Contender:
    name: str
    run: Callable[[Workload, int, Plan], Timing]
    #: None if it runs on this workload and size, else why not (a note; "": no note).
    skip: Callable[[Workload, int], str | None] = lambda workload, num_envs: None
    #: Reference rows run once per workload, with this many envs, instead of once per size.
    fixed_envs: int | None = None


@dataclass(frozen=True)
class Cell:
    workload: str
    num_envs: int
    contender: str


@dataclass
class Results:
    timings: dict[Cell, list[Timing]] = field(default_factory=dict)
    errors: dict[Cell, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    startup: dict[str, list[float]] = field(default_factory=dict)
    startup_errors: dict[str, str] = field(default_factory=dict)

    def median(self, workload: str, num_envs: int, contender: str) -> float | None:
        timings = self.timings.get(Cell(workload, num_envs, contender))
        if not timings:
            return None
        return statistics.median(t.steps_per_second for t in timings)



@cache
def action_batches(num_envs: int) -> list[np.ndarray]:
    """Random Discrete(2) action batches, the same for every contender of a size."""
    rng = np.random.default_rng(num_envs)
    return list(rng.integers(0, 2, size=(ACTION_BATCHES, num_envs), dtype=np.int64))



def run_sync_vector(envs: Any, num_envs: int, plan: Plan) -> Timing:
    """Time a sync vector env (Gymnasium's, the shim or EnvPool's) and always close it."""
    try:
        envs.reset(seed=0)
        return time_steps(envs.step, action_batches(num_envs), num_envs, plan)
    finally:
        envs.close()


def run_gym_sync(workload: Workload, num_envs: int, plan: Plan) -> Timing:
    return run_sync_vector(gym.vector.SyncVectorEnv([workload.factory] * num_envs),
                           num_envs, plan)


def run_gym_async(workload: Workload, num_envs: int, plan: Plan) -> Timing:
    envs = gym.vector.AsyncVectorEnv([workload.factory] * num_envs, shared_memory=True)
    return run_sync_vector(envs, num_envs, plan)


def run_shim(workload: Workload, num_envs: int, plan: Plan) -> Timing:
    envs = aiovec.VectorEnv([workload.factory] * num_envs, backend="process")
    return run_sync_vector(envs, num_envs, plan)


def run_envpool(workload: Workload, num_envs: int, plan: Plan) -> Timing:
    envpool = importlib.import_module("envpool")
    envs = envpool.make("CartPole-v1", env_type="gymnasium", num_envs=num_envs)
    try:
        envs.reset()
        actions = [batch.astype(np.int32) for batch in action_batches(num_envs)]
        return time_steps(envs.step, actions, num_envs, plan)
    finally:
        envs.close()


def run_aiovec(backend: str, **options: Any) -> Callable[[Workload, int, Plan], Timing]:
    """A runner for ``aiovec.AsyncVectorEnv(backend=...)`` on uvloop."""

    def run(workload: Workload, num_envs: int, plan: Plan) -> Timing:
        async def main() -> Timing:
            with anyio.fail_after(plan.cell_timeout):
                async with aiovec.AsyncVectorEnv([workload.factory] * num_envs,
                                                 backend=backend, **options) as envs:
                    if backend == "auto":
                        AUTO_PICKS.setdefault((workload.name, num_envs), set()).add(
                            envs.backend_name)
                    await envs.reset(seed=0)
                    return await time_steps_async(envs.step, action_batches(num_envs),
                                                  num_envs, plan)

        return anyio.run(main, backend="asyncio", backend_options=UVLOOP)

    return run


def run_process_per_env(workload: Workload, num_envs: int, plan: Plan) -> Timing:
    return run_aiovec("process", num_workers=num_envs)(workload, num_envs, plan)


def run_raw(workload: Workload, num_envs: int, plan: Plan) -> Timing:
    """One env stepped in a plain loop in this process: no vectorizer at all."""
    env = workload.factory()
    try:
        env.reset(seed=0)
        actions = [int(batch[0]) for batch in action_batches(1)]
        raw_loop(env, actions, 0.0, min_steps=plan.warmup_steps)
        steps, elapsed = raw_loop(env, actions, plan.seconds, min_steps=plan.min_steps)
        return Timing(steps_per_second=steps / elapsed, latency=elapsed / steps)
    finally:
        env.close()


def run_raw_pair(workload: Workload, num_envs: int, plan: Plan) -> Timing:
    """``num_envs`` raw loops in as many spawned processes, started together (no IPC)."""
    actions = [int(batch[0]) for batch in action_batches(1)]
    own = (workload.factory, actions, plan.warmup_steps, plan.seconds)
    return Timing(steps_per_second=together(raw_loop_in_child, [own] * num_envs, plan.seconds,
                                            plan.cell_timeout))


def envpool_problem() -> str | None:
    """None if EnvPool imports, else why not."""
    try:
        importlib.import_module("envpool")
    except Exception as error:  # ImportError, or a broken native extension
        return f"EnvPool is not importable ({type(error).__name__}: {error}); no EnvPool row"
    return None


def pufferlib_note() -> str | None:
    try:
        importlib.import_module("pufferlib")
    except Exception:
        return ("PufferLib: not installed; `pip install pufferlib` fails on these machines "
                "(its build downloads Raylib from GitHub), so it has no row")
    return "PufferLib is installed but not benchmarked here (no row)"


def make_contenders(envpool_missing: bool) -> list[Contender]:
    def only_sleep_up_to_32(workload: Workload, num_envs: int) -> str | None:
        if workload.name != "SleepEnv":
            return ""
        return None if num_envs <= 32 else "would need one process per env"

    def not_256(reason: str) -> Callable[[Workload, int], str | None]:
        return lambda workload, num_envs: reason if num_envs > 32 else None

    def not_256_sleeping(reason: str) -> Callable[[Workload, int], str | None]:
        return lambda workload, num_envs: (reason if num_envs > 32 and workload.name == "SleepEnv"
                                           else None)

    def envpool_skip(workload: Workload, num_envs: int) -> str | None:
        return None if workload.name == "CartPole-v1" and not envpool_missing else ""

    return [
        Contender(RAW, run_raw, fixed_envs=1),
        Contender(RAW_PAIR, run_raw_pair, fixed_envs=2,
                  skip=lambda w, n: None if w.name in ("CpuEnv", "CartPole-v1") else ""),
        Contender(SYNC, run_gym_sync,
                  skip=not_256_sleeping("256 sleeping envs take 1.3 s per vector step; Sync "
                                        "tops out at ~195 steps/s whatever num_envs (rows 8, 32)")),
        Contender(GYM_ASYNC, run_gym_async, skip=not_256("would need 256 processes")),
        Contender(INLINE, run_aiovec("inline"),
                  skip=not_256_sleeping("steps envs one after another, like SyncVectorEnv")),
        Contender(THREAD, run_aiovec("thread")),
        Contender(PROCESS, run_aiovec("process")),
        Contender(PROCESS_VIEW, run_aiovec("process", copy=False),
                  skip=lambda w, n: None if w.name == "PixelEnv" and n == 32 else ""),
        Contender(AUTO, run_aiovec("auto")),
        Contender(PROCESS_PER_ENV, run_process_per_env, skip=only_sleep_up_to_32),
        Contender(SHIM, run_shim, skip=not_256("shim measured at 8 and 32 envs")),
        Contender(ENVPOOL, run_envpool, skip=envpool_skip),
    ]


WORKLOADS = [
    Workload("CartPole-v1", make_cartpole, (8, 32, 256),
             "gym.make('CartPole-v1'), ~5 µs per step"),
    Workload("CpuEnv", CpuEnv, (8, 32), "1 ms of pure-Python CPU per step (thread CPU time), "
             "GIL held"),
    Workload("SleepEnv", SleepEnv, (8, 32, 256), "time.sleep(0.005) per step (I/O-bound)"),
    Workload("PixelEnv", PixelEnv, (8, 32, 256), "84x84x4 uint8 observation, trivial compute"),
]



def first_step_gym_async(num_envs: int) -> float:
    """Seconds from construction to the first step's results, Gymnasium AsyncVectorEnv."""
    actions = action_batches(num_envs)[0]
    started = time.perf_counter()
    envs = gym.vector.AsyncVectorEnv([make_cartpole] * num_envs, shared_memory=True)
    try:
        envs.reset(seed=0)
        envs.step(actions)
        return time.perf_counter() - started
    finally:
        envs.close()


def first_step_aiovec(backend: str) -> Callable[[int], float]:
    """Seconds from construction to the first step's results, aiovec on ``backend``."""

    def first_step(num_envs: int) -> float:
        actions = action_batches(num_envs)[0]

        async def main() -> float:
            with anyio.fail_after(60.0):
                started = time.perf_counter()
                async with aiovec.AsyncVectorEnv([make_cartpole] * num_envs,
                                                 backend=backend) as envs:
                    await envs.reset(seed=0)
                    await envs.step(actions)
                    return time.perf_counter() - started

        return anyio.run(main, backend="asyncio", backend_options=UVLOOP)

    return first_step


STARTUP_ENVS = 32
STARTUP = {PROCESS: first_step_aiovec("process"), AUTO: first_step_aiovec("auto"),
           GYM_ASYNC: first_step_gym_async}

