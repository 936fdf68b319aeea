"""Start-up and restart of process-based vector envs: aiovec's fork server against the peers.

1. Start-up: seconds from construction to the first step's results (construct, reset, one
   step), then close, for CartPole-v1 at 8 and 32 sub-envs. Contenders: aiovec's process
   backend with its default ``forkserver`` (the first vector env of a process, which starts
   the zygote too, measured in a new interpreter; and a later one, whose fork server the
   zygote forks), ``spawn`` and ``fork``; Gymnasium's ``AsyncVectorEnv``
   with ``fork`` (its default on Linux before Python 3.14) and ``forkserver``; SB3's
   ``SubprocVecEnv`` (``forkserver``, its default).
2. Restart: the extra time of the vector step in which one worker dies (``os._exit``) and is
   restarted under the restart policy, ``forkserver`` against ``spawn`` (16 sub-envs, one per
   worker).

Repeats are interleaved (shuffled within each repeat); tables give medians and ratios of
medians, printed and written to ``benchmarks/results/startup.md``.

    .venv/bin/python benchmarks/startup.py [--repeats N]
"""

from __future__ import annotations

import argparse
import functools
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import anyio
import gymnasium as gym
import numpy as np
from bench_envs import make_cartpole
from harness import arguments, describe, header, interleaved

import aiovec
from aiovec.testing import Fault, FaultyEnv

RESULTS = Path(__file__).resolve().parent / "results" / "startup.md"
SIZES = (8, 32)
BASELINE = "Gymnasium Async (fork)"


def aiovec_first_step(start_method: str, num_envs: int) -> float:
    async def main() -> float:
        started = time.perf_counter()
        async with aiovec.AsyncVectorEnv([make_cartpole] * num_envs, backend="process",
                                         start_method=start_method) as envs:
            await envs.reset(seed=0)
            await envs.step(np.zeros(num_envs, np.int64))
            return time.perf_counter() - started

    return anyio.run(main)


def aiovec_first_in_a_process(num_envs: int) -> float:
    """``aiovec_first_step`` in a new interpreter: its first vector env starts the zygote."""
    finished = subprocess.run([sys.executable, __file__, "--first-in-a-process", str(num_envs)],
                              capture_output=True, text=True, check=True)
    return float(finished.stdout.split()[-1])


def gymnasium_first_step(context: str, num_envs: int) -> float:
    started = time.perf_counter()
    envs = gym.vector.AsyncVectorEnv([make_cartpole] * num_envs, context=context)
    try:
        envs.reset(seed=0)
        envs.step(np.zeros(num_envs, np.int64))
        return time.perf_counter() - started
    finally:
        envs.close()


def sb3_first_step(num_envs: int) -> float:
    # Imported here: forkserver workers re-import this script, and SB3 brings PyTorch.
    from stable_baselines3.common.vec_env import SubprocVecEnv

    started = time.perf_counter()
    envs = SubprocVecEnv([make_cartpole] * num_envs)
    try:
        envs.reset()
        envs.step(np.zeros(num_envs, np.int64))
        return time.perf_counter() - started
    finally:
        envs.close()


CONTENDERS: dict[str, Callable[[int], float]] = {
    "aiovec (forkserver, first in a process)": aiovec_first_in_a_process,
    "aiovec (forkserver)": functools.partial(aiovec_first_step, "forkserver"),
    "aiovec (spawn)": functools.partial(aiovec_first_step, "spawn"),
    "aiovec (fork)": functools.partial(aiovec_first_step, "fork"),
    "Gymnasium Async (fork)": functools.partial(gymnasium_first_step, "fork"),
    "Gymnasium Async (forkserver)": functools.partial(gymnasium_first_step, "forkserver"),
    "SB3 SubprocVecEnv (forkserver)": sb3_first_step,
}


def restart_step(start_method: str, num_envs: int = 16) -> float:
    """Seconds of the step in which one worker exits and is restarted, minus a healthy one."""
    with tempfile.TemporaryDirectory() as ledger:
        fns = [functools.partial(FaultyEnv, index, ledger=ledger,
                                 faults=[Fault("exit", "step", at=5, instance=0)] if index == 0
                                 else ()) for index in range(num_envs)]

        async def main() -> float:
            async with aiovec.AsyncVectorEnv(fns, backend="process", num_workers=num_envs,
                                             start_method=start_method, restart=True) as envs:
                await envs.reset(seed=0)
                times = []
                for _ in range(8):
                    started = time.perf_counter()
                    await envs.step(np.ones(num_envs))
                    times.append(time.perf_counter() - started)
                return times[5] - statistics.median(times[:5] + times[6:])

        return anyio.run(main)


def main() -> None:
    parser = arguments(__doc__, repeats=5)
    parser.add_argument("--first-in-a-process", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.first_in_a_process:  # one measurement, for aiovec_first_in_a_process
        print(aiovec_first_step("forkserver", args.first_in_a_process))
        return
    cells = [(name, size) for size in SIZES for name in CONTENDERS]
    cells += [(f"restart ({method})", 16) for method in ("forkserver", "spawn")]
    results: dict[tuple[str, int], list[float]] = {cell: [] for cell in cells}
    errors: dict[tuple[str, int], str] = {}
    for repeat in range(args.repeats):
        for name, size in interleaved(cells, repeat):
            if (name, size) in errors:
                continue
            try:
                if name.startswith("restart"):
                    seconds = restart_step(name.split("(")[1].rstrip(")"), size)
                else:
                    seconds = CONTENDERS[name](size)
                results[name, size].append(seconds)
            except Exception as error:  # a contender that fails gets an error cell
                errors[name, size] = describe(error)
            print(f"repeat {repeat + 1}/{args.repeats}: {name}, {size}", file=sys.stderr)

    def median(cell: tuple[str, int]) -> float | None:
        return statistics.median(results[cell]) if results[cell] else None

    lines = [*header("Start-up to the first step", f"median of {args.repeats} interleaved runs"),
             f"Start-up to the first step (construct, reset, one step) of CartPole-v1, seconds, "
             f"median of {args.repeats} interleaved runs.", "",
             "| contender | " + " | ".join(f"{size} envs" for size in SIZES)
             + " | " + " | ".join(f"{BASELINE} / contender, {size}" for size in SIZES) + " |",
             "|---|" + "---:|" * (2 * len(SIZES))]
    for name in CONTENDERS:
        row = [errors.get((name, size)) or f"{median((name, size)):.3f}" for size in SIZES]
        for size in SIZES:
            mine, theirs = median((name, size)), median((BASELINE, size))
            row.append(f"{theirs / mine:.2f}x" if mine and theirs else "—")
        lines.append(f"| {name} | " + " | ".join(row) + " |")
    lines += ["", "Extra time of the step in which one of 16 workers dies (`os._exit`) and is "
              "restarted (restart policy):", "", "| start method | extra seconds |", "|---|---:|"]
    for method in ("forkserver", "spawn"):
        cell = (f"restart ({method})", 16)
        value = median(cell)
        lines.append(f"| {method} | {errors.get(cell) or f'{value:.3f}'} |")
    table = "\n".join(lines) + "\n"
    print(table)
    RESULTS.write_text(table)


if __name__ == "__main__":
    main()
