"""Section 5 of ``async_native.py``: coroutine envs against a bare gather. 500 envs awaiting
5 ms and 10,000 awaiting 1 ms per step, on asyncio and uvloop, ``await envs.step`` on
``backend="async"`` against a bare ``asyncio.gather(*(env.step(a) for env, a in zip(envs,
actions)))`` (nothing stacked), in one process (stepped alternately) and each in a fresh
process of its own: ``async_native.py --alone aiovec|gather`` (``run_alone``)."""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import operator
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
from async_native_core import (
    HAVE_UVLOOP,
    Actions,
    AsyncSleepEnv,
    Contender,
    Paired,
    Results,
    Runner,
    Sample,
    Section,
    action_batches,
    first_cell,
    latency,
    ms_cell,
    on_loop,
    show_x,
)
from harness import Check, Plan

import aiovec

#: The script a process of the "alone" rows runs (with ``--alone``): the entry point.
ENTRY_SCRIPT = Path(__file__).resolve().with_name("async_native.py")
#: How long each coroutine env's step awaits, by number of envs.
PAIRED_SECONDS = {500: 0.005, 10_000: 0.001}
GATHER_TARGET = 1.05  # aiovec's vector step / a bare gather's, at most

AIOVEC_VS_GATHER = "aiovec async vs bare gather: one process, step by step"
AIOVEC_VS_GATHER_ALONE = "aiovec async vs bare gather: each in a process of its own"


def paired_seconds(num_envs: int) -> float:
    """Section 5's step time for ``num_envs``: as in ``PAIRED_SECONDS``, else 1 ms."""
    return PAIRED_SECONDS.get(num_envs, 0.001)


def paired_ratio(sample: Sample) -> float | None:
    return sample.paired.ratio if sample.paired else None


def paired_cpu_ratio(sample: Sample) -> float | None:
    return sample.paired.cpu_ratio if sample.paired else None


def reference_latency(sample: Sample) -> float | None:
    return sample.paired.reference_wall if sample.paired else None


# --------------------------------------------------------------------------- timed loops


async def time_paired(step: Callable[[Any], Awaitable[object]],
                      reference: Callable[[Any], Awaitable[object]], actions: Sequence[Any],
                      num_envs: int, plan: Plan) -> Sample:
    """Alternate ``step`` and ``reference`` step by step (which goes first swaps every step)
    for ``plan.seconds``, after ``plan.warmup_steps`` pairs: wall and process CPU time of
    each vector step. The sample's rate and latency are ``step``'s."""
    contenders = (step, reference)
    wall: tuple[list[float], list[float]] = ([], [])
    cpu: tuple[list[float], list[float]] = ([], [])
    warmup = min(plan.warmup_steps, 3)
    deadline = None
    index = 0
    while deadline is None or time.perf_counter() < deadline or index - warmup < plan.min_steps:
        if index == warmup:
            deadline = time.perf_counter() + plan.seconds
        for which in ((0, 1) if index % 2 == 0 else (1, 0)):
            started, started_cpu = time.perf_counter(), time.process_time()
            await contenders[which](actions[index % len(actions)])
            if index >= warmup:
                wall[which].append(time.perf_counter() - started)
                cpu[which].append(time.process_time() - started_cpu)
        index += 1
    medians = [statistics.median(values) for values in (*wall, *cpu)]
    paired = Paired(medians[0], medians[1], medians[2], medians[3], len(wall[0]))
    return Sample(steps_per_second=num_envs / medians[0], latency=medians[0], paired=paired)


async def time_each_step(step: Callable[[Any], Awaitable[object]], actions: Sequence[Any],
                         plan: Plan) -> tuple[float, float, int]:
    """``step`` alone, after 3 warm-up steps, for ``plan.seconds`` (at least
    ``plan.min_steps``): the median wall and process CPU time per step, and the step count."""
    wall: list[float] = []
    cpu: list[float] = []
    for index in range(3):
        await step(actions[index % len(actions)])
    deadline = time.perf_counter() + plan.seconds
    while time.perf_counter() < deadline or len(wall) < plan.min_steps:
        started, started_cpu = time.perf_counter(), time.process_time()
        await step(actions[len(wall) % len(actions)])
        wall.append(time.perf_counter() - started)
        cpu.append(time.process_time() - started_cpu)
    return statistics.median(wall), statistics.median(cpu), len(wall)


# ----------------------------------------------------------------------------- runners


def run_paired_with_gather(num_envs: int, seconds_per_step: float, loop: str) -> Runner:
    """Section 5: ``await envs.step`` on the async backend against a bare ``asyncio.gather``
    of the same envs' steps, alternating, on one loop."""

    def run(plan: Plan) -> Sample:
        async def main() -> Sample:
            with anyio.fail_after(plan.cell_timeout):
                sub_envs = [AsyncSleepEnv(seconds_per_step) for _ in range(num_envs)]
                factories = [functools.partial(operator.getitem, sub_envs, index)
                             for index in range(num_envs)]

                async def bare_gather(actions: Actions) -> object:
                    return await asyncio.gather(*(env.step(action)
                                                  for env, action in zip(sub_envs, actions)))

                async with aiovec.AsyncVectorEnv(factories, backend="async") as envs:
                    await envs.reset(seed=0)
                    return await time_paired(envs.step, bare_gather,
                                             action_batches(num_envs), num_envs, plan)

        return on_loop(loop, main)

    return run


ALONE = ("aiovec", "gather")  # what a process of section 5's "alone" rows runs


