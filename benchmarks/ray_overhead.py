"""What distribution costs on one machine: aiovec's Ray backend against its process backend.

Workloads (``bench_envs.py``): CartPole-v1 at 8, 64 and 256 sub-envs, and ``CpuEnv`` (1 ms of
pure-Python CPU per step) at 8. Contenders, all through ``await envs.step()`` on uvloop:

- ``aiovec process``: the default process backend (one worker per core, shared memory);
- ``aiovec ray``: the default Ray backend (one actor per cluster CPU, each stepping its share
  of the sub-envs in one call per vector step);
- ``aiovec ray, 1 env/actor``: ``num_workers=num_envs`` (``num_cpus=0`` per actor), the layout
  of a naive actor-per-env design: one Ray round trip per sub-env per step (8 envs only);
- ``Ray floor (bare loops)``: no aiovec at all: as many actors as aiovec's Ray backend makes,
  each stepping its share in a bare ``env.step`` loop (resetting finished episodes) and returning
  stacked arrays, driven by ``ray.get``: what Ray itself costs at this layout (CartPole only).

Ray runs as a local runtime started by this script (loopback only, no dashboard), with as many
CPUs as the machine has. Run it (about 2 minutes; ``--quick`` for a ~30 s smoke run)::

    .venv/bin/python benchmarks/ray_overhead.py [--quick] [--repeats N] [--seconds S]
        [--num-envs 256 ...] [--output FILE]

Issue 19's target is the Ray backend at 256 CartPole envs against the process backend; the
script ends with that ratio and its per-repeat spread (each repeat's ray / process, both
measured in that repeat).

Method: as ``run.py``: each measurement builds its contender, resets it, warms it up, steps it
for ``--seconds`` of wall time and closes it; repeats are interleaved (shuffled within each
repeat), tables give medians over repeats and ratios of medians. Output: a markdown table,
printed and written to ``benchmarks/results/ray.md``.
"""

from __future__ import annotations

import itertools
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import numpy as np
from bench_envs import CpuEnv, make_cartpole
from harness import Check, Plan, arguments, describe, header, interleaved, stamped, stamped_async

import aiovec

RESULTS = Path(__file__).resolve().parent / "results" / "ray.md"
#: Keep Ray on loopback and without token auth: a runtime only this script uses.
RAY_ENVIRONMENT = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_AUTH_MODE": "disabled"}

PROCESS = "aiovec process"
RAY = "aiovec ray (K envs/actor)"
RAY_PER_ENV = "aiovec ray, 1 env/actor"
RAY_FLOOR = "Ray floor (bare loops)"
#: Issue 19's target: Ray at this many CartPole envs, at least this fraction of process.
TARGET_ENVS, TARGET_RATIO = 256, 0.5


@dataclass(frozen=True, eq=False)
class Cell:
    workload: str
    factory: Callable[[], Any]
    num_envs: int
    contender: str
    options: dict[str, Any]


def cells(only: set[int] | None = None) -> list[Cell]:
    found = []
    for workload, factory, sizes in (("CartPole-v1", make_cartpole, (8, 64, 256)),
                                     ("CpuEnv (1 ms CPU)", CpuEnv, (8,))):
        for num_envs in sizes:
            if only and num_envs not in only:
                continue
            found.append(Cell(workload, factory, num_envs, PROCESS, {"backend": "process"}))
            found.append(Cell(workload, factory, num_envs, RAY, {"backend": "ray"}))
            if num_envs <= 8:
                found.append(Cell(workload, factory, num_envs, RAY_PER_ENV, {
                    "backend": "ray", "num_workers": num_envs,
                    "actor_options": {"num_cpus": 0}}))
            if factory is make_cartpole:
                found.append(Cell(workload, factory, num_envs, RAY_FLOOR, {}))
    return found


