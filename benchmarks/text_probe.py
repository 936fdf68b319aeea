"""The text probe: 4,096 coroutine envs with wide-charset ``Text`` spaces, stepped first-ready
into a simulated batched policy, aiovec against a bare asyncio loop.

Workload: ``ToolEnv`` (an ``aiovec.AsyncEnv``) has ``Text(max_length=4096)`` observation and
action spaces over a 700-character Unicode charset; an episode lasts 1-16 turns (uniform), and
each step awaits a simulated tool call: a lognormal sleep, median 50 ms, sigma 1 (capped at
2 s). The policy is a coroutine that answers up to ``B`` = 256 requests in 10 ms + 0.1 ms
each. Every turn is one policy answer and one tool call.

Contenders, each on one asyncio event loop in this process:

- **bare asyncio loop**: a task per episode slot (4,096) runs episodes one after another: it
  puts its observation on a queue, awaits the policy's action, awaits the env's step; one
  policy task takes what is queued, up to ``B`` (waiting for at least one), and answers each.
- **aiovec**: ``AsyncVectorEnv(backend="async", autoreset_mode="SameStep")``, every sub-env
  sent an action, then ``recv(batch_size=B)`` -> the policy -> ``send(actions, env_ids)``.
  ``SameStep``: an episode's last step returns the next episode's first observation, as the
  bare loop resets at once. With Gymnasium's default ``NextStep`` (measured too, for
  reference) each episode costs one more policy answer: the step that resets it.

Measured: episodes/s over ``--seconds`` after ``--warmup`` seconds (the pipeline full), in
``--repeats`` interleaved repeats: medians, spread ((max - min) / median) and aiovec / bare
within each repeat. aiovec's start-up (make 4,096 sub-envs, reset them) is timed too.

The engine's own CPU per turn: the same two loops with no latency at all (a tool call and a
policy answer return at once), CPU seconds of this process per agent turn: the bare loop's is
what any asyncio orchestration pays; aiovec's minus it is what the engine adds.

Run: ``.venv/bin/python benchmarks/text_probe.py [--quick] [--repeats 3] [--seconds 10]``;
writes ``results/text_probe.md``. It ends with the target as a PASS/MISS line.
"""

from __future__ import annotations

import asyncio
import math
import os
import random
import resource
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gymnasium.spaces import Discrete, Text
from harness import Check, arguments, header, interleaved, median_range, spread_cell

import aiovec

RESULTS = Path(__file__).resolve().parent / "results" / "text_probe.md"
NUM_ENVS = 4096
BATCH = 256  # the policy's largest batch, and recv's batch_size
CHARSET = "".join(chr(code) for code in range(0x20, 0x20 + 700))
SPACE = Text(max_length=4096, charset=CHARSET)
TOOL_MEDIAN, TOOL_SIGMA, TOOL_CAP = 0.050, 1.0, 2.0
POLICY_FIXED, POLICY_PER_REQUEST = 0.010, 0.0001
TURNS_PER_EPISODE = 8.5  # 1-16, uniform
TARGET = 0.95  # aiovec / bare loop, episodes/s


@dataclass(frozen=True)
class Latency:
    """How long a tool call and a policy answer take (``None``: no wait at all)."""

    tool: bool

    def tool_seconds(self, rng: random.Random) -> float:
        return min(rng.lognormvariate(math.log(TOOL_MEDIAN), TOOL_SIGMA), TOOL_CAP)

    async def policy(self, count: int) -> None:
        """Answer ``count`` requests (the actions are the env class's ``answers``)."""
        if self.tool:
            await asyncio.sleep(POLICY_FIXED + POLICY_PER_REQUEST * count)


SIMULATED, NO_LATENCY = Latency(tool=True), Latency(tool=False)


