"""Real environments: aiovec against Gymnasium, EnvPool and the machine's 2-core limit.

Cells (factories in ``real_env_makers.py``): Pong at n = 8 and 32 sub-envs (``ALE/Pong-v5``,
``frameskip=1``, under ``AtariPreprocessing(frame_skip=4, screen_size=84, grayscale_obs=True)``
and ``FrameStackObservation(4)``, ~0.5 ms per step); HalfCheetah-v5 (MuJoCo) at n = 8 and 32
(~0.05 ms); CartPole-v1 at n = 32 (~10 µs). Contenders, each as sub-env steps per wall second:

- ``raw 1 env``: one env in a plain loop in this process (``2x raw``: twice its figure);
- ``limit``: two spawned processes started together, each looping over n/2 envs with no IPC:
  what two cores give ("% of limit" is against it);
- Gymnasium's ``SyncVectorEnv`` (every "vs Sync") and ``AsyncVectorEnv`` (shared memory);
- EnvPool, when it imports: ``envpool.make(task, env_type="gymnasium", num_envs=n,
  batch_size=n, num_threads=2)``, sync ``step``. Its own C++ envs: Pong-v5 is given
  ``repeat_action_probability=0.25`` and ``use_fire_reset=False`` to match the Gymnasium
  pipeline (its defaults: 0 and True; the rest matches: 30 no-ops, 4 frames skipped with the
  last two max-pooled, 84x84 gray, INTER_AREA, 4 stacked, no episodic life, no reward
  clipping, 27,000 steps at most); HalfCheetah-v5 runs on its bundled MuJoCo (same model,
  frame_skip 5, reset noise 0.1); CartPole-v1 is a C++ port;
- aiovec, always with ``copy=False`` (observations as views of shared memory) and the default
  ``autoreset_mode``: ``await envs.step()`` on uvloop, ``backend="process"`` (default
  ``num_workers``: one per CPU) and ``"auto"``; the sync shim ``aiovec.VectorEnv`` (process,
  auto) called from the main thread; and the shim called inside ``asyncio.run``, blocking the
  loop at every step as a notebook cell would (``shim in a running loop``, process only).

Sections besides the cells: ``neighbour`` (Sync against aiovec process, Pong n=8, while a
spawned process burns one core); ``auto`` (``AsyncVectorEnv(backend="auto")`` made, reset and
closed ``--startups`` times for HalfCheetah n=8 and Pong n=8: the backend picked each time);
``ray`` (``backend="ray"`` against process through ``await``, Pong n=32, after one
``ray.init(num_cpus=2)``; last, as Ray's start-up loads the machine).

Method: each measurement builds its contender, resets it (seed 0), warms it up for 0.5 s,
steps it for ``--seconds`` with actions drawn up front (action space seeded, 64 batches cycled),
and closes it in a ``finally``, under a watchdog. Repeats are interleaved: every contender once
per repeat, shuffled within each cell. Tables give medians over repeats and spread = (max -
min) / median; target lines give the ratio of medians, then that ratio in each repeat. A
contender that raises becomes an error row (traceback on stderr) and is not run again.

Run: ``.venv/bin/python benchmarks/real_envs.py [--repeats 3] [--seconds 2.0]
[--cells pong-8,halfcheetah-32] [--sections cells,neighbour,auto,ray] [--output PATH]``;
``--neighbour``: that section alone; ``--quick`` (smoke run, < 2 min): one repeat of 0.5 s
(0.2 s warm-up), the n=8 cells, no EnvPool or Ray, 3 start-ups. A full run (every cell and
section) also writes the report to ``benchmarks/results/real_envs.md``; a partial or quick run
only prints it, unless ``--output`` is given.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import importlib
import importlib.metadata
import multiprocessing as mp
import os
import platform
import statistics
import sys
import time
import traceback
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import anyio
import gymnasium as gym
import numpy as np
import real_env_makers as makers  # benchmarks/ is sys.path[0]
from harness import (
    Check,
    Plan,
    arguments,
    describe,
    header,
    interleaved,
    machine,
    spread_cell,
    stamped,
    stamped_async,
    watchdog,
)
from plot_real_envs import plot

import aiovec

RESULTS = Path(__file__).resolve().parent / "results" / "real_envs.md"
UVLOOP = {"use_uvloop": True}
ACTION_BATCHES = 64
RAY_ENVIRONMENT = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_AUTH_MODE": "disabled"}
warnings.filterwarnings("ignore", message=".*precision lowered by casting.*")  # EnvPool's spaces

RAW, TWO_RAW, LIMIT = "raw 1 env", "2x raw", "limit: 2 processes x n/2 envs, no IPC"
SYNC, GYM_ASYNC = "gymnasium SyncVectorEnv", "gymnasium AsyncVectorEnv (shm)"
ENVPOOL = "EnvPool (C++, 2 threads)"
AWAIT_PROCESS, AWAIT_AUTO = "aiovec process (await)", "aiovec auto (await)"
AWAIT_PARENT = "aiovec process + parent worker (await)"
SHIM_PROCESS, SHIM_AUTO = "aiovec shim, process", "aiovec shim, auto"
SHIM_PARENT = "aiovec shim, process + parent worker"
SHIM_LOOP = "aiovec shim in a running loop, process"
RAY = "aiovec ray (await)"


@dataclass(frozen=True)
class Workload:
    name: str
    factory: makers.Factory
    action_space: gym.Space[Any]
    envpool_task: str
    envpool_options: tuple[tuple[str, Any], ...] = ()


WORKLOADS = {w.name: w for w in [
    Workload("Pong", makers.make_pong, gym.spaces.Discrete(6), "Pong-v5",
             (("repeat_action_probability", 0.25), ("use_fire_reset", False))),
    Workload("HalfCheetah", makers.make_half_cheetah, gym.spaces.Box(-1.0, 1.0, (6,), np.float32),
             "HalfCheetah-v5"),
    Workload("CartPole", makers.make_cartpole, gym.spaces.Discrete(2), "CartPole-v1"),
]}
CELLS = [("Pong", 8), ("Pong", 32), ("HalfCheetah", 8), ("HalfCheetah", 32), ("CartPole", 32)]
Runner = Callable[[Workload, int, Plan], float]


@dataclass
class Board:
    """Every measurement: steps/s per (section, contender), by repeat; errors; auto's picks."""

    rates: dict[tuple[str, str], dict[int, float]] = field(default_factory=dict)
    errors: dict[tuple[str, str], str] = field(default_factory=dict)
    picks: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def median(self, section: str, name: str) -> float | None:
        values = self.rates.get((section, name))
        return statistics.median(values.values()) if values else None