class BareLoops:
    """The floor's actor: its share of the sub-envs stepped in a bare loop, results stacked."""

    def __init__(self, factory: Callable[[], Any], count: int, seed: int) -> None:
        self.envs = [factory() for _ in range(count)]
        for index, env in enumerate(self.envs):
            env.reset(seed=seed + index)

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, ...]:
        observations, rewards, terminations, truncations = [], [], [], []
        for env, action in zip(self.envs, actions):
            observation, reward, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                observation, _ = env.reset()
            observations.append(observation)
            rewards.append(reward)
            terminations.append(terminated)
            truncations.append(truncated)
        return (np.stack(observations), np.array(rewards), np.array(terminations),
                np.array(truncations))


def measure_floor(cell: Cell, plan: Plan) -> tuple[float, float]:
    """``measure`` for the floor: aiovec's default Ray layout (one actor per CPU, one CPU
    each, contiguous shares), without aiovec."""
    import ray

    rng = np.random.default_rng(cell.num_envs)
    actions = list(rng.integers(0, 2, size=(64, cell.num_envs), dtype=np.int64))
    cpus = int(ray.cluster_resources().get("CPU", 1))
    count = max(1, min(cell.num_envs, cpus))
    bounds = [cell.num_envs * index // count for index in range(count + 1)]
    remote = ray.remote(num_cpus=1, max_concurrency=1)(BareLoops)
    pairs = list(itertools.pairwise(bounds))
    actors = [remote.remote(cell.factory, stop - start, start) for start, stop in pairs]
    shares = [(actor, start, stop) for actor, (start, stop) in zip(actors, pairs)]

    def step(batch: np.ndarray) -> None:
        ray.get([actor.step.remote(batch[start:stop]) for actor, start, stop in shares])

    try:
        ray.get([actor.step.remote(actions[0][start:stop]) for actor, start, stop in shares],
                timeout=plan.cell_timeout)  # started
        stamps = stamped(step, actions, plan)
    finally:
        for actor in actors:
            ray.kill(actor)
    elapsed = stamps[-1] - stamps[0]
    return (cell.num_envs * (len(stamps) - 1) / elapsed, float(np.median(np.diff(stamps))))


def measure(cell: Cell, plan: Plan) -> tuple[float, float]:
    """(sub-env steps per second, median seconds per vector step)."""
    rng = np.random.default_rng(cell.num_envs)
    actions = list(rng.integers(0, 2, size=(64, cell.num_envs), dtype=np.int64))

    async def main() -> list[float]:
        with anyio.fail_after(plan.cell_timeout):
            async with aiovec.AsyncVectorEnv([cell.factory] * cell.num_envs,
                                             **cell.options) as envs:
                await envs.reset(seed=0)
                return await stamped_async(envs.step, actions, plan)

    stamps = anyio.run(main, backend="asyncio", backend_options={"use_uvloop": True})
    elapsed = stamps[-1] - stamps[0]
    return (cell.num_envs * (len(stamps) - 1) / elapsed, float(np.median(np.diff(stamps))))


def main() -> None:
    parser = arguments(__doc__, repeats=3, seconds=1.0, quick="1 repeat of 0.3 s",
                       output=RESULTS)
    parser.add_argument("--num-envs", type=int, action="append",
                        help="only these sizes (repeatable; default: all)")
    args = parser.parse_args()
    repeats, seconds = (1, 0.3) if args.quick else (args.repeats, args.seconds)
    plan = Plan(seconds=seconds, warmup_steps=20, warmup_seconds=min(1.0, seconds), min_steps=5,
                cell_timeout=120.0)

    for key, value in RAY_ENVIRONMENT.items():
        os.environ.setdefault(key, value)
    import ray

    started = time.perf_counter()
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False,
             configure_logging=False)
    samples: dict[Cell, list[tuple[float, float]]] = {}
    errors: dict[Cell, str] = {}
    try:
        todo = cells(set(args.num_envs or ()))
        for repeat in range(repeats):
            for cell in interleaved(todo, repeat):
                if cell in errors:
                    continue
                try:
                    run = measure_floor if cell.contender == RAY_FLOOR else measure
                    samples.setdefault(cell, []).append(run(cell, plan))
                except Exception as error:
                    errors[cell] = describe(error)
                print(f"repeat {repeat + 1}/{repeats}: {cell.workload} x{cell.num_envs} "
                      f"{cell.contender}", file=sys.stderr)
    finally:
        ray.shutdown()

    lines = [
        *header("aiovec on Ray vs process, one machine",
                f"median of {repeats} interleaved repeats, {seconds} s of stepping each, "
                "`await envs.step()` on uvloop; steps/s = sub-env steps per wall second; "
                "ratio = ray / process, of medians", packages=("ray",),
                more=[f"total runtime: {time.perf_counter() - started:.0f} s"]),
        "| workload | num_envs | contender | steps/s (median) | ms per vector step "
        "| vs process | per repeat |",
        "|---|---:|---|---:|---:|---:|---|",
    ]
    for cell in todo:
        if cell in errors:
            lines.append(f"| {cell.workload} | {cell.num_envs} | {cell.contender} | error: "
                         f"{errors[cell]} | | | |")
            continue
        rate = statistics.median(sample[0] for sample in samples[cell])
        latency = statistics.median(sample[1] for sample in samples[cell])
        base = next(other for other in todo if other.workload == cell.workload
                    and other.num_envs == cell.num_envs and other.contender == PROCESS)
        base_rate = (statistics.median(sample[0] for sample in samples[base])
                     if base in samples else None)
        ratio = f"{rate / base_rate:.2f}x" if base_rate else "n/a"
        spread = ("" if cell is base
                  else per_repeat(samples.get(cell, []), samples.get(base, [])))
        lines.append(f"| {cell.workload} | {cell.num_envs} | {cell.contender} | {rate:,.0f} "
                     f"| {latency * 1e3:.2f} | {ratio} | {spread} |")
    lines += ["", target_line(todo, samples)]
    text = "\n".join(lines) + "\n"
    print(text)
    args.output.write_text(text)


