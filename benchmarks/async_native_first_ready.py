"""Section 3 of ``async_native.py``: first-ready batches. 32 envs whose steps take 1-20 ms
(log-normal, drawn from each env's ``np_random``), ``batch_size=16``: steps/s of
``send``/``recv`` against full-batch ``step`` on the same envs, thread and async backends."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from typing import Any

import anyio
import gymnasium as gym
import numpy as np
from async_native_core import (
    ACTION_SPACE,
    OBSERVATION_SPACE,
    Contender,
    Results,
    Runner,
    Sample,
    Section,
    action_batches,
    first_cell,
    latency,
    ms_cell,
    on_loop,
    rate,
    rate_cell,
    ratio_check,
    spread_cell,
    time_steps_async,
    to_sample,
)
from harness import Check, Plan, ratio_cell

import aiovec

FIRST_READY_ENVS, FIRST_READY_BATCH = 32, 16
HEAVY_TAIL_MEDIAN, HEAVY_TAIL_SIGMA = 0.003, 0.8  # log-normal step time, seconds...
HEAVY_TAIL_CLIP = (0.001, 0.020)  # ...clipped to 1-20 ms
FIRST_READY_TARGET = 1.5  # send/recv steps/s / full-batch steps/s, at least

FULL_STEP = "await envs.step (full batch)"
SEND_RECV = "send/recv (first-ready)"


# ---------------------------------------------------------------------------------- envs


def heavy_tail_seconds(rng: np.random.Generator) -> float:
    """A step time: log-normal around 3 ms, clipped to 1-20 ms (a remote service's long tail)."""
    return float(np.clip(rng.lognormal(np.log(HEAVY_TAIL_MEDIAN), HEAVY_TAIL_SIGMA),
                         *HEAVY_TAIL_CLIP))


class HeavyTailEnv(gym.Env[np.ndarray, np.int64]):
    """Sleeps (``time.sleep``, GIL released) a heavy-tailed time per step: for threads."""

    observation_space = OBSERVATION_SPACE
    action_space = ACTION_SPACE

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        return np.zeros(4, np.float32), {}

    def step(self, action: np.int64) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        time.sleep(heavy_tail_seconds(self.np_random))
        return np.zeros(4, np.float32), 1.0, False, False, {}


class AsyncHeavyTailEnv(aiovec.AsyncEnv[np.ndarray, np.int64]):
    """Awaits ``anyio.sleep`` for a heavy-tailed time per step: the coroutine twin."""

    def __init__(self) -> None:
        self.observation_space = OBSERVATION_SPACE
        self.action_space = ACTION_SPACE

    async def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
                    ) -> tuple[np.ndarray, dict[str, Any]]:
        await super().reset(seed=seed)
        return np.zeros(4, np.float32), {}

    async def step(self, action: np.int64) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        await anyio.sleep(heavy_tail_seconds(self.np_random))
        return np.zeros(4, np.float32), 1.0, False, False, {}


# ------------------------------------------------------------------ timed loop and runner


async def time_first_ready(envs: aiovec.AsyncVectorEnv, plan: Plan) -> Sample:
    """Keep every sub-env busy with ``send``/``recv`` for ``plan.seconds``: sub-env steps
    per second, and the median time per received batch."""
    actions = action_batches(envs.num_envs)
    envs.send(actions[0])
    received = 0

    async def recv_and_resend() -> int:
        nonlocal received
        batch = await envs.recv()
        received += 1
        count = len(batch.env_ids)
        envs.send(actions[received % len(actions)][:count], batch.env_ids)
        return count

    warmup_deadline = time.perf_counter() + plan.warmup_seconds
    for index in range(plan.warmup_steps):
        await recv_and_resend()
        if index >= 1 and time.perf_counter() >= warmup_deadline:
            break
    stamps = [time.perf_counter()]
    deadline = stamps[0] + plan.seconds
    steps = 0
    while True:
        steps += await recv_and_resend()
        stamps.append(time.perf_counter())
        if stamps[-1] >= deadline and len(stamps) > plan.min_steps:
            break
    async for _ in envs.batches():  # drain what is still in flight, untimed
        pass
    return to_sample(stamps, envs.num_envs, steps=steps)


def run_first_ready(env_fn: Callable[[], Any], backend: str, loop: str,
                    first_ready: bool) -> Runner:
    """Section 3: ``send``/``recv`` (``first_ready``) or full-batch ``step``, same envs."""

    def run(plan: Plan) -> Sample:
        async def main() -> Sample:
            with anyio.fail_after(plan.cell_timeout):
                async with aiovec.AsyncVectorEnv([env_fn] * FIRST_READY_ENVS, backend=backend,
                                                 batch_size=FIRST_READY_BATCH) as envs:
                    await envs.reset(seed=0)
                    if first_ready:
                        return await time_first_ready(envs, plan)
                    return await time_steps_async(envs.step, action_batches(FIRST_READY_ENVS),
                                                  FIRST_READY_ENVS, plan)

        return on_loop(loop, main)

    return run


def section_3(args: argparse.Namespace, notes: list[str]) -> list[Contender]:
    loop = args.loop
    contenders = []
    for backend, env_fn in (("thread", HeavyTailEnv), ("async", AsyncHeavyTailEnv)):
        for name, first_ready in ((FULL_STEP, False), (SEND_RECV, True)):
            contenders.append(Contender(3, f"aiovec {backend}: {name}", FIRST_READY_ENVS, loop,
                                        run_first_ready(env_fn, backend, loop, first_ready)))
    return contenders


def table_3(contenders: Sequence[Contender], results: Results) -> list[str]:
    lines = ["| contender | num_envs | loop | steps/s (median) | vs full batch | ms per batch "
             "| spread |", "|---|---:|---|---:|---:|---:|---:|"]
    for contender in contenders:
        key = contender.key
        value = results.median(key, rate)
        full_name = contender.name.split(":")[0] + f": {FULL_STEP}"
        full = results.median((3, full_name, contender.num_envs, contender.loop), rate)
        lines.append(f"| {contender.name} | {contender.num_envs} | {contender.loop} | "
                     f"{first_cell(results, key, rate_cell(value))} | "
                     f"{ratio_cell(value, full)} | {ms_cell(results.median(key, latency))} | "
                     f"{spread_cell(results, key, rate)} |")
    return lines


def checks_3(contenders: Sequence[Contender], results: Results, loop: str) -> list[Check]:
    keys = {c.key for c in contenders}
    checks = []
    for backend in ("thread", "async"):
        key = (3, f"aiovec {backend}: {SEND_RECV}", FIRST_READY_ENVS, loop)
        if key in keys:
            checks.append(ratio_check(
                results, f"first-ready, aiovec {backend}: send/recv / full-batch steps/s", key,
                (3, f"aiovec {backend}: {FULL_STEP}", FIRST_READY_ENVS, loop), rate,
                FIRST_READY_TARGET, at_most=False))
    return checks


FIRST_READY_SECTION = Section(
    3, f"3. First-ready batches: {FIRST_READY_ENVS} envs with 1-20 ms heavy-tailed steps, "
       f"batch_size={FIRST_READY_BATCH}", section_3, table_3, checks_3)
