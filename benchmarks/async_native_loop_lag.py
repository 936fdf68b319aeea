"""Section 4 of ``async_native.py``: event-loop lag while 32 process-backed CartPole envs
step continuously. p99 lateness of a 1 ms probe coroutine on the same loop and the steps/s
meanwhile; Gymnasium's vector envs stepped through ``asyncio.to_thread`` as peers, and the idle
loop for scale."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import anyio
import gymnasium as gym
from async_native_core import (
    IDLE,
    UVLOOP_NOTE,
    Actions,
    Contender,
    LagProbe,
    Results,
    Runner,
    Sample,
    Section,
    action_batches,
    first_cell,
    gym_async,
    gym_sync,
    lag_p50,
    lag_p99,
    ms_cell,
    on_loop,
    rate,
    rate_cell,
    run_aiovec,
    run_idle_probe,
    show_ms,
    spread_cell,
    time_steps_async,
    worst_lag,
)
from bench_envs import make_cartpole
from harness import Check, Plan

LAG_ENVS = 32
LAG_P99_TARGET = 0.005  # p99 probe lateness with the process backend, at most

AIOVEC_PROCESS = "aiovec process (await envs.step)"
GYM_ASYNC_THREAD = "Gymnasium AsyncVectorEnv (shm) via asyncio.to_thread"
GYM_SYNC_THREAD = "Gymnasium SyncVectorEnv via asyncio.to_thread"


def run_gym_in_thread(make_envs: Callable[[], gym.vector.VectorEnv[Any, Any, Any]],
                      num_envs: int, loop: str) -> Runner:
    """A Gymnasium vector env stepped via ``asyncio.to_thread`` from ``loop``, probed."""

    def run(plan: Plan) -> Sample:
        async def main() -> Sample:
            envs = make_envs()
            try:
                with anyio.fail_after(plan.cell_timeout):
                    await asyncio.to_thread(envs.reset, seed=0)

                    async def step(actions: Actions) -> object:
                        return await asyncio.to_thread(envs.step, actions)

                    return await time_steps_async(step, action_batches(num_envs), num_envs,
                                                  plan, LagProbe())
            finally:
                envs.close()

        return on_loop(loop, main)

    return run


def section_4(args: argparse.Namespace, notes: list[str]) -> list[Contender]:
    loop = args.loop
    if loop == "uvloop":
        notes.append(UVLOOP_NOTE)
    return [
        Contender(4, IDLE, 0, loop, run_idle_probe(loop)),
        Contender(4, AIOVEC_PROCESS, LAG_ENVS, loop,
                  run_aiovec(make_cartpole, LAG_ENVS, "process", loop, probe=True)),
        Contender(4, GYM_ASYNC_THREAD, LAG_ENVS, loop,
                  run_gym_in_thread(gym_async(make_cartpole, LAG_ENVS), LAG_ENVS, loop)),
        Contender(4, GYM_SYNC_THREAD, LAG_ENVS, loop,
                  run_gym_in_thread(gym_sync(make_cartpole, LAG_ENVS), LAG_ENVS, loop)),
    ]


def table_4(contenders: Sequence[Contender], results: Results) -> list[str]:
    lines = ["| contender | num_envs | loop | lag p50 ms | lag p99 ms (median) | lag max ms "
             "(worst repeat) | steps/s meanwhile | spread of p99 |",
             "|---|---:|---|---:|---:|---:|---:|---:|"]
    for contender in contenders:
        key = contender.key
        p99 = first_cell(results, key, ms_cell(results.median(key, lag_p99)))
        lines.append(f"| {contender.name} | {contender.num_envs or '—'} | {contender.loop} | "
                     f"{ms_cell(results.median(key, lag_p50))} | {p99} | "
                     f"{ms_cell(worst_lag(results, key))} | "
                     f"{rate_cell(results.median(key, rate))} | "
                     f"{spread_cell(results, key, lag_p99)} |")
    return lines


def checks_4(contenders: Sequence[Contender], results: Results, loop: str) -> list[Check]:
    keys = {c.key for c in contenders}
    checks = []
    key = (4, AIOVEC_PROCESS, LAG_ENVS, loop)
    if key in keys:
        per_repeat = results.values(key, lag_p99)
        checks.append(Check(f"loop lag p99 while {LAG_ENVS} CartPole envs step, aiovec process",
                            results.median(key, lag_p99), LAG_P99_TARGET, at_most=True,
                            per_repeat=[per_repeat[r] for r in sorted(per_repeat)],
                            show=show_ms))
    return checks


LOOP_LAG_SECTION = Section(
    4, f"4. Event-loop lag while {LAG_ENVS} CartPole-v1 envs step continuously", section_4,
    table_4, checks_4)
