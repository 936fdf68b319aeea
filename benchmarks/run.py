"""aiovec's performance benchmark: throughput against Gymnasium and EnvPool, on four workloads.

Run it (a few minutes; ``--quick`` for a ~1 minute smoke run)::

    make bench                                   # installs .[dev,bench], then runs this
    .venv/bin/python benchmarks/run.py [--quick] [--repeats N] [--seconds S]

Workloads (``bench_envs.py``): CartPole-v1; ``CpuEnv`` (1 ms of pure-Python CPU per step, GIL
held); ``SleepEnv`` (sleeps 5 ms per step); ``PixelEnv`` (84x84x4 uint8 frames, no compute).
Contenders: Gymnasium ``SyncVectorEnv`` and ``AsyncVectorEnv(shared_memory=True)``; aiovec's
inline, thread and process backends through ``await envs.step()`` on uvloop; the sync shim
``aiovec.VectorEnv(backend="process")``; EnvPool's own C++ CartPole when ``import envpool``
works. Reference rows: one raw env loop in this process, and for ``CpuEnv`` two raw loops in two
processes at once (the machine's ceiling for that workload).

Method: every measurement builds its contender, resets it, warms it up, steps it with actions
drawn up front for ``--seconds`` of wall time, then closes it. Repeats are interleaved (every
contender once per repeat, in a shuffled order within each workload and size) so that drift of
this shared machine hits all alike; the tables give medians over repeats and ratios of those
medians. A contender that raises becomes an error row; the run goes on.

Output: markdown tables printed and written to ``benchmarks/results/latest.md``, a log-scale
bar plot in ``benchmarks/results/latest.png``, and PASS/MISS lines for the project's targets
(reported, never asserted).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import importlib
import multiprocessing as mp
import os
import platform
import random
import resource
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import cache
from pathlib import Path
from typing import Any

import anyio
import gymnasium as gym
import numpy as np
from bench_envs import CpuEnv, PixelEnv, SleepEnv, make_cartpole, raw_loop, raw_loop_in_child
from companions import COMPANIONS, CompanionRun, report_lines, run_companions
from harness import Check, describe, stamped, stamped_async, watchdog

import aiovec

RESULTS_DIR = Path(__file__).resolve().parent / "results"
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


# ---------------------------------------------------------------------------------- data


@dataclass(frozen=True)
class Plan:
    """How long each measurement runs."""

    seconds: float  # timed stepping per measurement (wall time)
    warmup_steps: int = 30  # warm up with at most this many vector steps...
    warmup_seconds: float = 0.3  # ...or for this long, whichever ends first (at least 2 steps)
    min_steps: int = 3  # timed vector steps, at least
    cell_timeout: float = 90.0  # a measurement taking longer than this is an error


@dataclass(frozen=True)
class Timing:
    """One measurement of one contender."""

    steps_per_second: float  # sub-env steps per wall second
    repeat: int = 0  # which repeat measured it (set by ``measure``)
    latency: float | None = None  # median seconds per vector step
    cpu_percent: float | None = None  # this process's user+sys CPU over wall time, % of a core


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


# ------------------------------------------------------------------------- timed loops


@cache
def action_batches(num_envs: int) -> list[np.ndarray]:
    """Random Discrete(2) action batches, the same for every contender of a size."""
    rng = np.random.default_rng(num_envs)
    return list(rng.integers(0, 2, size=(ACTION_BATCHES, num_envs), dtype=np.int64))


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _timing(stamps: list[float], num_envs: int, cpu_seconds: float) -> Timing:
    elapsed = stamps[-1] - stamps[0]
    return Timing(steps_per_second=num_envs * (len(stamps) - 1) / elapsed,
                  latency=float(np.median(np.diff(stamps))),
                  cpu_percent=100.0 * cpu_seconds / elapsed)


def time_steps(step: Callable[[Any], object], actions: Sequence[Any], num_envs: int,
               plan: Plan) -> Timing:
    """Warm up, then call ``step`` for ``plan.seconds``, stamping every vector step."""
    cpu = _CpuMeter()
    return _timing(stamped(step, actions, plan, cpu), num_envs, cpu.seconds)


async def time_steps_async(step: Callable[[Any], Awaitable[object]], actions: Sequence[Any],
                           num_envs: int, plan: Plan) -> Timing:
    """``time_steps`` for ``await step(actions)``."""
    cpu = _CpuMeter()
    return _timing(await stamped_async(step, actions, plan, cpu), num_envs, cpu.seconds)


class _CpuMeter:
    """The process's CPU time over the timed window (``stamped``'s ``timing`` hook)."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def __call__(self, starting: bool) -> None:
        self.seconds = _cpu_seconds() - self.seconds if not starting else _cpu_seconds()


