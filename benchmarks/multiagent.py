"""Multi-agent vectorization: aiovec against AgileRL's PettingZoo vector env and a serial loop.

Workloads: 16 sub-envs of MPE2's ``simple_spread_v3`` (3 agents, ~0.5 ms a step) and of
PettingZoo's ``knights_archers_zombies_v11`` (4 agents that zombies kill, ~1.5 ms a step),
random actions for every agent present.
Contenders:

- ``serial loop``: the 16 ``ParallelEnv`` stepped one after another in this process, with
  next-step autoreset (what aiovec's results are checked against);
- ``aiovec process (async)``: ``await AsyncParallelVectorEnv.step`` on uvloop, one worker per
  core, results in shared memory;
- ``aiovec process (sync)``: the ``ParallelVectorEnv`` shim, the same engine from plain code;
- ``AgileRL AsyncPettingZooVecEnv``: one subprocess per sub-env (when ``agilerl`` imports).

Run it (about 2 minutes)::

    .venv/bin/python benchmarks/multiagent.py [--quick] [--repeats N] [--seconds S]

AgileRL pulls PyTorch, so it is not in aiovec's dev extra: install ``agilerl`` into the
interpreter you run this with to include it (the table says when it was absent).

Method: as ``run.py``: each measurement builds its contender, resets it, warms it up, steps it
for ``--seconds`` of wall time and closes it; repeats are interleaved (shuffled within each
repeat); the table gives medians over repeats and ratios of medians. Output: a markdown
table, printed and written to ``benchmarks/results/multiagent.md``.
"""

from __future__ import annotations

import functools
import importlib
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pettingzoo
from gymnasium.vector.utils import batch_space
from harness import Plan, arguments, describe, header, interleaved, stamped, stamped_async

import aiovec

RESULTS = Path(__file__).resolve().parent / "results" / "multiagent.md"
NUM_ENVS = 16

SERIAL = "serial loop"
ASYNC = "aiovec process (async)"
SYNC = "aiovec process (sync)"
AGILERL = "AgileRL AsyncPettingZooVecEnv"
CONTENDERS = (SERIAL, ASYNC, SYNC, AGILERL)


def _mpe2(name: str, **kwargs: Any) -> Any:
    return importlib.import_module(f"mpe2.{name}").parallel_env(**kwargs)


def _knights_archers_zombies(**kwargs: Any) -> Any:
    """PettingZoo's registry (1.27+), else the module of the release AgileRL pins (1.26)."""
    if hasattr(pettingzoo, "make"):
        return pettingzoo.make("parallel", "butterfly/knights_archers_zombies-v11", **kwargs)
    from pettingzoo.butterfly import knights_archers_zombies_v10
    return knights_archers_zombies_v10.parallel_env(**kwargs)


WORKLOADS: dict[str, Callable[[], Any]] = {
    "MPE2 simple_spread (3 agents)": functools.partial(_mpe2, "simple_spread_v3",
                                                       max_cycles=25),
    "Butterfly knights_archers_zombies (4 agents, some die)": functools.partial(
        _knights_archers_zombies, max_cycles=200),
}


def action_batches(factory: Callable[[], Any], count: int = 64) -> list[dict[str, Any]]:
    """``count`` batches of random actions, one per agent, ``(NUM_ENVS, ...)`` each."""
    env = factory()
    spaces = {agent: batch_space(env.action_space(agent), NUM_ENVS)
              for agent in env.possible_agents}
    env.close()
    for offset, space in enumerate(spaces.values()):
        space.seed(offset)
    return [{agent: space.sample() for agent, space in spaces.items()} for _ in range(count)]


def serial(factory: Callable[[], Any], actions: list[dict[str, Any]], plan: Plan) -> list[float]:
    envs = [factory() for _ in range(NUM_ENVS)]
    for index, env in enumerate(envs):
        env.reset(seed=index)
    needs_reset = [False] * NUM_ENVS

    def step(batch: dict[str, Any]) -> None:
        for index, env in enumerate(envs):
            if needs_reset[index]:
                env.reset()
                needs_reset[index] = False
                continue
            env.step({agent: batch[agent][index] for agent in env.agents})
            needs_reset[index] = not env.agents

    try:
        return stamped(step, actions, plan)
    finally:
        for env in envs:
            env.close()