BOARD = Board()


def label(workload: str, num_envs: int) -> str:
    return f"{workload} n={num_envs}"


@cache
def action_batches(workload: str, num_envs: int) -> list[np.ndarray]:
    """``ACTION_BATCHES`` batches drawn from the single action space, seeded by ``num_envs``."""
    space = WORKLOADS[workload].action_space
    space.seed(num_envs)
    return [np.stack([space.sample() for _ in range(num_envs)]) for _ in range(ACTION_BATCHES)]


def rate(stamps: Sequence[float], num_envs: int) -> float:
    return num_envs * (len(stamps) - 1) / (stamps[-1] - stamps[0])


def note_pick(workload: Workload, num_envs: int, via: str, envs: Any) -> None:
    key = label(workload.name, num_envs)
    BOARD.picks.setdefault((key, via), []).append(envs.backend_name)
    BOARD.reasons.setdefault(key, envs.backend_reason)


# ---------------------------------------------------------------------------- contenders


def run_raw(workload: Workload, num_envs: int, plan: Plan) -> float:
    env = workload.factory()
    try:
        env.reset(seed=0)
        batches = action_batches(workload.name, 1)
        makers.loop([env], batches, plan.warmup_seconds, min_rounds=2)
        steps, elapsed = makers.loop([env], batches, plan.seconds)
        return steps / elapsed
    finally:
        env.close()


