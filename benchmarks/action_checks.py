"""What ``validate_actions=True`` costs: the check of every action against the action space.

Two views, each the median of interleaved repeats with the spread (min-max) across them:

- the check alone: ``ActionChecker.check`` per batch for a few spaces and batch sizes, with and
  without the value check (the shape and dtype checks always run);
- end to end: ``await envs.step`` of CartPole-v1 on the inline backend (nothing but the step
  itself, so the check's share is as large as it gets), 16 and 256 sub-envs;
- per step at 32 sub-envs: CartPole-v1 and a do-nothing env with a ``Box(-1, 1, (6,))`` action
  space, inline, with and without ``validate_actions``, in CPU time, in alternating blocks
  (medians; the spread is the block-by-block ratio's quartiles); "time vs no validation" is
  the ratio within one run that ``compare.py`` compares between two checkouts
  (``--same-script``).

    python benchmarks/action_checks.py [--repeats 7] [--output FILE]
"""

from __future__ import annotations

import functools
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import batch_space
from harness import arguments, header, median_range

import aiovec
from aiovec._core._actions import ActionChecker

RESULTS = Path(__file__).resolve().parent / "results" / "action_checks.md"
SPACES: dict[str, spaces.Space[Any]] = {
    "Discrete(2)": spaces.Discrete(2),
    "Box(-1, 1, (6,))": spaces.Box(-1, 1, (6,), np.float32),
    "MultiDiscrete([3]*4)": spaces.MultiDiscrete([3] * 4),
    "Dict(Discrete, Box)": spaces.Dict({"move": spaces.Discrete(5),
                                        "aim": spaces.Box(-1, 1, (2,), np.float32)}),
}


def per_call(function: Callable[[], object], seconds: float = 0.2) -> float:
    """Microseconds per call, over at least ``seconds``."""
    calls, started = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - started) < seconds:
        for _ in range(100):
            function()
        calls += 100
    return elapsed / calls * 1e6


class BoxEnv(gym.Env[np.ndarray, np.ndarray]):
    """Nothing but a ``Box(-1, 1, (6,))`` action space: the step costs next to nothing, so the
    check's share of it shows."""

    action_space = spaces.Box(-1, 1, (6,), np.float32)
    observation_space = spaces.Box(-1, 1, (6,), np.float32)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        return np.zeros(6, np.float32), {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        return np.zeros(6, np.float32), 0.0, False, False, {}


#: The per-step rows: a sub-env factory and a batch of 32 actions inside its action space.
PER_STEP: dict[str, tuple[Callable[[], gym.Env[Any, Any]], np.ndarray]] = {
    "CartPole-v1 x 32": (lambda: gym.make("CartPole-v1"), np.zeros(32, np.int64)),
    "Box(-1, 1, (6,)) x 32": (BoxEnv, np.full((32, 6), 0.5, np.float32)),
}


def summary(samples: list[float]) -> str:
    return median_range(samples)


def ratio(slow: list[float], fast: list[float]) -> str:
    ratios = [a / b for a, b in zip(slow, fast)]
    return f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})"


def check_alone(repeats: int) -> list[str]:
    rows = ["| space | sub-envs | shape+dtype check, µs | + value check, µs | ratio |",
            "|---|---|---|---|---|"]
    for name, space in SPACES.items():
        for num_envs in (16, 1024):
            batched = batch_space(space, num_envs)
            batched.seed(0)
            actions = batched.sample()
            plain, valued = ActionChecker(space, num_envs), ActionChecker(space, num_envs, True)
            off: list[float] = []
            on: list[float] = []
            for _ in range(repeats):  # interleaved: a noisy moment hits both
                off.append(per_call(functools.partial(plain.check, actions)))
                on.append(per_call(functools.partial(valued.check, actions)))
            rows.append(f"| {name} | {num_envs} | {summary(off)} | {summary(on)} | "
                        f"{ratio(on, off)} |")
    return rows