def aiovec_async(factory: Callable[[], Any], actions: list[dict[str, Any]],
                 plan: Plan) -> list[float]:
    async def main() -> list[float]:
        async with aiovec.AsyncParallelVectorEnv([factory] * NUM_ENVS,
                                                 backend="process") as envs:
            await envs.reset(seed=0)
            return await stamped_async(envs.step, actions, plan)

    stamps: list[float] = anyio.run(main, backend="asyncio",
                                    backend_options={"use_uvloop": True})
    return stamps


def aiovec_sync(factory: Callable[[], Any], actions: list[dict[str, Any]],
                plan: Plan) -> list[float]:
    with aiovec.ParallelVectorEnv([factory] * NUM_ENVS, backend="process") as envs:
        envs.reset(seed=0)
        return stamped(envs.step, actions, plan)


def agilerl(factory: Callable[[], Any], actions: list[dict[str, Any]],
            plan: Plan) -> list[float]:
    from agilerl.vector.pz_async_vec_env import AsyncPettingZooVecEnv

    envs = AsyncPettingZooVecEnv([factory] * NUM_ENVS)
    try:
        envs.reset(seed=0)
        return stamped(envs.step, actions, plan)
    finally:
        envs.close()


RUNNERS = {SERIAL: serial, ASYNC: aiovec_async, SYNC: aiovec_sync, AGILERL: agilerl}


def agilerl_version() -> str | None:
    try:
        from importlib.metadata import version
        return version("agilerl")
    except Exception:
        return None


def main() -> None:
    args = arguments(__doc__, repeats=3, seconds=1.5, quick="1 repeat of 0.3 s",
                     output=RESULTS).parse_args()
    repeats, seconds = (1, 0.3) if args.quick else (args.repeats, args.seconds)
    plan = Plan(seconds=seconds, warmup_steps=20, warmup_seconds=min(1.0, seconds),
                min_steps=5)
    with_agilerl = agilerl_version()
    contenders = [name for name in CONTENDERS if name != AGILERL or with_agilerl]
    actions = {workload: action_batches(factory) for workload, factory in WORKLOADS.items()}

    started = time.perf_counter()
    cells = [(workload, contender) for workload in WORKLOADS for contender in contenders]
    samples: dict[tuple[str, str], list[float]] = {}
    errors: dict[tuple[str, str], str] = {}
    for repeat in range(repeats):
        for cell in interleaved(cells, repeat):
            if cell in errors:
                continue
            workload, contender = cell
            try:
                stamps = RUNNERS[contender](WORKLOADS[workload], actions[workload], plan)
                samples.setdefault(cell, []).append((len(stamps) - 1) / (stamps[-1] - stamps[0]))
            except Exception as error:
                errors[cell] = describe(error)
            print(f"repeat {repeat + 1}/{repeats}: {workload}, {contender}", file=sys.stderr)

    lines = [
        *header(f"Multi-agent: {NUM_ENVS} PettingZoo envs, aiovec vs AgileRL vs a serial loop",
                f"median of {repeats} interleaved repeats, {seconds} s of stepping each; vector "
                "steps/s (each steps all 16 sub-envs, every agent); ratios of medians",
                packages=("pettingzoo",),
                more=[f"agilerl {with_agilerl or 'not installed'}",
                      f"total runtime: {time.perf_counter() - started:.0f} s"]),
        "| workload | contender | vector steps/s | agent-steps/s | vs serial | vs AgileRL |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for workload, factory in WORKLOADS.items():
        env = factory()
        agents = len(env.possible_agents)
        env.close()
        medians = {contender: statistics.median(samples[(workload, contender)])
                   for contender in contenders if (workload, contender) in samples}
        for contender in contenders:
            if (workload, contender) in errors:
                lines.append(f"| {workload} | {contender} | error: "
                             f"{errors[(workload, contender)]} | | | |")
                continue
            rate = medians[contender]
            versus = [f"{rate / medians[base]:.2f}x" if base in medians else "n/a"
                      for base in (SERIAL, AGILERL)]
            lines.append(f"| {workload} | {contender} | {rate:,.0f} | "
                         f"{rate * NUM_ENVS * agents:,.0f} | {versus[0]} | {versus[1]} |")
    text = "\n".join(lines) + "\n"
    print(text)
    args.output.write_text(text)


if __name__ == "__main__":
    main()