def per_repeat(samples: list[tuple[float, float]], base: list[tuple[float, float]]) -> str:
    """Each repeat's ratio to process (both measured in that repeat), lowest to highest."""
    if len(samples) != len(base) or not samples:
        return ""
    ratios = sorted(sample[0] / other[0] for sample, other in zip(samples, base))
    return ", ".join(f"{ratio:.2f}" for ratio in ratios)


def target_line(todo: list[Cell], samples: dict[Cell, list[tuple[float, float]]]) -> str:
    found = {cell.contender: samples.get(cell, []) for cell in todo
             if cell.workload == "CartPole-v1" and cell.num_envs == TARGET_ENVS}
    ray_samples, process_samples = found.get(RAY), found.get(PROCESS)
    if not ray_samples or not process_samples:
        return f"Target (Ray at {TARGET_ENVS} CartPole envs): not measured in this run."

    def ratio(samples: list[tuple[float, float]], base: list[tuple[float, float]]) -> float:
        return (statistics.median(sample[0] for sample in samples)
                / statistics.median(sample[0] for sample in base))

    paired = [ray[0] / process[0] for ray, process in zip(ray_samples, process_samples)]
    line = Check(f"CartPole-v1 n={TARGET_ENVS}, aiovec ray vs aiovec process (issue 19)",
                 ratio(ray_samples, process_samples), TARGET_RATIO,
                 per_repeat=paired).line()
    floor = found.get(RAY_FLOOR)
    if floor:
        line += (f"\n\nRay's own floor (bare loops in the same actors) is "
                 f"{ratio(floor, process_samples):.2f}x the process backend (per repeat "
                 f"{per_repeat(floor, process_samples)}); aiovec's Ray backend is "
                 f"{ratio(ray_samples, floor):.2f}x that floor (per repeat "
                 f"{per_repeat(ray_samples, floor)}).")
    return line


if __name__ == "__main__":
    main()