def run_limit(workload: Workload, num_envs: int, plan: Plan) -> float:
    """Two spawned processes, n/2 envs each, started together: their steps/s summed."""
    return makers.two_core_limit(workload.factory, action_batches(workload.name, num_envs),
                                 plan.warmup_seconds, plan.seconds, plan.cell_timeout)


def timed_sync(make: Callable[[], Any], workload: Workload, num_envs: int, plan: Plan,
               actions: Sequence[Any] | None = None, seeded: bool = True,
               pick: str | None = None) -> float:
    """Build, reset, warm up and time a sync vector env under the watchdog; always close it."""
    with watchdog(plan.cell_timeout):
        envs = make()
        try:
            if seeded:
                envs.reset(seed=0)
            else:
                envs.reset()  # EnvPool's reset takes no seed (its seed is a make() option)
            if pick:
                note_pick(workload, num_envs, pick, envs)
            actions = actions or action_batches(workload.name, num_envs)
            return rate(stamped(envs.step, actions, plan), num_envs)
        finally:
            envs.close()


def run_gym(vector: Callable[[list[makers.Factory]], Any]) -> Runner:
    """Gymnasium's ``SyncVectorEnv`` or ``AsyncVectorEnv`` (its defaults: shared memory)."""
    def run(workload: Workload, num_envs: int, plan: Plan) -> float:
        return timed_sync(lambda: vector([workload.factory] * num_envs), workload, num_envs, plan)
    return run


def run_envpool(workload: Workload, num_envs: int, plan: Plan) -> float:
    envpool = importlib.import_module("envpool")
    discrete = isinstance(workload.action_space, gym.spaces.Discrete)
    actions = [batch.astype(np.int32 if discrete else np.float64)
               for batch in action_batches(workload.name, num_envs)]
    return timed_sync(lambda: envpool.make(workload.envpool_task, env_type="gymnasium",
                                           num_envs=num_envs, batch_size=num_envs,
                                           num_threads=2, **dict(workload.envpool_options)),
                      workload, num_envs, plan, actions=actions, seeded=False)


def run_shim(backend: str, **options: Any) -> Runner:
    def run(workload: Workload, num_envs: int, plan: Plan) -> float:
        return timed_sync(lambda: aiovec.VectorEnv([workload.factory] * num_envs,
                                                   backend=backend, copy=False, **options),
                          workload, num_envs, plan, pick="shim" if backend == "auto" else None)
    return run


def run_shim_in_loop(workload: Workload, num_envs: int, plan: Plan) -> float:
    """The sync shim called from a coroutine: this thread's event loop blocked at each step."""
    async def main() -> float:
        return run_shim("process")(workload, num_envs, plan)
    return asyncio.run(main())


def run_await(backend: str, **options: Any) -> Runner:
    """``await envs.step()`` on uvloop."""
    def run(workload: Workload, num_envs: int, plan: Plan) -> float:
        async def main() -> float:
            with anyio.fail_after(plan.cell_timeout):
                async with aiovec.AsyncVectorEnv([workload.factory] * num_envs,
                                                 backend=backend, copy=False,
                                                 **options) as envs:
                    await envs.reset(seed=0)
                    if backend == "auto":
                        note_pick(workload, num_envs, "await", envs)
                    stamps = await stamped_async(
                        envs.step, action_batches(workload.name, num_envs), plan)
                    return rate(stamps, num_envs)
        with watchdog(plan.cell_timeout + 30.0):  # a backstop, should a sync part hang
            return anyio.run(main, backend="asyncio", backend_options=UVLOOP)
    return run


CONTENDERS: dict[str, Runner] = {
    RAW: run_raw, LIMIT: run_limit, SYNC: run_gym(gym.vector.SyncVectorEnv),
    GYM_ASYNC: run_gym(gym.vector.AsyncVectorEnv),
    ENVPOOL: run_envpool, AWAIT_PROCESS: run_await("process"), AWAIT_AUTO: run_await("auto"),
    AWAIT_PARENT: run_await("process", parent_worker=True),
    SHIM_PROCESS: run_shim("process"), SHIM_AUTO: run_shim("auto"), SHIM_LOOP: run_shim_in_loop,
    SHIM_PARENT: run_shim("process", parent_worker=True),
    RAY: run_await("ray"),
}


