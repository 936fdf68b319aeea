"""aiovec's async-native figures: coroutine envs, first-ready batches and event-loop lag.

1. I/O-bound latency: 256 sub-envs sleeping 5 ms per step. Median ms per ``await envs.step``
   on the thread backend (``time.sleep``) and the async backend (``AsyncEnv`` awaiting
   ``anyio.sleep``), as a ratio to one env's own step timed by the same loop (target ≤ 1.2x).
   Peers: Gymnasium ``AsyncVectorEnv`` (one process per env; 32 and 256 of them by default,
   ``--gym-envs``), a naive ``asyncio.gather`` over the coroutine envs, and ``SyncVectorEnv``
   with 256 (1.3 s per step: ``--sync-steps`` steps only). Floor for threads: as many plain
   threads sleeping and counting down, no vectorizer.
2. Scale: 10,000 coroutine envs awaiting 1 ms per step on one event loop, ``backend="async"``,
   against the naive baseline (``asyncio.gather`` over every env's step, per vector step), on
   asyncio and uvloop: sub-env steps/s, and the lag of a 1 ms probe coroutine meanwhile.
3. First-ready batches: 32 envs whose steps take 1-20 ms (log-normal, drawn from each env's
   ``np_random``), ``batch_size=16``: steps/s of ``send``/``recv`` against full-batch
   ``step`` on the same envs, thread and async backends (target ≥ 1.5x).
4. Loop lag while 32 process-backed CartPole envs step continuously: p99 lateness of a 1 ms
   probe coroutine on the same loop (target ≤ 5 ms) and the steps/s meanwhile; Gymnasium's
   vector envs stepped through ``asyncio.to_thread`` as peers, and the idle loop for scale.
5. Coroutine envs against a bare gather: 500 envs awaiting 5 ms and 10,000 awaiting 1 ms per
   step, on asyncio and uvloop, ``await envs.step`` on ``backend="async"`` against a bare
   ``asyncio.gather(*(env.step(a) for env, a in zip(envs, actions)))`` (nothing stacked).
   Two ways: in one process, where one event loop holds the envs, an ``AsyncVectorEnv`` over
   those very instances and the gather, stepped alternately (the order swapped every step,
   so both see the same machine; but they share a heap, and the garbage collector's work);
   and each in a fresh process of its own, one after the other (the order swapped every
   repeat). Figures: the median wall time per vector step of each and their ratio (target
   ≤ 1.05x), and the same for process CPU time.

Run it (about 7 minutes; ``--quick`` for a ~35 s smoke run)::

    .venv/bin/python benchmarks/async_native.py [--quick] [--repeats N] [--seconds S]
        [--sections 1,2,3,4,5] [--gym-envs 32,256] [--coroutine-envs N] [--loop uvloop|asyncio]
        [--paired-envs 500,10000]

Before/after in one run, with this script measuring the old checkout's aiovec too::

    .venv/bin/python benchmarks/compare.py --old /tmp/old --same-script --rounds 3 -- \
        async_native.py --sections 5 --repeats 3 --output /tmp/async-native

Method: every measurement builds its contender on a fresh event loop, resets it, warms it up,
steps it for ``--seconds`` of wall time, then closes it. Repeats are interleaved (every
measurement once per repeat, shuffled within each section); tables give medians over repeats
and ratios of medians. Lag is how late a coroutine looping on ``anyio.sleep(0.001)`` wakes,
recorded during the timed window only. A contender that raises becomes an error row.

Output: markdown tables printed and written to ``benchmarks/results/async_native.md``, with
PASS/MISS lines for the targets (reported, never asserted).

Layout: this file is the entry point (command line, interleaved repeats, report); each family
of sections is a module of its own beside it, ``async_native_sleep.py`` (sections 1 and 2),
``async_native_first_ready.py`` (3), ``async_native_loop_lag.py`` (4) and
``async_native_vs_gather.py`` (5), and what they share is in ``async_native_core.py``.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path

from async_native_core import (
    HAVE_UVLOOP,
    PROBE_INTERVAL,
    Contender,
    Results,
    Sample,
    Section,
)
from async_native_first_ready import FIRST_READY_SECTION
from async_native_loop_lag import LOOP_LAG_SECTION
from async_native_sleep import IO_ENVS, LATENCY_SECTION, SCALE_SECTION
from async_native_vs_gather import ALONE, VS_GATHER_SECTION, run_alone
from harness import Check, Plan, arguments, describe, header, interleaved, watchdog

RESULTS_DIR = Path(__file__).resolve().parent / "results"
WARMUP_STEPS = 20  # at most, or 0.3 s, whichever ends first
CELL_TIMEOUT = 120.0  # a measurement taking longer than this is an error
RESULTS_FILE = "async_native.md"

SECTIONS: dict[int, Section] = {section.number: section for section in (
    LATENCY_SECTION, SCALE_SECTION, FIRST_READY_SECTION, LOOP_LAG_SECTION, VS_GATHER_SECTION)}
#: The order of the target lines in the report (section 2 has none).
CHECK_ORDER = (1, 3, 5, 4)


# --------------------------------------------------------------------------- orchestration


def progress(sample: Sample) -> str:
    parts = []
    if sample.steps_per_second is not None:
        parts.append(f"{sample.steps_per_second:>11,.0f} steps/s")
    if sample.latency is not None:
        parts.append(f"{sample.latency * 1e3:8.2f} ms/step")
    if sample.lag is not None:
        parts.append(f"lag p99 {sample.lag.p99 * 1e3:.2f} ms")
    return "  ".join(parts)


def measure(contender: Contender, plan: Plan, results: Results, repeat: int) -> str:
    """Run one contender once, record its sample or its error; the progress text."""
    gc.collect()
    started = time.perf_counter()
    try:
        with watchdog(plan.cell_timeout + 30.0):
            sample = contender.run(plan)
    except Exception as error:  # reported as an error row, and the run goes on
        results.errors[contender.key] = describe(error)
        return f"ERROR {results.errors[contender.key]}"
    results.samples.setdefault(contender.key, []).append(dataclasses.replace(sample,
                                                                             repeat=repeat))
    return f"{progress(sample)}  ({time.perf_counter() - started:.1f} s)"


def run_all(contenders: Sequence[Contender], repeats: int, plan: Plan,
            results: Results) -> None:
    """Every contender once per repeat, shuffled within each section."""
    sections = sorted({c.section for c in contenders})
    for repeat in range(repeats):
        print(f"\n== repeat {repeat + 1}/{repeats} ({len(contenders)} measurements)",
              flush=True)
        for section in sections:
            group = [c for c in contenders if c.section == section]
            for contender in interleaved(group, repeat * 1000 + section):
                if contender.key in results.errors:
                    continue  # it failed in an earlier repeat: reported once, not retried
                label = f"{section}  {contender.name[:52]:<52} n={contender.num_envs:<6}" \
                        f"{contender.loop:<8}"
                print(f"  {label}", end="", flush=True)
                print(measure(contender, plan, results, repeat), flush=True)


# ------------------------------------------------------------------------------ report


def machine_info(args: argparse.Namespace, plan: Plan, repeats: int,
                 load: tuple[float, float, float]) -> list[str]:
    method = (f"median of {repeats} interleaved repeats, {plan.seconds:g} s of stepping each "
              f"after up to {plan.warmup_steps} warm-up steps; sections 1, 3 and 4 on "
              f"{args.loop}; steps/s = sub-env steps per wall second; ratios are ratios of "
              "medians; spread = (max - min) / median over repeats; lag = how late a coroutine "
              f"looping on `anyio.sleep({PROBE_INTERVAL:g})` wakes, during the timed window; "
              "section 5: within each repeat the ratio of the two medians over steps taken "
              "alternately (after 3 warm-up pairs), then the median of those ratios over repeats")
    lines = header("aiovec async-native benchmark", method, packages=("anyio", "uvloop"),
                   more=[f"load average at start {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f}"])
    if args.quick:
        lines[2:2] = ["**Smoke run (`--quick`): one repeat of short measurements; it checks "
                      "that everything runs, do not quote its figures.**", ""]
    return lines[:-1]


def target_checks(contenders: Sequence[Contender], results: Results, loop: str) -> list[Check]:
    checks: list[Check] = []
    for number in CHECK_ORDER:
        members = [c for c in contenders if c.section == number]
        section_checks = SECTIONS[number].checks
        if members and section_checks:
            checks += section_checks(members, results, loop)
    return checks


def report(contenders: Sequence[Contender], results: Results, header: list[str],
           runtime: float, loop: str) -> str:
    lines = [*header, f"- total runtime: {runtime:.0f} s", ""]
    for section in sorted({c.section for c in contenders}):
        members = [c for c in contenders if c.section == section]
        lines += [f"## {SECTIONS[section].title}", "",
                  *SECTIONS[section].table(members, results), ""]
    checks = target_checks(contenders, results, loop)
    if checks:
        lines += ["## Target checks (reported, never asserted)", "",
                  "Ratios of medians (lag: the median p99); *per repeat*: the same figure "
                  "within each repeat.", "", "```", *(c.line() for c in checks), "```", ""]
    lines += ["## Notes", ""]
    lines += [f"- {note}" for note in dict.fromkeys(results.notes)]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------- main


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = arguments(__doc__, output=RESULTS_DIR)
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 1 repeat, short measurements (~35 s)")
    parser.add_argument("--repeats", type=int, default=None, help="interleaved repeats (5)")
    parser.add_argument("--seconds", type=float, default=None,
                        help="seconds of timed stepping per measurement (1.0)")
    parser.add_argument("--sections", default="1,2,3,4,5",
                        help="comma-separated subset of the sections to run (default: all)")
    parser.add_argument("--gym-envs", default=f"32,{IO_ENVS}",
                        help="comma-separated sizes (sub-envs = processes) of Gymnasium's "
                             f"AsyncVectorEnv in section 1; aiovec is measured at each too "
                             f"(32,{IO_ENVS}; '' for none)")
    parser.add_argument("--sync-steps", type=int, default=None,
                        help=f"timed steps of SyncVectorEnv over {IO_ENVS} sleeping envs "
                             "(3; 1.3 s each; 0: no such row)")
    parser.add_argument("--coroutine-envs", type=int, default=None,
                        help="coroutine envs in section 2 (10,000)")
    parser.add_argument("--paired-envs", default="500,10000",
                        help="comma-separated sizes of section 5 (500,10000; a size other than "
                             "those steps 1 ms)")
    parser.add_argument("--alone", choices=ALONE, help=argparse.SUPPRESS)  # section 5's child
    parser.add_argument("--alone-min-steps", type=int, default=3, help=argparse.SUPPRESS)
    parser.add_argument("--loop", choices=["uvloop", "asyncio"],
                        default="uvloop" if HAVE_UVLOOP else "asyncio",
                        help="event loop of sections 1, 3 and 4 (uvloop when installed)")
    args = parser.parse_args(argv)
    if args.loop == "uvloop" and not HAVE_UVLOOP:
        parser.error("uvloop is not installed")
    args.gym_envs = sorted({int(part) for part in args.gym_envs.split(",") if part.strip()})
    if args.sync_steps is None:
        args.sync_steps = 2 if args.quick else 3
    if args.coroutine_envs is None:
        args.coroutine_envs = 10_000
    args.paired_envs = [int(part) for part in args.paired_envs.split(",") if part.strip()]
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    if args.alone:  # a child process of section 5: one measurement, printed as JSON
        plan = Plan(seconds=args.seconds or 1.0, warmup_steps=WARMUP_STEPS,
                    min_steps=args.alone_min_steps, cell_timeout=CELL_TIMEOUT)
        wall, cpu, steps = run_alone(args.alone, args.paired_envs[0], args.loop, plan)
        print(json.dumps({"wall": wall, "cpu": cpu, "steps": steps}))
        return
    repeats = args.repeats or (1 if args.quick else 5)
    plan = Plan(seconds=args.seconds or (0.3 if args.quick else 1.0), warmup_steps=WARMUP_STEPS,
                cell_timeout=CELL_TIMEOUT)
    if args.quick:
        plan = dataclasses.replace(plan, warmup_steps=5, warmup_seconds=0.1, min_steps=2)
    chosen = {int(part) for part in args.sections.split(",") if part.strip()}
    results = Results()
    contenders = [contender for number, section in SECTIONS.items() if number in chosen
                  for contender in section.contenders(args, results.notes)]
    load = os.getloadavg()
    print(f"aiovec async-native benchmark: sections {sorted(chosen)}, {repeats} repeats, "
          f"{plan.seconds:g} s per measurement; load average {load[0]:.2f}", flush=True)
    started = time.perf_counter()

    run_all(contenders, repeats, plan, results)

    header = machine_info(args, plan, repeats, load)
    text = report(contenders, results, header, time.perf_counter() - started, args.loop)
    print("\n" + text, flush=True)
    args.output.mkdir(parents=True, exist_ok=True)
    (args.output / RESULTS_FILE).write_text(text)
    print(f"wrote {args.output / RESULTS_FILE} in {time.perf_counter() - started:.0f} s total",
          flush=True)


if __name__ == "__main__":
    main()