def run_alone(which: str, num_envs: int, loop: str, plan: Plan) -> tuple[float, float, int]:
    """In this process: ``which`` of ``ALONE`` over ``num_envs`` coroutine envs, timed by
    ``time_each_step``."""
    seconds_per_step = paired_seconds(num_envs)

    async def main() -> tuple[float, float, int]:
        sub_envs = [AsyncSleepEnv(seconds_per_step) for _ in range(num_envs)]
        actions = action_batches(num_envs)
        if which == "gather":
            for index, env in enumerate(sub_envs):
                await env.reset(seed=index)
            return await time_each_step(
                lambda batch: asyncio.gather(*(env.step(action)
                                               for env, action in zip(sub_envs, batch))),
                actions, plan)
        async with aiovec.AsyncVectorEnv([lambda env=env: env for env in sub_envs],
                                         backend="async") as envs:
            await envs.reset(seed=0)
            return await time_each_step(envs.step, actions, plan)

    return on_loop(loop, main)


def run_alone_against_gather(num_envs: int, loop: str) -> Runner:
    """Section 5: aiovec and the bare gather each in a fresh process of its own (the order
    swapped every repeat), so neither pays for the other's objects."""
    order = list(ALONE)

    def run(plan: Plan) -> Sample:
        measured = {}
        for which in order:
            command = [sys.executable, str(ENTRY_SCRIPT), "--alone", which,
                       "--paired-envs", str(num_envs), "--loop", loop,
                       "--seconds", str(plan.seconds), "--alone-min-steps", str(plan.min_steps)]
            done = subprocess.run(command, capture_output=True, text=True, check=False,
                                  timeout=plan.cell_timeout)
            if done.returncode:
                raise RuntimeError(f"{which} alone failed: {done.stderr.strip()[-300:]}")
            measured[which] = json.loads(done.stdout.strip().splitlines()[-1])
        order.reverse()
        ours, theirs = measured["aiovec"], measured["gather"]
        paired = Paired(ours["wall"], theirs["wall"], ours["cpu"], theirs["cpu"],
                        min(ours["steps"], theirs["steps"]))
        return Sample(steps_per_second=num_envs / ours["wall"], latency=ours["wall"],
                      paired=paired)

    return run


# ------------------------------------------------------------------- contenders, report


def section_5(args: argparse.Namespace, notes: list[str]) -> list[Contender]:
    loops = ["asyncio", "uvloop"] if HAVE_UVLOOP else ["asyncio"]
    if not HAVE_UVLOOP:
        notes.append("Section 5: uvloop is not installed; asyncio rows only")
    notes.append("Section 5, one process: the bare gather steps in the process that holds the "
                 "vector env, so it also pays for the garbage collector's passes over aiovec's "
                 "objects, and for collections aiovec's steps made due (at 10,000 envs the "
                 "collector takes about half of every step): that row flatters aiovec at "
                 "scale. The rows with each in a process of its own do not share a heap, but "
                 "time whole runs, not interleaved steps: their spread is wider")
    return [contender for num_envs in args.paired_envs for loop in loops
            for contender in (
                Contender(5, AIOVEC_VS_GATHER, num_envs, loop,
                          run_paired_with_gather(num_envs, paired_seconds(num_envs), loop)),
                Contender(5, AIOVEC_VS_GATHER_ALONE, num_envs, loop,
                          run_alone_against_gather(num_envs, loop)))]


def x_cell(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}x"


def table_5(contenders: Sequence[Contender], results: Results) -> list[str]:
    lines = ["| contender | num_envs | each env's step | loop | aiovec ms per vector step "
             "| bare gather ms | time vs bare gather | per repeat | CPU time vs bare "
             "gather | steps per repeat |", "|---|---:|---:|---|---:|---:|---:|---|---:|---:|"]
    for contender in contenders:
        key = contender.key
        ratios = results.values(key, paired_ratio)
        pairs = [sample.paired.pairs for sample in results.samples.get(key, [])
                 if sample.paired]
        ratio = results.median(key, paired_ratio)
        lines.append(
            f"| {contender.name} | {contender.num_envs} | "
            f"{paired_seconds(contender.num_envs) * 1e3:g} ms | {contender.loop} | "
            f"{first_cell(results, key, ms_cell(results.median(key, latency)))} | "
            f"{ms_cell(results.median(key, reference_latency))} | "
            f"{'—' if ratio is None else f'{ratio:.2f}x'} | "
            f"{' '.join(f'{ratios[r]:.2f}' for r in sorted(ratios)) or '—'} | "
            f"{x_cell(results.median(key, paired_cpu_ratio))} | "
            f"{statistics.median(pairs) if pairs else '—'} |")
    return lines


def checks_5(contenders: Sequence[Contender], results: Results, loop: str) -> list[Check]:
    checks = []
    for contender in contenders:
        if contender.section == 5:
            per_repeat = results.values(contender.key, paired_ratio)
            where = "one process" if contender.name == AIOVEC_VS_GATHER else "own processes"
            checks.append(Check(
                f"{contender.num_envs} coroutine envs on {contender.loop} ({where}), aiovec "
                "async: vector step / bare gather", results.median(contender.key, paired_ratio),
                GATHER_TARGET, at_most=True,
                per_repeat=[per_repeat[r] for r in sorted(per_repeat)], show=show_x))
    return checks


VS_GATHER_SECTION = Section(
    5, "5. Coroutine envs: aiovec's async backend against a bare asyncio.gather, step by step",
    section_5, table_5, checks_5)