# ---------------------------------------------------------------------------- contenders


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
    context = mp.get_context("spawn")
    start = context.Barrier(num_envs + 1)
    results = context.Queue()
    actions = [int(batch[0]) for batch in action_batches(1)]
    processes = [
        context.Process(target=raw_loop_in_child, daemon=True,
                        args=(workload.factory, actions, plan.warmup_steps, plan.seconds,
                              start, results))
        for _ in range(num_envs)
    ]
    try:
        for process in processes:
            process.start()
        start.wait(timeout=plan.cell_timeout)
        outcomes = [results.get(timeout=plan.seconds + plan.cell_timeout) for _ in processes]
    finally:
        for process in processes:
            process.join(timeout=5.0)
            if process.is_alive():
                process.terminate()
                process.join()
    return Timing(steps_per_second=sum(steps / elapsed for steps, elapsed in outcomes))


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


# --------------------------------------------------------------------------- orchestration


def plan_cells(workloads: Sequence[Workload], contenders: Sequence[Contender],
               notes: list[str]) -> list[tuple[Workload, int, Contender]]:
    """Every (workload, num_envs, contender) to measure, in report order; skips become notes."""
    cells: list[tuple[Workload, int, Contender]] = []
    for workload in workloads:
        for contender in contenders:
            if contender.fixed_envs is not None:
                reason = contender.skip(workload, contender.fixed_envs)
                if reason is None:
                    cells.append((workload, contender.fixed_envs, contender))
        for num_envs in workload.sizes:
            for contender in contenders:
                if contender.fixed_envs is not None:
                    continue
                reason = contender.skip(workload, num_envs)
                if reason is None:
                    cells.append((workload, num_envs, contender))
                elif reason:
                    notes.append(f"{workload.name} n={num_envs}: {contender.name} skipped "
                                 f"({reason})")
    return cells


def interleaved(cells: list[tuple[Workload, int, Contender]],
                repeat: int) -> list[tuple[Workload, int, Contender]]:
    """The cells grouped by (workload, num_envs), contenders shuffled within each group."""
    rng = random.Random(repeat)
    order: list[tuple[Workload, int, Contender]] = []
    group: list[tuple[Workload, int, Contender]] = []
    for cell in [*cells, None]:
        if group and (cell is None or cell[:2] != group[0][:2]):
            rng.shuffle(group)
            order.extend(group)
            group = []
        if cell is not None:
            group.append(cell)
    return order


def measure(workload: Workload, num_envs: int, contender: Contender, plan: Plan,
            results: Results, repeat: int) -> str:
    """Run one cell, record its timing or its error; the progress text."""
    cell = Cell(workload.name, num_envs, contender.name)
    gc.collect()
    started = time.perf_counter()
    try:
        with watchdog(plan.cell_timeout + 15.0):
            timing = contender.run(workload, num_envs, plan)
    except Exception as error:  # reported as an error row, and the run goes on
        message = describe(error)
        if isinstance(error, TimeoutError):
            message += f" (no result within {plan.cell_timeout:g} s)"
        results.errors[cell] = message
        return f"ERROR {message}"
    results.timings.setdefault(cell, []).append(dataclasses.replace(timing, repeat=repeat))
    return f"{timing.steps_per_second:>12,.0f} steps/s  ({time.perf_counter() - started:.1f} s)"


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


def measure_startup(name: str, results: Results) -> str:
    gc.collect()
    try:
        with watchdog(90.0):
            seconds = STARTUP[name](STARTUP_ENVS)
    except Exception as error:
        results.startup_errors[name] = describe(error)
        return f"ERROR {results.startup_errors[name]}"
    results.startup.setdefault(name, []).append(seconds)
    return f"{seconds:.3f} s"


