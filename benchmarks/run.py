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
(reported, never asserted). This file runs the measurements; the contenders are in
``run_contenders.py``, the report in ``run_report.py``.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from companions import COMPANIONS, run_companions
from harness import Plan, arguments, describe, header, interleaved, watchdog
from run_contenders import (
    STARTUP,
    STARTUP_ENVS,
    WORKLOADS,
    Cell,
    Contender,
    Results,
    Workload,
    envpool_problem,
    make_contenders,
    pufferlib_note,
)
from run_report import plot, report

RESULTS_DIR = Path(__file__).resolve().parent / "results"


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


def in_order(cells: list[tuple[Workload, int, Contender]],
             repeat: int) -> list[tuple[Workload, int, Contender]]:
    """The cells grouped by (workload, num_envs), contenders shuffled within each group."""
    groups: dict[tuple[str, int], list[tuple[Workload, int, Contender]]] = {}
    for cell in cells:
        groups.setdefault((cell[0].name, cell[1]), []).append(cell)
    return [cell for index, group in enumerate(groups.values())
            for cell in interleaved(group, repeat * 1000 + index)]


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
        for workload, num_envs, contender in in_order(cells, repeat):
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


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = arguments(__doc__, output=RESULTS_DIR)
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 1 repeat, short measurements (~1 minute)")
    parser.add_argument("--repeats", type=int, default=None, help="interleaved repeats (5)")
    parser.add_argument("--seconds", type=float, default=None,
                        help="seconds of timed stepping per measurement (0.6)")
    parser.add_argument("--workloads", default="",
                        help="comma-separated subset, e.g. CartPole-v1,PixelEnv (default: all)")
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
    method = (f"median of {repeats} interleaved repeats, {plan.seconds:g} s of stepping each "
              f"after up to {plan.warmup_steps} warm-up steps; steps/s = sub-env steps per wall "
              "second; ratios are ratios of medians; spread = (max - min) / median over repeats")
    lines = header("aiovec benchmark", method, packages=("anyio", "uvloop", "envpool"),
                   more=[f"load average at start {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f}"])
    text = report(workloads, results, lines[:-1], runtime, companions)
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