# ------------------------------------------------------------------------------ sections


def measure(section: str, name: str, workload: Workload, num_envs: int, plan: Plan,
            repeat: int) -> None:
    """One measurement into ``BOARD``; an exception becomes the contender's error cell."""
    key = (section, name)
    if key in BOARD.errors:
        return
    started = time.perf_counter()
    try:
        value = CONTENDERS[name](workload, num_envs, plan)
    except Exception as error:
        BOARD.errors[key] = describe(error)
        print(f"  {section:<24} {name:<40} ERROR {BOARD.errors[key]}", flush=True)
        traceback.print_exception(error, file=sys.stderr)
        return
    BOARD.rates.setdefault(key, {})[repeat] = value
    print(f"  {section:<24} {name:<40} {value:>10,.0f} steps/s "
          f"({time.perf_counter() - started:.1f} s)", flush=True)


def measure_all(section: str, workload: Workload, num_envs: int, names: Sequence[str],
                plan: Plan, repeat: int) -> None:
    """Each of ``names`` once, in this repeat's order."""
    for name in interleaved(names, f"{section}/{repeat}"):
        measure(section, name, workload, num_envs, plan, repeat)


def run_cells(cells: Sequence[tuple[str, int]], names: Sequence[str], plan: Plan,
              repeats: int) -> None:
    loads: list[float] = []
    for repeat in range(repeats):
        loads.append(round(os.getloadavg()[0], 2))
        print(f"repeat {repeat + 1}/{repeats} (load average {loads[-1]})", flush=True)
        for workload, num_envs in cells:
            measure_all(label(workload, num_envs), WORKLOADS[workload], num_envs, names, plan,
                        repeat)
    BOARD.notes.append(f"load average (1 min) as each repeat of the cells began: {loads}")


NEIGHBOUR = "Pong n=8, neighbour"


def run_neighbour(plan: Plan, repeats: int) -> None:
    """Sync and aiovec process (await), Pong n=8, while another process keeps a core busy."""
    context = mp.get_context("spawn")
    burning = context.Event()
    burner = context.Process(target=makers.burn, args=(burning,), daemon=True)
    burner.start()
    try:
        burning.wait(timeout=60.0)
        for repeat in range(repeats):
            measure_all(NEIGHBOUR, WORKLOADS["Pong"], 8, [SYNC, AWAIT_PROCESS], plan, repeat)
    finally:
        burner.terminate()
        burner.join()


def run_startups(startups: int) -> dict[str, list[str]]:
    """``backend="auto"`` made, reset and closed ``startups`` times per workload, alternating."""
    async def pick(workload: Workload) -> str:
        with anyio.fail_after(150.0):
            async with aiovec.AsyncVectorEnv([workload.factory] * 8, backend="auto",
                                             copy=False) as envs:
                await envs.reset(seed=0)
                return envs.backend_name

    picks: dict[str, list[str]] = {"HalfCheetah n=8": [], "Pong n=8": []}
    for index in range(startups):
        for name in ("HalfCheetah", "Pong"):
            try:
                picked = anyio.run(pick, WORKLOADS[name], backend="asyncio",
                                   backend_options=UVLOOP)
            except Exception as error:
                picked = f"error ({describe(error)})"
            picks[label(name, 8)].append(picked)
            print(f"  auto start-up {index + 1}/{startups} {name} n=8: {picked}", flush=True)
    return picks


RAY_SECTION = "Pong n=32, Ray running"