async def step_time(num_envs: int, validate: bool, steps: int = 300) -> float:
    """Microseconds per ``await envs.step`` of ``num_envs`` CartPoles on the inline backend."""
    factories = [lambda: gym.make("CartPole-v1")] * num_envs
    actions = np.zeros(num_envs, dtype=np.int64)
    async with aiovec.AsyncVectorEnv(factories, backend="inline",
                                     validate_actions=validate) as envs:
        await envs.reset(seed=0)
        for _ in range(20):
            await envs.step(actions)
        started = time.perf_counter()
        for _ in range(steps):
            await envs.step(actions)
        return (time.perf_counter() - started) / steps * 1e6


async def alternating(make: Callable[[], gym.Env[Any, Any]], actions: np.ndarray,
                      blocks: int, steps: int = 30) -> tuple[list[float], list[float]]:
    """CPU microseconds per step, without and with ``validate_actions``: two vector envs
    side by side on the inline backend (which steps in this thread, so other processes'
    time is not counted), stepped in alternating blocks of ``steps`` (the order swapped
    every block), so a machine's drift hits both alike."""
    factories = [make] * len(actions)
    samples: tuple[list[float], list[float]] = ([], [])
    async with aiovec.AsyncVectorEnv(factories, backend="inline") as off, \
            aiovec.AsyncVectorEnv(factories, backend="inline", validate_actions=True) as on:
        for envs in (off, on):
            await envs.reset(seed=0)
            for _ in range(20):
                await envs.step(actions)
        for block in range(blocks):
            for index in (0, 1) if block % 2 == 0 else (1, 0):
                envs = (off, on)[index]
                started = time.process_time()
                for _ in range(steps):
                    await envs.step(actions)
                samples[index].append((time.process_time() - started) / steps * 1e6)
    return samples


def end_to_end(repeats: int) -> list[str]:
    rows = ["| CartPole-v1, inline | µs per step | with validate_actions, µs | ratio |",
            "|---|---|---|---|"]
    for num_envs in (16, 256):
        off: list[float] = []
        on: list[float] = []
        for _ in range(repeats):
            off.append(anyio.run(step_time, num_envs, False))
            on.append(anyio.run(step_time, num_envs, True))
        rows.append(f"| {num_envs} sub-envs | {summary(off)} | {summary(on)} | "
                    f"{ratio(on, off)} |")
    return rows


def per_step(repeats: int) -> list[str]:
    rows = ["## Per step, 32 sub-envs, CPU time", "",
            "| inline, 32 sub-envs | µs per step | with validate_actions, µs | check, µs per step "
            "| time vs no validation | spread |", "|---|---|---|---|---|---|"]
    for name, (make, actions) in PER_STEP.items():
        off, on = anyio.run(alternating, make, actions, 20 * repeats)
        ratios = [a / b for a, b in zip(on, off)]  # block by block
        cost = statistics.median(on) - statistics.median(off)
        quartiles = statistics.quantiles(ratios, n=4)
        rows.append(f"| {name} | {summary(off)} | {summary(on)} | {cost:.1f} | "
                    f"{statistics.median(on) / statistics.median(off):.3f}x | "
                    f"{quartiles[0]:.3f}-{quartiles[2]:.3f} |")
    return rows


def main() -> None:
    parser = arguments(__doc__, repeats=7, output=RESULTS)
    parser.add_argument("--per-step-only", action="store_true",
                        help="only the per-step rows at 32 sub-envs")
    args = parser.parse_args()
    report = [
        *header("validate_actions: what the value check costs",
                f"median of {args.repeats} interleaved repeats (min-max)"),
        *([] if args.per_step_only else [*check_alone(args.repeats), "",
                                         *end_to_end(args.repeats), ""]),
        *per_step(args.repeats),
        "",
    ]
    text = "\n".join(report)
    print(text)
    args.output.write_text(text)
    print(f"written to {args.output}", file=sys.stderr)


if __name__ == "__main__":
    main()