def run_all(workloads: Sequence[Workload], repeats: int, plan: Plan) -> Results:
    results = Results()
    envpool_missing = envpool_problem()
    if envpool_missing:
        results.notes.append(envpool_missing)
    contenders = make_contenders(envpool_missing is not None)
    cells = plan_cells(workloads, contenders, results.notes)
    for repeat in range(repeats):
        print(f"\n== repeat {repeat + 1}/{repeats} ({len(cells)} measurements)", flush=True)
        for workload, num_envs, contender in interleaved(cells, repeat):
            cell = Cell(workload.name, num_envs, contender.name)
            if cell in results.errors:
                continue  # it failed in an earlier repeat: reported once, not retried
            label = f"{workload.name:<12} n={num_envs:<4} {contender.name:<32}"
            print(f"  {label}", end="", flush=True)
            print(measure(workload, num_envs, contender, plan, results, repeat), flush=True)
        for name in STARTUP:
            print(f"  start-up, {STARTUP_ENVS} CartPole envs, {name:<32}", end="", flush=True)
            print(measure_startup(name, results), flush=True)
    return results


# ------------------------------------------------------------------------------ report


def machine_info(plan: Plan, repeats: int, load: tuple[float, float, float]) -> list[str]:
    model = "unknown CPU"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    versions = [f"Python {platform.python_version()}"]
    for module in ("numpy", "gymnasium", "aiovec", "anyio", "uvloop", "envpool"):
        with contextlib.suppress(Exception):
            versions.append(f"{module} {importlib.import_module(module).__version__}")
    revision = "unknown"
    with contextlib.suppress(Exception):
        root = Path(__file__).resolve().parent.parent
        revision = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=root,
                                  capture_output=True, text=True, check=True).stdout.strip()
    now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return [
        "# aiovec benchmark",
        "",
        f"- date: {now}; aiovec revision {revision}",
        f"- machine: {model}, {os.cpu_count()} cores ({usable} usable), "
        f"load average at start {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f}",
        f"- software: {', '.join(versions)}",
        f"- method: median of {repeats} interleaved repeats, {plan.seconds:g} s of stepping "
        f"each after up to {plan.warmup_steps} warm-up steps; steps/s = sub-env steps per "
        "wall second; ratios are ratios of medians; spread = (max - min) / median over repeats",
    ]


def _ratio(value: float | None, base: float | None) -> str:
    return "—" if value is None or not base else f"{value / base:.2f}x"


def _spread(timings: list[Timing]) -> str:
    rates = [t.steps_per_second for t in timings]
    if len(rates) < 2:
        return "—"
    return f"{100 * (max(rates) - min(rates)) / statistics.median(rates):.0f}%"


def workload_table(workload: Workload, cells: Sequence[Cell], results: Results) -> list[str]:
    with_envpool = workload.name == "CartPole-v1" and any(c.contender == ENVPOOL for c in cells)
    header = "| contender | num_envs | steps/s (median) | spread | vs SyncVectorEnv " \
             "| vs Gymnasium Async |" + (" vs EnvPool |" if with_envpool else "")
    lines = [f"## {workload.name}: {workload.description}", "", header,
             "|---|---:|---:|---:|---:|---:|" + ("---:|" if with_envpool else "")]
    for cell in cells:
        timings = results.timings.get(cell, [])
        median = results.median(cell.workload, cell.num_envs, cell.contender)
        reference = cell.contender in (RAW, RAW_PAIR)
        envs = f"{cell.num_envs} x 1 env" if cell.contender == RAW_PAIR else str(cell.num_envs)
        if median is None:
            rate = f"error: {results.errors.get(cell, 'no result')}"
        else:
            rate = f"{median:,.0f}"
            if cell in results.errors:
                rate += f" (then error: {results.errors[cell]})"
        row = [cell.contender, envs, rate, _spread(timings)]
        bases = [SYNC, GYM_ASYNC] + ([ENVPOOL] if with_envpool else [])
        for base in bases:
            base_rate = None if reference else results.median(cell.workload, cell.num_envs, base)
            row.append(_ratio(median, base_rate))
        lines.append("| " + " | ".join(row) + " |")
    return lines


