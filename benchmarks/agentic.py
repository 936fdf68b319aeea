"""Agentic rollouts: thousands of multi-turn chat episodes feeding one batched policy, orchestrated
five ways, against the physical limit X*.

The workload (``agentic_workload.py``), CPU only, no network: N = 4,096 episodes in flight, 512
groups of 8 slots playing the same task; 1-16 turns per task (uniform, from the task's seed);
each turn one policy call and one tool call (lognormal latency, median 50 ms, sigma 1, capped at
20 medians); the observation is the chat so far, a fresh tuple of ``{"role", "content"}`` dicts
each turn, the actions text over a ~700-character Unicode charset. The policy is one coroutine
serving FIFO requests in batches of up to B = 256 in a + b·n seconds (a = 10 ms, b = 0.1 ms):
the bottleneck. X* is the lowest of the policy-bound rate (full batches: B / (a + b·B) requests
per second over the mean turns), the latency-bound rate (N / the mean episode latency with an
idle policy) and, when tool calls compute, the CPU-bound rate; the report prints each formula.

Contenders (``agentic_contenders.py``), each written from its framework's pattern: a lockstep
``asyncio.gather`` per batch of N episodes (SkyRL, verl); a task per episode behind a semaphore,
with a deadline and retries on every tool call (verifiers); a dispatcher with an in-flight cap
moved by the policy's queue length (prime-rl); aiovec, env-centric (``recv`` → one policy batch
→ ``send``, ``AsyncChatEnv`` sub-envs); and a bare hand-written loop (a task per episode slot,
the policy's queue batching their requests), the reference of the stress target.

Variants:

- ``base``: the workload above. Targets: aiovec ≥ 95 % of X*, ≥ 1.0x the best of the three
  framework patterns (the hand-written loop is a reference, not one of them), mean policy
  batch ≥ 0.95 B.
- ``stress``: a = 1 ms, b = 0.01 ms, B = 1,024, tool median 5 ms: the orchestrator's own CPU
  binds. Target: aiovec ≥ 0.9x the hand-written loop in agent turns (policy calls) per second.
- ``cpu-heavy``: 512 episodes in flight (64 groups), each tool call 2 ms of pure Python and no
  wait (a process-backend worker steps its sub-envs one after another, so a wait there would
  serialise; the CPU is the point); aiovec on the process backend (``ChatEnv``, and the
  coroutine envs themselves, ``AsyncChatEnv``, on an event loop per worker) against the async
  backend. Target: each process contender ≥ 1.6x async in agent turns/s (in steady state the
  ratio of their episodes/s, with less noise).
- ``cpu-and-wait``: as ``cpu-heavy``, each tool call also waiting (lognormal, median 20 ms):
  what tools that compute and call out do. A plain env's worker sleeps through each wait in
  turn; coroutine envs on the process backend overlap them. Target: the coroutine envs on
  the process backend ≥ 1.6x the async backend in agent turns/s.

Method: each measurement runs on a fresh event loop in this process (uvloop by default): the
contender starts (making and resetting aiovec's sub-envs is not timed), warms up until the
policy has served N · E[turns] requests (each slot about one episode), then is timed for
``--seconds``; the lockstep contender is timed over whole batches instead (from a batch's start
to the end of the first batch ending ``--seconds`` later), with no warm-up. In the window:
episodes finished per second, agent turns (policy requests served) per second, mean policy batch
over B, the latency of the episodes that finished (start to end), and this process's CPU time
(user + system, all threads: the orchestrator, the simulated tools and the policy) per wall
second. Repeats are interleaved; tables give medians, spread = (max - min) / median.

Run it (a full run takes about 20 minutes; ``--quick``, a smoke run at N = 256 and B = 32,
about 30 s)::

    .venv/bin/python benchmarks/agentic.py [--quick] [--repeats N] [--seconds S]
        [--variants base,stress,cpu-heavy,cpu-and-wait] [--contenders NAME,...] [--scale F]
        [--loop L]

``--scale`` multiplies every variant's number of groups and B (a moderate run: ``--scale 0.25``,
N = 1,024 and B = 64 in the base variant).
Output: markdown tables printed and, after a full run, written to ``benchmarks/results/agentic.md``.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import math
import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from agentic_contenders import CONTENDERS, HAND_WRITTEN, Sample, measure
from agentic_workload import Limits, Workload, limits, task_pool
from async_native_core import HAVE_UVLOOP
from harness import (
    Check,
    Plan,
    arguments,
    closing_sections,
    describe,
    header,
    interleaved,
    publish,
    ratio_cell,
    spread_cell,
    watchdog,
)

RESULTS = Path(__file__).resolve().parent / "results" / "agentic.md"
AIOVEC, AIOVEC_PROCESS = "aiovec async", "aiovec process"
AIOVEC_PROCESS_COROUTINES = "aiovec process, coroutine envs"
#: The framework patterns aiovec is measured against in the base variant.
FRAMEWORKS = ("lockstep gather (SkyRL/verl)", "task per episode (verifiers)",
              "adaptive dispatcher (prime-rl)")
TASK_CONTENDERS = (*FRAMEWORKS, HAND_WRITTEN, AIOVEC)


@dataclass(frozen=True)
class Variant:
    """One variant: its workload, the contenders it runs, and its smoke run's workload."""

    name: str
    workload: Workload
    contenders: tuple[str, ...]
    quick: Workload  # the smoke run's smaller workload

    def describe(self, workload: Workload) -> str:
        tool = (f"tool {workload.tool_cpu * 1e3:g} ms of CPU, no wait" if workload.tool_cpu
                else f"tool lognormal median {workload.tool_median * 1e3:g} ms, "
                     f"sigma {workload.tool_sigma:g}")
        return (f"N = {workload.num_slots:,} episodes in flight ({workload.num_groups} groups "
                f"of {workload.group_size}), 1-{workload.max_turns} turns, {tool}; policy "
                f"a = {workload.policy_base * 1e3:g} ms, b = "
                f"{workload.policy_per_request * 1e3:g} ms, B = {workload.policy_batch:,}")