def run_ray(plan: Plan, repeats: int) -> str:
    """Ray against the process backend, Pong n=32, with Ray started once: a line on its start."""
    for key, value in RAY_ENVIRONMENT.items():
        os.environ.setdefault(key, value)
    started = time.perf_counter()
    try:
        import ray

        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
                 configure_logging=False)
    except Exception as error:
        return f"Ray did not start ({describe(error)}): no Ray row"
    took = time.perf_counter() - started
    try:
        for repeat in range(repeats):
            measure_all(RAY_SECTION, WORKLOADS["Pong"], 32, [AWAIT_PROCESS, RAY], plan, repeat)
    finally:
        ray.shutdown()
    return f"`ray.init(num_cpus=2)` took {took:.1f} s (ray {ray.__version__})"


# -------------------------------------------------------------------------------- report


def table(section: str, names: Sequence[str]) -> list[str]:
    sync, limit = BOARD.median(section, SYNC), BOARD.median(section, LIMIT)
    lines = ["| contender | steps/s (median) | spread | vs SyncVectorEnv | % of limit |",
             "|---|---:|---:|---:|---:|"]
    for name in names:
        values = BOARD.rates.get((section, RAW if name == TWO_RAW else name))
        if (section, name) in BOARD.errors:
            lines.append(f"| {name} | {BOARD.errors[(section, name)]} | | | |")
        if not values:
            continue
        scale = 2.0 if name == TWO_RAW else 1.0
        median = scale * statistics.median(values.values())
        versus = f"{median / sync:.2f}x" if sync else "—"
        share = f"{median / limit:.0%}" if limit else "—"
        lines.append(f"| {name} | {median:,.0f} | {spread_cell(list(values.values()))} | "
                     f"{versus} | {share} |")
    return lines


def best(section: str, names: Sequence[str]) -> tuple[float | None, dict[int, float]]:
    """The best median of ``names``, and the best of them within each repeat."""
    series = [BOARD.rates[(section, name)] for name in names if (section, name) in BOARD.rates]
    if not series:
        return None, {}
    per_repeat = {repeat: max(s[repeat] for s in series if repeat in s)
                  for repeat in set().union(*series)}
    return max(statistics.median(s.values()) for s in series), per_repeat


def check(text: str, section: str, ours: Sequence[str], theirs: Sequence[str], target: float,
          unit: str = "x") -> Check | None:
    top, top_repeats = best(section, ours)
    bottom, bottom_repeats = best(section, theirs)
    if top is None or bottom is None:
        return None
    per_repeat = [top_repeats[r] / bottom_repeats[r]
                  for r in sorted(top_repeats.keys() & bottom_repeats.keys())]
    return Check(f"{section}: {text}", top / bottom, target, unit, per_repeat=per_repeat)


#: The share of the 2-core limit the process backend is to reach through ``await``, per cell.
LIMIT_TARGETS = {("Pong", 8): 0.90, ("Pong", 32): 0.90, ("HalfCheetah", 8): 0.60,
                 ("HalfCheetah", 32): 0.85, ("CartPole", 32): 0.80}


def checks(cells: Sequence[tuple[str, int]], picks: dict[str, list[str]]) -> list[Check]:
    found: list[Check | None] = []
    for workload, num_envs in cells:
        section = label(workload, num_envs)
        target = LIMIT_TARGETS.get((workload, num_envs))
        if target:
            found += [check("await process vs limit", section, [AWAIT_PROCESS], [LIMIT],
                            target, "%"),
                      check("best aiovec (await or shim; process, parent worker, auto) "
                            "vs limit", section, [AWAIT_PROCESS, AWAIT_AUTO, AWAIT_PARENT,
                                                  SHIM_PROCESS, SHIM_PARENT, SHIM_AUTO],
                            [LIMIT], target, "%")]
        if workload == "CartPole":
            found += [check("await process vs Sync", section, [AWAIT_PROCESS], [SYNC], 1.3),
                      check("shim process vs Sync", section, [SHIM_PROCESS], [SYNC], 1.3)]
        found += [
            check("shim vs await, process", section, [SHIM_PROCESS], [AWAIT_PROCESS], 0.95),
            check("shim vs await, auto", section, [SHIM_AUTO], [AWAIT_AUTO], 0.95),
            check("shim in a running loop vs shim from a plain thread", section, [SHIM_LOOP],
                  [SHIM_PROCESS], 0.9),
            check("auto vs process (the best pinned backend measured)", section, [AWAIT_AUTO],
                  [AWAIT_PROCESS], 0.95),
        ]
    for section, chosen in picks.items():
        found.append(Check(f"{section}: auto picks the same backend at every start-up "
                           f"({counted(chosen)})",
                           collections.Counter(chosen).most_common(1)[0][1] / len(chosen), 1.0,
                           "%"))
    found += [check("aiovec process (await) vs Sync, one core busy", NEIGHBOUR,
                    [AWAIT_PROCESS], [SYNC], 1.0),
              check("ray vs process (await)", RAY_SECTION, [RAY], [AWAIT_PROCESS], 0.8)]
    return [c for c in found if c is not None]