def extra_metrics(results: Results) -> list[str]:
    lines = ["## Start-up: construction + reset + first step, "
             f"{STARTUP_ENVS} CartPole-v1 envs", "",
             "| contender | median s | first run s (cold) | all runs s |", "|---|---:|---:|---|"]
    for name in STARTUP:
        runs = results.startup.get(name, [])
        if runs:
            lines.append(f"| {name} | {statistics.median(runs):.3f} | {runs[0]:.3f} | "
                         f"{', '.join(f'{r:.2f}' for r in runs)} |")
        else:
            lines.append(f"| {name} | error: {results.startup_errors.get(name, '?')} | | |")
    lines += ["", "## Parent-process CPU while stepping 32 SleepEnvs "
              "(user+sys of this process / wall time, % of one core)", "",
              "| contender | parent CPU | steps/s |", "|---|---:|---:|"]
    for name in (PROCESS, PROCESS_PER_ENV, THREAD, GYM_ASYNC):
        timings = results.timings.get(Cell("SleepEnv", 32, name))
        if timings:
            cpu = statistics.median(t.cpu_percent or 0.0 for t in timings)
            rate = statistics.median(t.steps_per_second for t in timings)
            lines.append(f"| {name} | {cpu:.1f}% | {rate:,.0f} |")
    lines += ["", "## Vector-step latency, 8 SleepEnvs (median ms per vector step; "
              "ideal ≈ 5 ms + the sleep's overshoot)", "", "| contender | latency ms |",
              "|---|---:|"]
    for name in (THREAD, PROCESS, PROCESS_PER_ENV, GYM_ASYNC, SYNC):
        timings = results.timings.get(Cell("SleepEnv", 8, name))
        if timings:
            latency = statistics.median(t.latency or 0.0 for t in timings)
            lines.append(f"| {name} | {latency * 1e3:.2f} |")
    return lines


def target_checks(results: Results) -> list[str]:
    def versus(label: str, workload: str, num_envs: int, base: str, target: float,
               base_envs: int | None = None, unit: str = "x", ours: str = PROCESS) -> Check:
        """``ours`` against ``base``: the ratio of medians, and the per-repeat ratios."""
        value = results.median(workload, num_envs, ours)
        reference = results.median(workload, base_envs or num_envs, base)
        mine = {t.repeat: t.steps_per_second
                for t in results.timings.get(Cell(workload, num_envs, ours), [])}
        theirs = results.timings.get(Cell(workload, base_envs or num_envs, base), [])
        paired = [mine[t.repeat] / t.steps_per_second for t in theirs if t.repeat in mine]
        ratio = None if value is None or not reference else value / reference
        return Check(label, ratio, target, unit=unit, per_repeat=paired)

    startup = results.startup.get(PROCESS)
    auto_startup = results.startup.get(AUTO)
    checks = [
        versus("CartPole-v1 n=32, aiovec process vs SyncVectorEnv", "CartPole-v1", 32, SYNC,
               1.5),
        versus("CartPole-v1 n=32, aiovec process vs 2 raw loops in 2 processes",
               "CartPole-v1", 32, RAW_PAIR, 0.8, base_envs=2, unit="%"),
        versus("CartPole-v1 n=8, aiovec process vs SyncVectorEnv", "CartPole-v1", 8, SYNC,
               1.0),
        versus("CartPole-v1 n=32, aiovec process vs Gymnasium AsyncVectorEnv", "CartPole-v1",
               32, GYM_ASYNC, 15.0),
        *(versus(f"CartPole-v1 n={n}, sync shim vs await (both process)", "CartPole-v1", n,
                 PROCESS, 0.95, ours=SHIM) for n in (8, 32)),
        versus("CpuEnv n=8, aiovec process vs 2 raw loops in 2 processes", "CpuEnv", 8,
               RAW_PAIR, 0.9, base_envs=2, unit="%"),
        versus("PixelEnv n=32, aiovec process vs Gymnasium AsyncVectorEnv", "PixelEnv", 32,
               GYM_ASYNC, 10.0),
        versus("PixelEnv n=32, aiovec process vs SyncVectorEnv", "PixelEnv", 32, SYNC, 1.0),
        versus("PixelEnv n=32, aiovec process copy=False vs SyncVectorEnv", "PixelEnv", 32,
               SYNC, 1.2, ours=PROCESS_VIEW),
        Check(f"start-up ({STARTUP_ENVS} CartPole envs to first step), aiovec process",
              statistics.median(startup) if startup else None, 1.0, unit=" s", at_most=True,
              per_repeat=startup or ()),
        Check(f"start-up ({STARTUP_ENVS} CartPole envs to first step), aiovec auto (measures "
              "first)", statistics.median(auto_startup) if auto_startup else None, 1.0,
              unit=" s", at_most=True, per_repeat=auto_startup or ()),
    ]
    return [check.line() for check in checks + auto_checks(results)]