class ToolEnv(aiovec.AsyncEnv[str, str]):
    """A multi-turn episode whose every step awaits a tool call (or returns at once)."""

    observation_space = SPACE
    action_space = SPACE

    def __init__(self, latency: Latency = SIMULATED) -> None:
        self.latency = latency
        self.rng = random.Random()
        self.turns = 0

    async def reset(self, *, seed: int | None = None,
                    options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        if seed is not None:
            self.rng.seed(seed)
        self.turns = self.rng.randint(1, 16)
        return "hello", {}

    async def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self.latency.tool:
            await asyncio.sleep(self.latency.tool_seconds(self.rng))
        self.turns -= 1
        return "tool says " + action[:20], 1.0, self.turns <= 0, False, {}

    @staticmethod
    def answers(count: int) -> Any:
        """The policy's actions for ``count`` requests."""
        return ("act",) * count


class ArrayToolEnv(ToolEnv):
    """``ToolEnv`` with ``Discrete`` spaces: what the engine costs per turn with arrays."""

    observation_space = Discrete(1000)  # type: ignore[assignment]
    action_space = Discrete(2)  # type: ignore[assignment]

    async def reset(self, *, seed: int | None = None,
                    options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        _, info = await super().reset(seed=seed, options=options)
        return 0, info

    async def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        _, *rest = await super().step("")
        return self.turns, *rest  # type: ignore[return-value]

    @staticmethod
    def answers(count: int) -> Any:
        return np.zeros(count, np.int64)


@dataclass
class Run:
    """What one measurement counted over its window."""

    episodes: int = 0
    turns: int = 0
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    startup: float | None = None
    load: float = 0.0  # the 1-minute load average as the window closed

    @property
    def episodes_per_second(self) -> float:
        return self.episodes / self.seconds

    @property
    def cpu_per_turn(self) -> float:
        return self.cpu_seconds / self.turns


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class Window:
    """Counts episodes and turns from ``warmup`` seconds on, for ``seconds``."""

    def __init__(self, warmup: float, seconds: float) -> None:
        now = time.perf_counter()
        self.start, self.end = now + warmup, now + warmup + seconds
        self.run = Run()
        self.counting = False
        self.cpu_start = 0.0

    def tick(self, episodes: int, turns: int) -> bool:
        """Count a batch (once the window opened) → whether the window is still open."""
        now = time.perf_counter()
        if not self.counting:
            if now < self.start:
                return True
            self.counting, self.start, self.cpu_start = True, now, _cpu()
            return True
        self.run.episodes += episodes
        self.run.turns += turns
        if now < self.end:
            return True
        self.run.seconds, self.run.cpu_seconds = now - self.start, _cpu() - self.cpu_start
        self.run.load = os.getloadavg()[0]
        return False


async def bare_loop(latency: Latency, warmup: float, seconds: float) -> Run:
    """A task per episode slot and a queue batching their requests for the policy."""
    window = Window(warmup, seconds)
    requests: asyncio.Queue[tuple[str, asyncio.Future[str]]] = asyncio.Queue()
    loop = asyncio.get_running_loop()
    ended = [0]

    async def slot(index: int) -> None:
        env = ToolEnv(latency)
        observation, _ = await env.reset(seed=index)
        while True:
            answer: asyncio.Future[str] = loop.create_future()
            requests.put_nowait((observation, answer))
            action = await answer
            observation, _, terminated, truncated, _ = await env.step(action)
            if terminated or truncated:
                ended[0] += 1
                observation, _ = await env.reset()

    async def serve_policy() -> None:
        while True:
            batch = [await requests.get()]
            while len(batch) < BATCH and not requests.empty():
                batch.append(requests.get_nowait())
            await latency.policy(len(batch))
            for (_, answer), action in zip(batch, ToolEnv.answers(len(batch))):
                answer.set_result(action)
            episodes, ended[0] = ended[0], 0
            if not window.tick(episodes, len(batch)):
                return

    slots = [asyncio.create_task(slot(index)) for index in range(NUM_ENVS)]
    try:
        await serve_policy()
    finally:
        for task in slots:
            task.cancel()
        await asyncio.gather(*slots, return_exceptions=True)
    return window.run


async def aiovec_loop(latency: Latency, warmup: float, seconds: float,
                      autoreset_mode: str = "SameStep", env: type[ToolEnv] = ToolEnv) -> Run:
    """``recv(batch_size=B)`` -> the policy -> ``send``, on the async backend."""
    started = time.perf_counter()
    async with aiovec.AsyncVectorEnv([lambda: env(latency)] * NUM_ENVS, backend="async",
                                     autoreset_mode=autoreset_mode) as envs:
        await envs.reset(seed=0)
        startup = time.perf_counter() - started
        await latency.policy(NUM_ENVS)
        envs.send(env.answers(NUM_ENVS))
        window = Window(warmup, seconds)
        while True:
            _, _, terminations, _, _, env_ids = await envs.recv(batch_size=BATCH)
            await latency.policy(len(env_ids))
            envs.send(env.answers(len(env_ids)), env_ids)
            if not window.tick(int(terminations.sum()), len(env_ids)):
                break
    window.run.startup = startup
    return window.run


Contender = Callable[[Latency, float, float], Awaitable[Run]]
BARE = "bare asyncio loop"
AIOVEC = "aiovec async, recv(256), SameStep"
AIOVEC_NEXT = "aiovec async, recv(256), NextStep (one more policy answer per episode)"
AIOVEC_ARRAYS = "aiovec async, recv(256), SameStep, Discrete spaces instead of Text"


def contenders() -> dict[str, Contender]:
    async def next_step(latency: Latency, warmup: float, seconds: float) -> Run:
        return await aiovec_loop(latency, warmup, seconds, "NextStep")

    async def arrays(latency: Latency, warmup: float, seconds: float) -> Run:
        return await aiovec_loop(latency, warmup, seconds, env=ArrayToolEnv)

    return {BARE: bare_loop, AIOVEC: aiovec_loop, AIOVEC_NEXT: next_step,
            AIOVEC_ARRAYS: arrays}


def measure(contender: Contender, latency: Latency, warmup: float, seconds: float) -> Run:
    return asyncio.run(contender(latency, warmup, seconds))


def main() -> None:
    parser = arguments(__doc__, repeats=5, seconds=8.0, output=RESULTS,
                       quick="1 repeat of 3 s windows")
    parser.add_argument("--warmup", type=float, default=3.0,
                        help="seconds before each window opens (default 3)")
    args = parser.parse_args()
    if args.quick:
        args.repeats, args.seconds, args.warmup = 1, 3.0, 2.0
    load_before = os.getloadavg()[0]
    runs: dict[str, list[Run]] = {name: [] for name in contenders()}
    cpu_runs: dict[str, list[Run]] = {BARE: [], AIOVEC: [], AIOVEC_ARRAYS: []}
    for repeat in range(args.repeats):
        for name, contender in interleaved(contenders().items(), repeat):
            if name == AIOVEC_ARRAYS:
                continue
            runs[name].append(measure(contender, SIMULATED, args.warmup, args.seconds))
            print(f"repeat {repeat}: {name}: "
                  f"{runs[name][-1].episodes_per_second:.0f} episodes/s", file=sys.stderr)
        for name in interleaved(cpu_runs, repeat):
            cpu_runs[name].append(measure(contenders()[name], NO_LATENCY, 1.0,
                                          args.seconds / 2))
    lines = report(runs, cpu_runs, args, load_before)
    text = "\n".join(lines) + "\n"
    print(text)
    args.output.write_text(text)
    print(f"written to {args.output}", file=sys.stderr)


def report(runs: dict[str, list[Run]], cpu_runs: dict[str, list[Run]], args: Any,
           load_before: float) -> list[str]:
    bare = [run.episodes_per_second for run in runs[BARE]]
    ratios = [run.episodes_per_second / base for run, base in zip(runs[AIOVEC], bare)]
    limit = BATCH / (POLICY_FIXED + POLICY_PER_REQUEST * BATCH) / TURNS_PER_EPISODE
    lines = header(
        "Text probe: 4,096 Text envs, first-ready into a batched policy",
        f"{args.repeats} interleaved repeats, {args.seconds:g} s windows after "
        f"{args.warmup:g} s of warm-up, asyncio",
        more=[f"load average (1 min) {load_before:.2f} before the run",
              f"policy-bound limit: {limit:.0f} episodes/s ({BATCH} turns per "
              f"{(POLICY_FIXED + POLICY_PER_REQUEST * BATCH) * 1e3:.1f} ms, "
              f"{TURNS_PER_EPISODE:g} turns per episode on average)"])
    lines += ["## Episodes per second", "",
              "| contender | episodes/s, median (min-max) | spread | vs bare loop, median "
              "(min-max) of repeats | start-up (s) | load |", "|---|---:|---:|---:|---:|---:|"]
    for name, measured in runs.items():
        if name == AIOVEC_ARRAYS:
            continue
        rates = [run.episodes_per_second for run in measured]
        per_repeat = [rate / base for rate, base in zip(rates, bare)]
        startups = [run.startup for run in measured if run.startup is not None]
        lines.append(f"| {name} | {median_range(rates, digits=0)} | {spread_cell(rates)} | "
                     f"{median_range(per_repeat, digits=2)} | "
                     f"{median_range(startups, digits=2) if startups else '—'} | "
                     f"{statistics.median(run.load for run in measured):.1f} |")
    lines += ["", "## The engine's own CPU per turn (no tool or policy latency)", "",
              "| contender | turns/s | CPU µs per turn, median (min-max) |", "|---|---:|---:|"]
    for name, measured in cpu_runs.items():
        rate = statistics.median(run.turns / run.seconds for run in measured)
        lines.append(f"| {name} | {rate:,.0f} | "
                     f"{median_range([run.cpu_per_turn for run in measured], 1e6)} |")
    added = [ours.cpu_per_turn - base.cpu_per_turn
             for ours, base in zip(cpu_runs[AIOVEC], cpu_runs[BARE])]
    lines += ["", f"What aiovec adds per turn (paired within each repeat): "
              f"{median_range(added, 1e6)} µs of CPU.", "", "## Targets (reported, never "
              "asserted)", "", "```",
              Check("text probe: aiovec recv(256) / bare asyncio loop, episodes/s",
                    statistics.median(ratios), TARGET, per_repeat=ratios).line(), "```"]
    return lines


if __name__ == "__main__":
    main()