STRESS = Workload(policy_base=0.001, policy_per_request=0.00001, policy_batch=1024,
                  tool_median=0.005)
CPU_HEAVY = Workload(num_groups=64, tool_median=0.0, tool_cpu=0.002)
CPU_AND_WAIT = dataclasses.replace(CPU_HEAVY, tool_median=0.02)
PROCESS_CONTENDERS = (AIOVEC, AIOVEC_PROCESS, AIOVEC_PROCESS_COROUTINES)
VARIANTS = {v.name: v for v in (
    Variant("base", Workload(), TASK_CONTENDERS,
            quick=Workload(num_groups=32, policy_batch=32)),
    Variant("stress", STRESS, TASK_CONTENDERS,
            quick=dataclasses.replace(STRESS, num_groups=32, policy_batch=128)),
    Variant("cpu-heavy", CPU_HEAVY, PROCESS_CONTENDERS,
            quick=dataclasses.replace(CPU_HEAVY, num_groups=8, policy_batch=32)),
    # (quick: shorter waits, so that a plain env's worker, sleeping through them in turn,
    # finishes a batch within a smoke run's window)
    Variant("cpu-and-wait", CPU_AND_WAIT, PROCESS_CONTENDERS,
            quick=dataclasses.replace(CPU_AND_WAIT, num_groups=8, policy_batch=32,
                                      tool_median=0.0005)),
)}

Key = tuple[str, str]  # (variant, contender)

