"""Stable-Baselines3's own vector envs against ``aiovec.sb3.SB3VecEnv``, through SB3's API.

Every contender is stepped with ``vec_env.step(actions)`` exactly as SB3's algorithms do
(``step_async`` + ``step_wait``, one info dict per env, same-step autoreset). Workloads
(``bench_envs.py``): CartPole-v1 at 8 and 32 sub-envs, and ``CpuEnv`` (1 ms of pure-Python CPU
per step) at 8. Contenders: SB3 ``DummyVecEnv`` (serial, in process), SB3 ``SubprocVecEnv``
(one process per env, pipes), aiovec ``SB3VecEnv`` on its process backend (one worker per
core, shared memory) and on its thread backend.

    .venv/bin/python benchmarks/sb3.py [--quick] [--repeats N] [--seconds S]

Method as ``run.py``: each measurement builds its contender, resets it, warms it up, steps it
for ``--seconds`` of wall time and closes it; repeats are interleaved (shuffled within each
repeat); the table gives medians over repeats and ratios of medians. Output: a markdown table,
printed and written to ``benchmarks/results/sb3.md``.
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from bench_envs import CpuEnv, make_cartpole
from harness import Plan, arguments, describe, header, interleaved, stamped
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv, VecEnv

from aiovec.sb3 import SB3VecEnv

RESULTS = Path(__file__).resolve().parent / "results" / "sb3.md"
CONTENDERS: dict[str, Callable[[list[Callable[[], Any]]], VecEnv]] = {
    "SB3 DummyVecEnv": DummyVecEnv,
    "SB3 SubprocVecEnv": SubprocVecEnv,
    "aiovec SB3VecEnv (process)": lambda fns: SB3VecEnv(fns, backend="process"),
    "aiovec SB3VecEnv (thread)": lambda fns: SB3VecEnv(fns, backend="thread"),
}
WORKLOADS: dict[str, tuple[Callable[[], Any], int]] = {
    "CartPole 8": (make_cartpole, 8),
    "CartPole 32": (make_cartpole, 32),
    "CpuEnv 1 ms, 8": (CpuEnv, 8),
}
BASELINE = "SB3 SubprocVecEnv"


def measure(contender: str, workload: str, plan: Plan) -> float:
    """Env steps per second (vector steps times num_envs) of one fresh contender."""
    factory, num_envs = WORKLOADS[workload]
    vec_env = CONTENDERS[contender]([factory] * num_envs)
    try:
        vec_env.seed(0)
        vec_env.reset()
        rng = np.random.default_rng(0)
        actions = [rng.integers(0, 2, num_envs) for _ in range(64)]
        stamps = stamped(vec_env.step, actions, plan)
        return (len(stamps) - 1) * num_envs / (stamps[-1] - stamps[0])
    finally:
        vec_env.close()


def main() -> None:
    parser = arguments(__doc__, repeats=3, seconds=2.0, quick="one 0.5 s repeat per cell",
                       output=RESULTS)
    args = parser.parse_args()
    repeats, plan = args.repeats, Plan(seconds=args.seconds, warmup_steps=50,
                                       warmup_seconds=0.5, min_steps=20)
    if args.quick:
        repeats, plan = 1, Plan(seconds=0.5, warmup_steps=50, warmup_seconds=0.2, min_steps=20)
    cells = [(contender, workload) for workload in WORKLOADS for contender in CONTENDERS]
    results: dict[tuple[str, str], list[float]] = {cell: [] for cell in cells}
    errors: dict[tuple[str, str], str] = {}
    for repeat in range(repeats):
        for cell in interleaved(cells, repeat):
            if cell in errors:
                continue
            try:
                results[cell].append(measure(*cell, plan))
            except Exception as error:  # a contender that fails gets an error cell
                errors[cell] = describe(error)
            print(f"repeat {repeat + 1}/{repeats}: {cell[1]}, {cell[0]}", file=sys.stderr)
    columns = ("| workload | " + " | ".join(CONTENDERS) + " | aiovec process vs "
               "SubprocVecEnv |\n|---|" + "---:|" * (len(CONTENDERS) + 1))
    lines = [*header("Stable-Baselines3's VecEnv API: aiovec against SB3's own",
                     f"median of {repeats} interleaved {plan.seconds:g}-s repeats",
                     packages=("stable-baselines3",)),
             f"SB3 API, env steps/s, median of {repeats} interleaved {plan.seconds:g}-s "
             "repeats.", "", columns]
    for workload in WORKLOADS:
        medians = {contender: statistics.median(results[contender, workload])
                   for contender in CONTENDERS if results[contender, workload]}
        row = [errors.get((contender, workload)) or f"{medians[contender]:,.0f}"
               for contender in CONTENDERS]
        mine, theirs = (medians.get("aiovec SB3VecEnv (process)"), medians.get(BASELINE))
        ratio = f"{mine / theirs:.2f}x" if mine and theirs else "—"
        lines.append(f"| {workload} | " + " | ".join(row) + f" | {ratio} |")
    table = "\n".join(lines) + "\n"
    print(table)
    args.output.write_text(table)


if __name__ == "__main__":
    main()