def auto_checks(results: Results) -> list[Check]:
    """``backend="auto"`` against the fastest of the backends it picks from, per cell."""
    checks = []
    for workload, num_envs in sorted({(c.workload, c.num_envs) for c in results.timings
                                      if c.contender == AUTO}):
        medians = {name: results.median(workload, num_envs, name) for name in AUTO_CHOICES}
        known = {name: value for name, value in medians.items() if value}
        auto = results.median(workload, num_envs, AUTO)
        if not known or auto is None:
            continue
        best = max(known, key=known.__getitem__)
        per_repeat = []
        for timing in results.timings.get(Cell(workload, num_envs, AUTO), []):
            rates = [t.steps_per_second for name in AUTO_CHOICES
                     for t in results.timings.get(Cell(workload, num_envs, name), [])
                     if t.repeat == timing.repeat]
            if rates:
                per_repeat.append(timing.steps_per_second / max(rates))
        picked = ", ".join(sorted(AUTO_PICKS.get((workload, num_envs), ()))) or "?"
        checks.append(Check(f"{workload} n={num_envs}, aiovec auto (picked {picked}) vs the "
                            f"best backend ({best.split()[1]})", auto / known[best], 0.9,
                            per_repeat=per_repeat))
    return checks


def report(workloads: Sequence[Workload], results: Results, header: list[str],
           runtime: float, companions: Sequence[CompanionRun] = ()) -> str:
    lines = [*header, f"- total runtime: {runtime:.0f} s", ""]
    order = list(results.timings) + [c for c in results.errors if c not in results.timings]
    for workload in workloads:
        cells = sorted((c for c in order if c.workload == workload.name),
                       key=lambda c: (c.contender not in (RAW, RAW_PAIR), c.num_envs,
                                      CONTENDER_ORDER.index(c.contender)))
        lines += [*workload_table(workload, cells, results), ""]
    lines += [*extra_metrics(results), "", "## Target checks (reported, never asserted)", "",
              "Ratios of medians; *per repeat*: the same ratio within each repeat.", "",
              "```", *target_checks(results),
              *(line for run in companions for line in run.target_lines), "```", ""]
    if companions:
        lines += ["The lines after the start-up and auto ones come from the companion scripts "
                  "below, each run right after this table, one at a time.", ""]
    lines += ["## Notes", "", *(f"- {note}" for note in dict.fromkeys(results.notes)), ""]
    lines += report_lines(companions)
    return "\n".join(lines).rstrip("\n") + "\n"


CONTENDER_ORDER = [RAW, RAW_PAIR, SYNC, GYM_ASYNC, INLINE, THREAD, PROCESS, PROCESS_VIEW, AUTO,
                   PROCESS_PER_ENV, SHIM, ENVPOOL]


