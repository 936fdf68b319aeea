"""Pixels (issue 19, "one copy each way"): PixelEnv frames through the process backend with
``copy=True``, ``copy=False`` and ``out=``, against Gymnasium's ``SyncVectorEnv``, beside the
floor: what the two workers' own work costs with no IPC at all.

Each repeat measures every contender once, in a shuffled order, on uvloop (``await
envs.step()``), 32 PixelEnv sub-envs (84x84x4 uint8, a trivial step) by default. The rows:

- ``gymnasium SyncVectorEnv`` (its default ``copy=True``): the reference of every ratio;
- aiovec's process backend (two workers) with ``copy=True``, ``copy=False``, and ``out=`` a
  buffer preallocated once (the row is left out when the ``aiovec`` imported has no ``out=``,
  e.g. an old checkout under ``benchmarks/compare.py --same-script``);
- the inline backend with ``copy=False`` and ``out=``, for scale;
- ``floor: 2 workers' own work``: two processes, each stepping its half of the sub-envs and
  writing every frame into a shared block, for the same time, with no frames, no waiting and
  no event loop; its steps/s is what the process backend would reach if IPC cost nothing.

Run: ``.venv/bin/python benchmarks/pixels.py [--repeats 5] [--seconds 0.5] [--envs 32]``;
``--quick`` runs one short repeat (a few seconds).
"""

from __future__ import annotations

import inspect
import mmap
import multiprocessing as mp
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import anyio
import gymnasium as gym
import numpy as np
from bench_envs import PIXEL_SHAPE, PixelEnv  # benchmarks/ is sys.path[0]
from harness import (
    Plan,
    Timing,
    arguments,
    header,
    interleaved,
    spread_cell,
    time_steps,
    time_steps_async,
)
from run_contenders import UVLOOP, action_batches

import aiovec

SYNC = "gymnasium SyncVectorEnv"
FLOOR = "floor: 2 workers' own work (no IPC)"
WORKERS = 2
HAS_OUT = "out" in inspect.signature(aiovec.AsyncVectorEnv.step).parameters


def run_gym_sync(num_envs: int, plan: Plan) -> Timing:
    envs = gym.vector.SyncVectorEnv([PixelEnv] * num_envs)
    try:
        envs.reset(seed=0)
        return time_steps(envs.step, action_batches(num_envs), num_envs, plan)
    finally:
        envs.close()


def run_aiovec(backend: str, copy: bool = True, into: bool = False,
               **options: Any) -> Callable[[int, Plan], Timing]:
    """``await envs.step()`` on ``backend`` (into a buffer allocated once, with ``into``)."""

    def run(num_envs: int, plan: Plan) -> Timing:
        async def main() -> Timing:
            with anyio.fail_after(90.0):
                async with aiovec.AsyncVectorEnv([PixelEnv] * num_envs, backend=backend,
                                                 copy=copy, **options) as envs:
                    await envs.reset(seed=0)
                    step: Callable[[Any], Any] = envs.step
                    if into:
                        out = np.zeros((num_envs, *PIXEL_SHAPE), np.uint8)

                        async def step(actions: Any) -> Any:
                            return await envs.step(actions, out=out)

                    return await time_steps_async(step, action_batches(num_envs), num_envs,
                                                  plan)

        return anyio.run(main, backend="asyncio", backend_options=UVLOOP)

    return run


def _floor_worker(fd: int, first: int, count: int, num_envs: int, seconds: float,
                  start: Any, results: Any) -> None:
    """One worker's share, stepped and written into the shared block until ``seconds``."""
    block = mmap.mmap(fd, num_envs * int(np.prod(PIXEL_SHAPE)))
    frames = np.frombuffer(block, np.uint8).reshape(num_envs, *PIXEL_SHAPE)
    rewards = np.zeros(num_envs)
    envs = [PixelEnv() for _ in range(count)]
    for env in envs:
        env.reset(seed=0)
    start.wait()
    rounds = 0
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        for offset, env in enumerate(envs):
            obs, reward, _, _, _ = env.step(0)
            frames[first + offset] = obs
            rewards[first + offset] = reward
        rounds += 1
    results.put(rounds * count / (time.perf_counter() - started))
    del frames
    block.close()


def run_floor(num_envs: int, plan: Plan) -> Timing:
    """The workers' own work, concurrently, in ``WORKERS`` processes: their steps/s summed."""
    context = mp.get_context("fork")  # before any thread or loop of this script runs
    fd = os.memfd_create("pixels-floor")
    os.ftruncate(fd, num_envs * int(np.prod(PIXEL_SHAPE)))
    start, results = context.Barrier(WORKERS + 1), context.Queue()
    share = num_envs // WORKERS
    processes = [context.Process(target=_floor_worker, daemon=True,
                                 args=(fd, index * share, share, num_envs, plan.seconds,
                                       start, results))
                 for index in range(WORKERS)]
    try:
        for process in processes:
            process.start()
        start.wait()
        rate = sum(results.get(timeout=60.0) for _ in processes)
    finally:
        for process in processes:
            process.join(10.0)
        os.close(fd)
    return Timing(steps_per_second=rate)


def contenders() -> dict[str, Callable[[int, Plan], Timing]]:
    found: dict[str, Callable[[int, Plan], Timing]] = {
        SYNC: run_gym_sync,
        FLOOR: run_floor,
        "aiovec process, copy=True": run_aiovec("process", num_workers=WORKERS),
        "aiovec process, copy=False": run_aiovec("process", copy=False, num_workers=WORKERS),
        "aiovec inline, copy=False": run_aiovec("inline", copy=False),
    }
    if HAS_OUT:
        found["aiovec process, out="] = run_aiovec("process", into=True, num_workers=WORKERS)
        found["aiovec inline, out="] = run_aiovec("inline", into=True)
    return found


def main() -> None:
    parser = arguments(__doc__, repeats=5, seconds=0.5, quick="one repeat of 0.2 s each")
    parser.add_argument("--envs", type=int, default=32)
    args = parser.parse_args()
    if args.quick:
        args.repeats, args.seconds = 1, 0.2
    plan = Plan(seconds=args.seconds, warmup_steps=50, warmup_seconds=0.1)
    runs = contenders()
    timings: dict[str, list[Timing]] = {name: [] for name in runs}
    ratios: dict[str, list[float]] = {name: [] for name in runs}
    for repeat in range(args.repeats):
        order = interleaved(runs, repeat)
        measured = {name: runs[name](args.envs, plan) for name in order}
        for name, timing in measured.items():
            timings[name].append(timing)
            ratios[name].append(timing.steps_per_second / measured[SYNC].steps_per_second)
    print("\n".join(header("Pixels: one copy each way",
                           f"{args.repeats} interleaved repeats of {args.seconds:g} s")))
    # The heading right above the table names its section for compare.py.
    print(f"## PixelEnv, {args.envs} envs: one copy each way\n")
    print("| contender | num_envs | steps/s (median) | spread | µs per vector step (median) "
          "| vs SyncVectorEnv | per repeat |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for name in runs:
        rates = [timing.steps_per_second for timing in timings[name]]
        latencies = [timing.latency for timing in timings[name] if timing.latency is not None]
        median = statistics.median(rates)
        latency = f"{statistics.median(latencies) * 1e6:.1f}" if latencies else "—"
        print(f"| {name} | {args.envs} | {median:,.0f} | {spread_cell(rates)} | {latency} "
              f"| {statistics.median(ratios[name]):.2f}x "
              f"| {' '.join(f'{ratio:.2f}' for ratio in ratios[name])} |")


if __name__ == "__main__":
    main()