NOTES = (
    "aiovec's sub-envs (`AsyncChatEnv`; `ChatEnv` on the process backend) declare "
    "`aiovec.ObjectSpace(tuple)` as their observation space and `Text(max_length=512)` over "
    "a ~700-character charset as their action space; same-step autoreset (a finished "
    "episode's row already holds the next one's first chat); `copy=False` (each chat is a new "
    "tuple, never changed after it is returned; copying it out costs about 40 µs a turn at "
    "these lengths); `recv(batch_size=B)`: the first B to finish (the policy's queue batches "
    "across calls; a batching window, `min_size=B // 4, wait=a`, cost about 1.3x the CPU per "
    "turn in the stress variant at N = 1,024).",
    "The task-per-episode contender's deadline on a tool call (40 tool medians) never fires: "
    "latencies are capped at 20 medians, so every contender does the same work.",
    "The adaptive dispatcher's cap starts at B, grows 1.25x per 0.1 s reading of the policy's "
    "queue while it is shorter than B and the cap is 90% used, and is cut to 0.9x the episodes "
    "in flight after 6 readings in a row over 2 B (they drain; no cut until they have).",
    "Episodes/s counts the episodes that finished in the window: where the policy binds, the "
    "contenders that keep it full tie within that count's noise (about 1% at N = 1,024 over "
    "5 s); their agent turns/s then agree more closely.",
    "cpu-heavy has no tool waits: a plain env's worker steps its sub-envs one after another, "
    "so a wait there would serialise (cpu-and-wait shows it); the 2 ms of CPU is the point. "
    "The process contenders' orchestrator CPU is the parent's alone (the workers' is not "
    "counted).",
)


@dataclass
class Results:
    """Each (variant, contender)'s samples with their repeat, or the error that ended it."""

    samples: dict[Key, list[tuple[int, Sample]]] = dataclasses.field(default_factory=dict)
    errors: dict[Key, str] = dataclasses.field(default_factory=dict)

    def values(self, key: Key, figure: Callable[[Sample], float]) -> list[float]:
        return [figure(sample) for _, sample in self.samples.get(key, [])]

    def median(self, key: Key, figure: Callable[[Sample], float]) -> float | None:
        """The median over the repeats that have the figure (a window in which no episode
        ended has no latency: NaN), None if none has."""
        values = [value for value in self.values(key, figure) if not math.isnan(value)]
        return statistics.median(values) if values else None

    def by_repeat(self, key: Key, figure: Callable[[Sample], float]) -> dict[int, float]:
        return {repeat: figure(sample) for repeat, sample in self.samples.get(key, [])}


def episodes(sample: Sample) -> float:
    return sample.episodes_per_second


def turns(sample: Sample) -> float:
    return sample.turns_per_second


def batch(sample: Sample) -> float:
    return sample.mean_batch


# ------------------------------------------------------------------------------ running


def warmup_turns(workload: Workload, episodes_each: float) -> int:
    """Policy requests for each slot to play about ``episodes_each`` episodes."""
    pool = task_pool(workload)
    return int(episodes_each * workload.num_slots * sum(pool.turns) / pool.size)


def run_all(chosen: dict[str, tuple[Workload, tuple[str, ...]]], repeats: int, plan: Plan,
            loop: str, warmup_episodes: float, results: Results) -> None:
    for repeat in range(repeats):
        print(f"\n== repeat {repeat + 1}/{repeats}", flush=True)
        for variant, (workload, names) in chosen.items():
            for name in interleaved(names, f"{variant}-{repeat}"):
                key = (variant, name)
                if key in results.errors:
                    continue  # failed in an earlier repeat: reported once, not retried
                print(f"  {variant:<10} {name:<32}", end="", flush=True)
                gc.collect()
                started = time.perf_counter()
                try:
                    with watchdog(plan.cell_timeout + 60.0):  # a hung clean-up, at worst
                        sample = measure(CONTENDERS[name], workload, plan,
                                         warmup_turns(workload, warmup_episodes), loop)
                except Exception as error:  # an error row; the run goes on
                    results.errors[key] = describe(error)
                    print(f"ERROR {results.errors[key]}", flush=True)
                    continue
                results.samples.setdefault(key, []).append((repeat, sample))
                print(f"{sample.episodes_per_second:9,.1f} episodes/s "
                      f"{sample.turns_per_second:9,.0f} turns/s  batch "
                      f"{sample.mean_batch:.2f} B  p99 {sample.p99:6.2f} s  CPU "
                      f"{sample.cpu:.0%}  ({time.perf_counter() - started:.0f} s)", flush=True)


# ------------------------------------------------------------------------------ report


def _cell(value: float | None, text: str) -> str:
    return "—" if value is None else text.format(value)