def counted(picks: Sequence[str]) -> str:
    """``process 9/10, thread 1/10``."""
    return ", ".join(f"{name} {count}/{len(picks)}"
                     for name, count in collections.Counter(picks).most_common())


def report(args: argparse.Namespace, cells: Sequence[tuple[str, int]], names: Sequence[str],
           picks: dict[str, list[str]], load_before: float, took: float) -> list[str]:
    lines = header("Real environments: aiovec against Gymnasium, EnvPool and the 2-core limit",
                   f"{args.repeats} interleaved repeats of {args.seconds:g} s per measurement; "
                   "steps/s = sub-env steps per wall second; aiovec with `copy=False`, default "
                   "autoreset; `await` on uvloop",
                   packages=("ale-py", "mujoco", "envpool", "ray"),
                   more=[f"platform: {platform.platform()}",
                         f"load average (1 min): {load_before:.2f} before the run, "
                         f"{os.getloadavg()[0]:.2f} after; the run took {took:.0f} s"])
    shown = [*names[:1], TWO_RAW, *names[1:]]  # 2x raw right under raw
    for workload, num_envs in cells:
        section = label(workload, num_envs)
        lines += [f"## {section}", "", *table(section, shown), ""]
        lines += [f"- auto ({via}) picked: {counted(BOARD.picks[(section, via)])}"
                  for via in ("await", "shim") if (section, via) in BOARD.picks]
        if section in BOARD.reasons:
            lines.append(f"- auto's reason (first start-up): {BOARD.reasons[section]}")
        lines.append("")
    if (NEIGHBOUR, SYNC) in BOARD.rates or (NEIGHBOUR, SYNC) in BOARD.errors:
        lines += [f"## {NEIGHBOUR}: another process burns one core meanwhile", "",
                  *table(NEIGHBOUR, [SYNC, AWAIT_PROCESS]), ""]
    if picks:
        lines += ["## auto at start-up: the backend picked by fresh `AsyncVectorEnv("
                  "backend='auto')`s (made, reset, closed)", ""]
        lines += [f"- {section}: {counted(chosen)}; in order: {' '.join(chosen)}"
                  for section, chosen in picks.items()]
        lines.append("")
    if (RAY_SECTION, AWAIT_PROCESS) in BOARD.rates or (RAY_SECTION, RAY) in BOARD.errors:
        lines += [f"## {RAY_SECTION}", "", *table(RAY_SECTION, [AWAIT_PROCESS, RAY]), ""]
    lines += ["## Targets (reported, never asserted)", "", "```",
              *(c.line() for c in checks(cells, picks)), "```", ""]
    if BOARD.notes:
        lines += ["## Notes", "", *(f"- {note}" for note in BOARD.notes), ""]
    return lines