def plot(workloads: Sequence[Workload], results: Results, path: Path) -> None:
    """Log-scale grouped bars: one panel per workload, a group per size, a bar per contender."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    colors = {name: plt.get_cmap("tab10")(index) for index, name in enumerate(CONTENDER_ORDER)}
    figure, axes = plt.subplots(2, 2, figsize=(15, 10))
    for axis, workload in zip(axes.flat, workloads):
        groups: list[tuple[str, list[tuple[str, float]]]] = []
        for label, sizes, names in [("reference", None, (RAW, RAW_PAIR)),
                                    *((f"{n} envs", n, CONTENDER_ORDER[2:])
                                      for n in workload.sizes)]:
            bars = [(name, value) for name in names for cell in results.timings
                    if cell.workload == workload.name and cell.contender == name
                    and (sizes is None or cell.num_envs == sizes)
                    and (value := results.median(workload.name, cell.num_envs, name))]
            if bars:
                groups.append((label, bars))
        width = 0.8 / max((len(bars) for _, bars in groups), default=1)
        for position, (_, bars) in enumerate(groups):
            for slot, (name, value) in enumerate(bars):
                x = position + width * (slot - (len(bars) - 1) / 2)
                axis.bar(x, value, width * 0.9, color=colors[name])
        axis.set_xticks(range(len(groups)))
        axis.set_xticklabels([label for label, _ in groups])
        axis.set_yscale("log")
        axis.set_ylabel("sub-env steps/s (median, log scale)")
        axis.set_title(f"{workload.name}: {workload.description}", fontsize=10)
        axis.grid(axis="y", which="both", alpha=0.3)
    for axis in list(axes.flat)[len(workloads):]:
        axis.set_visible(False)
    shown = [name for name in CONTENDER_ORDER if any(c.contender == name for c in results.timings)]
    handles = [Patch(color=colors[name]) for name in shown]
    figure.legend(handles, shown, loc="lower center", ncol=4)
    figure.tight_layout(rect=(0, 0.08, 1, 1))
    figure.savefig(path, dpi=110)
    plt.close(figure)


# --------------------------------------------------------------------------------- main


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 1 repeat, short measurements (~1 minute)")
    parser.add_argument("--repeats", type=int, default=None, help="interleaved repeats (5)")
    parser.add_argument("--seconds", type=float, default=None,
                        help="seconds of timed stepping per measurement (0.6)")
    parser.add_argument("--workloads", default="",
                        help="comma-separated subset, e.g. CartPole-v1,PixelEnv (default: all)")
    parser.add_argument("--output", type=Path, default=RESULTS_DIR,
                        help="directory for latest.md and latest.png")
    parser.add_argument("--companions", action=argparse.BooleanOptionalAction, default=None,
                        help="then run the companion scripts (companions.py) and report their "
                             "targets too (default: yes, except with --quick)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    repeats = args.repeats or (1 if args.quick else 5)
    plan = Plan(seconds=args.seconds or (0.3 if args.quick else 0.6))
    if args.quick:
        plan = Plan(seconds=plan.seconds, warmup_steps=10, warmup_seconds=0.1, min_steps=2)
    chosen = {name.strip() for name in args.workloads.split(",") if name.strip()}
    workloads = [w for w in WORKLOADS if not chosen or w.name in chosen]
    if args.quick:  # a smoke run: the small batches only
        workloads = [dataclasses.replace(w, sizes=tuple(n for n in w.sizes if n <= 32))
                     for w in workloads]
    load = os.getloadavg()
    print(f"aiovec benchmark: {len(workloads)} workloads, {repeats} repeats, "
          f"{plan.seconds:g} s per measurement; load average {load[0]:.2f}", flush=True)
    started = time.perf_counter()

    results = run_all(workloads, repeats, plan)
    puffer = pufferlib_note()
    if puffer:
        results.notes.append(puffer)

    runtime = time.perf_counter() - started
    companions = (run_companions(COMPANIONS, args.output, quick=args.quick)
                  if args.companions or (args.companions is None and not args.quick) else [])
    header = machine_info(plan, repeats, load)
    text = report(workloads, results, header, runtime, companions)
    print("\n" + text, flush=True)
    args.output.mkdir(parents=True, exist_ok=True)
    (args.output / "latest.md").write_text(text)
    try:
        plot(workloads, results, args.output / "latest.png")
    except Exception as error:  # the tables matter more than the picture
        print(f"plot failed: {type(error).__name__}: {error}", file=sys.stderr)
    print(f"wrote {args.output / 'latest.md'} and {args.output / 'latest.png'} "
          f"in {time.perf_counter() - started:.0f} s total", flush=True)


if __name__ == "__main__":
    main()