def table(variant: str, names: Sequence[str], bound: Limits, results: Results) -> list[str]:
    lines = ["| contender | episodes/s | % of X* | agent turns/s | turns/s vs hand-written | "
             "mean batch / B | p50 latency | p99 latency | orchestrator CPU | spread |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    reference = results.median((variant, HAND_WRITTEN), turns)
    for name in names:
        key = (variant, name)
        if key in results.errors:
            lines.append(f"| {name} | error: {results.errors[key]} |" + " |" * 8)
            continue
        rate = results.median(key, episodes)
        share = None if rate is None else rate / bound.x_star
        cells = [_cell(rate, "{:,.1f}"), _cell(share, "{:.0%}"),
                 _cell(results.median(key, turns), "{:,.0f}"),
                 ratio_cell(results.median(key, turns), reference),
                 _cell(results.median(key, batch), "{:.2f}"),
                 _cell(results.median(key, lambda s: s.p50), "{:.2f} s"),
                 _cell(results.median(key, lambda s: s.p99), "{:.2f} s"),
                 _cell(results.median(key, lambda s: s.cpu), "{:.0%}"),
                 spread_cell(results.values(key, episodes))]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def ratio_check(label: str, results: Results, key: Key, others: Sequence[Key],
                figure: Callable[[Sample], float], target: float) -> Check:
    """``key``'s figure over the best of ``others``' (medians, then within each repeat)."""
    mine = results.median(key, figure)
    best = max((m for m in (results.median(o, figure) for o in others) if m is not None),
               default=None)
    mine_by_repeat = results.by_repeat(key, figure)
    theirs = [results.by_repeat(o, figure) for o in others]
    best_by_repeat = {r: max((t[r] for t in theirs if r in t), default=0.0)
                      for r in mine_by_repeat}
    per_repeat = [value / best_by_repeat[r] for r, value in sorted(mine_by_repeat.items())
                  if best_by_repeat[r]]  # none measured, or all 0 (a loaded smoke run)
    return Check(label, None if mine is None or not best else mine / best, target,
                 per_repeat=per_repeat)


def checks(chosen: dict[str, tuple[Workload, tuple[str, ...]]], bounds: dict[str, Limits],
           results: Results) -> list[Check]:
    found: list[Check] = []
    if "base" in chosen:
        key, x_star = ("base", AIOVEC), bounds["base"].x_star
        rate = results.median(key, episodes)
        found.append(Check("base: aiovec episodes/s / X*", None if rate is None
                           else rate / x_star, 0.95, unit="%",
                           per_repeat=[v / x_star for v in results.values(key, episodes)]))
        found.append(ratio_check("base: aiovec / the best framework pattern, episodes/s",
                                 results, key, [("base", n) for n in FRAMEWORKS], episodes,
                                 1.0))
        found.append(Check("base: aiovec mean policy batch / B", results.median(key, batch),
                           0.95, unit="", per_repeat=results.values(key, batch),
                           show=lambda v: f"{v:.2f}"))
    if "stress" in chosen:
        found.append(ratio_check("stress: aiovec / hand-written loop, agent turns/s", results,
                                 ("stress", AIOVEC), [("stress", HAND_WRITTEN)], turns, 0.9))
    if "cpu-heavy" in chosen:
        # Turns/s: in steady state the ratio of episodes/s, with less noise.
        found.append(ratio_check("cpu-heavy: aiovec process / async backend, agent turns/s",
                                 results, ("cpu-heavy", AIOVEC_PROCESS),
                                 [("cpu-heavy", AIOVEC)], turns, 1.6))
        found.append(ratio_check(
            "cpu-heavy: aiovec process (coroutine envs) / async backend, agent turns/s",
            results, ("cpu-heavy", AIOVEC_PROCESS_COROUTINES), [("cpu-heavy", AIOVEC)],
            turns, 1.6))
    if "cpu-and-wait" in chosen:
        found.append(ratio_check(
            "cpu-and-wait: aiovec process (coroutine envs) / async backend, agent turns/s",
            results, ("cpu-and-wait", AIOVEC_PROCESS_COROUTINES), [("cpu-and-wait", AIOVEC)],
            turns, 1.6))
    return found


def report(args: argparse.Namespace, chosen: dict[str, tuple[Workload, tuple[str, ...]]],
           plan: Plan, results: Results, runtime: float, load: float) -> str:
    method = (f"median of {args.repeats} interleaved repeats on {args.loop}; warm-up until the "
              f"policy served {args.warmup_episodes:g} · N · E[turns] requests, then "
              f"{plan.seconds:g} s timed (lockstep: whole batches, no warm-up); spread = "
              "(max - min) / median of episodes/s; orchestrator CPU = this process's CPU time "
              "over the window / its wall time")
    lines = header("aiovec agentic benchmark", method, packages=("anyio", "uvloop"),
                   more=[f"load average at start {load:.2f}",
                         f"total runtime: {runtime:.0f} s"])
    if args.quick:
        lines[2:2] = ["**Smoke run (`--quick`): one repeat at a small size; it checks that "
                      "everything runs, do not quote its figures.**", ""]
    bounds = {name: limits(workload) for name, (workload, _) in chosen.items()}
    for name, (workload, names) in chosen.items():
        bound = bounds[name]
        lines += [f"## {name}: {VARIANTS[name].describe(workload)}", "",
                  f"X* = {bound.x_star:,.1f} episodes/s ({bound.binding}-bound):", "",
                  *(f"- {line}" for line in bound.lines), "",
                  f"Measured {name} (medians):", "", *table(name, names, bound, results), ""]
    lines += closing_sections(checks(chosen, bounds, results), NOTES)
    return "\n".join(lines)


# --------------------------------------------------------------------------------- main


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = arguments(__doc__, repeats=3, seconds=15.0,
                       quick="one repeat of 1 s at N = 256 (cpu-heavy, cpu-and-wait: 64), "
                             "~40 s",
                       output=RESULTS)
    parser.add_argument("--variants", default=",".join(VARIANTS),
                        help=f"comma-separated subset of {', '.join(VARIANTS)}")
    parser.add_argument("--contenders", default="",
                        help="comma-separated subset of the contenders (default: all)")
    parser.add_argument("--scale", type=float, default=1.0,
                        help="multiply every variant's number of groups and B (default 1)")
    parser.add_argument("--warmup-episodes", type=float, default=None,
                        help="warm up until the policy served this · N · E[turns] requests "
                             "(1; --quick: 0.5)")
    parser.add_argument("--loop", choices=["uvloop", "asyncio"],
                        default="uvloop" if HAVE_UVLOOP else "asyncio")
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats = 1
        args.seconds = min(args.seconds, 1.0)
    if args.warmup_episodes is None:
        args.warmup_episodes = 0.5 if args.quick else 1.0
    unknown = {*args.variants.split(",")} - set(VARIANTS)
    if unknown:
        parser.error(f"unknown variants {sorted(unknown)}")
    return args


def chosen_variants(args: argparse.Namespace) -> dict[str, tuple[Workload, tuple[str, ...]]]:
    wanted = {name for name in args.contenders.split(",") if name}
    chosen = {}
    for name in args.variants.split(","):
        variant = VARIANTS[name]
        workload = variant.quick if args.quick else variant.workload
        if args.scale != 1.0:
            workload = dataclasses.replace(
                workload, num_groups=max(1, round(workload.num_groups * args.scale)),
                policy_batch=max(1, round(workload.policy_batch * args.scale)))
        names = tuple(n for n in variant.contenders if not wanted or n in wanted)
        if names:
            chosen[name] = (workload, names)
    return chosen


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    plan = Plan(seconds=args.seconds, cell_timeout=60.0 if args.quick else 300.0)
    chosen = chosen_variants(args)
    load = os.getloadavg()[0]
    print(f"aiovec agentic benchmark: {', '.join(chosen)}; {args.repeats} repeats of "
          f"{plan.seconds:g} s on {args.loop}; load average {load:.2f}", flush=True)
    started = time.perf_counter()
    results = Results()
    run_all(chosen, args.repeats, plan, args.loop, args.warmup_episodes, results)
    text = report(args, chosen, plan, results, time.perf_counter() - started, load)
    publish(text, args.output, RESULTS, bool(args.quick or args.scale != 1.0 or args.contenders
                                             or list(chosen) != list(VARIANTS)))


if __name__ == "__main__":
    main()