def main() -> None:
    parser = arguments(__doc__, repeats=3, seconds=2.0,
                       quick="1 repeat of 0.5 s, n=8 cells, no EnvPool or Ray")
    parser.add_argument("--cells", help="e.g. pong-8,halfcheetah-32 (default: all)")
    parser.add_argument("--sections", default="cells,neighbour,auto,ray")
    parser.add_argument("--neighbour", action="store_true", help="the neighbour section alone")
    parser.add_argument("--startups", type=int, default=10, help="auto start-ups per workload")
    parser.add_argument("--skip", default="", help="contenders to leave out, comma-separated "
                        "words of their names (e.g. 'gymnasium AsyncVectorEnv,EnvPool')")
    parser.add_argument("--output", type=Path, help=f"the markdown report (default: {RESULTS} "
                        "after a full run, none after a partial one)")
    args = parser.parse_args()
    everything = {"cells", "neighbour", "auto", "ray"}
    sections = {"neighbour"} if args.neighbour else set(args.sections.split(","))
    if sections - everything:
        parser.error(f"unknown sections {sorted(sections - everything)}")
    cells = CELLS
    if args.quick:
        args.repeats, args.seconds, args.startups = 1, 0.5, 3
        sections -= {"ray"}
        cells = [cell for cell in CELLS if cell[1] == 8]
    if args.cells:
        wanted = {name.strip().lower() for name in args.cells.split(",")}
        known = {f"{w}-{n}".lower() for w, n in CELLS}
        if wanted - known:
            parser.error(f"unknown cells {sorted(wanted - known)}; known: {sorted(known)}")
        cells = [(w, n) for w, n in cells if f"{w}-{n}".lower() in wanted]
    # Contenders left out make a partial run too: its report would lack their rows.
    full = not args.quick and cells == CELLS and sections == everything and not args.skip
    output = args.output or (RESULTS if full else None)  # a partial run keeps the full report
    names = [RAW, LIMIT, SYNC, GYM_ASYNC, ENVPOOL, AWAIT_PROCESS, AWAIT_PARENT, AWAIT_AUTO,
             SHIM_PROCESS, SHIM_PARENT, SHIM_AUTO, SHIM_LOOP]
    try:
        importlib.import_module("envpool")
        envpool = ("EnvPool: `envpool.make(task, env_type='gymnasium', num_envs=n, batch_size=n, "
                   "num_threads=2, **options)`, sync `step`; " + "; ".join(
                       f"{w.envpool_task} options {dict(w.envpool_options)}"
                       for w in WORKLOADS.values()))
    except Exception as error:
        envpool = f"EnvPool not importable ({describe(error)}): no EnvPool row"
    if args.quick or envpool.startswith("EnvPool not"):
        names.remove(ENVPOOL)
    skipped = [word.strip() for word in args.skip.split(",") if word.strip()]
    names = [name for name in names if name in (RAW, LIMIT, SYNC)
             or not any(word in name for word in skipped)]
    if "cells" in sections:
        BOARD.notes.append("EnvPool and Ray: skipped (--quick)" if args.quick else envpool)
    # Warm up for a time (at least 2 vector steps), however many steps that takes.
    plan = Plan(seconds=args.seconds, warmup_steps=10**9,
                warmup_seconds=0.2 if args.quick else 0.5, cell_timeout=150.0)
    load_before, started = os.getloadavg()[0], time.perf_counter()
    print(f"real envs: {machine()}; load average {load_before:.2f}; {args.repeats} repeats of "
          f"{args.seconds:g} s; sections {sorted(sections)}", flush=True)
    if "cells" in sections:
        run_cells(cells, names, plan, args.repeats)
    else:
        cells = []
    if "neighbour" in sections:
        print("neighbour: one core kept busy", flush=True)
        run_neighbour(plan, args.repeats)
    picks = run_startups(args.startups) if "auto" in sections else {}
    if "ray" in sections:
        print("ray", flush=True)
        BOARD.notes.append(run_ray(plan, args.repeats))
    lines = report(args, cells, names, picks, load_before, time.perf_counter() - started)
    text = "\n".join(lines)
    print("\n" + text, flush=True)
    if output:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text + "\n")
        print(f"wrote {output}")
    if output == RESULTS:  # a full run's picture beside its report
        try:
            plot([output], output.with_suffix(".png"))
        except Exception as error:  # no matplotlib, say: the report stands alone
            print(f"plot failed: {describe(error)}", file=sys.stderr)


if __name__ == "__main__":
    main()
