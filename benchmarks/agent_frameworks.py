"""What the agent-framework adapters cost: episodes per second of a framework's own env under
aiovec (``aiovec.skyrl.SkyRLEnv``, ``aiovec.openenv.OpenEnvEnv``) against the framework's own
loop on the same env, interleaved.

- SkyRL-gym: its GSM8K env (one turn, scored by SkyRL's own reward), one env per episode made
  from a dataset row, every reply right. SkyRL's loop is its generator's per-sample loop
  without the model: ``make``, ``init(prompt)``, ``step(reply)``, ``close``, one sample after
  another. aiovec runs 64 sub-envs, each episode's row from ``episode_options``, same-step
  autoreset: the sync shim and ``await`` on the inline backend, ``await`` on the process one.
- OpenEnv: an env written with OpenEnv's server API (``tests/agents/openenv_server.py``, one
  uvicorn process on 127.0.0.1), 32 sessions, each episode a reset with its task then one
  right guess. OpenEnv's loop is a task per session on its async ``GenericEnvClient``
  (``reset``, ``step``, again); aiovec's, ``OpenEnvEnv`` sub-envs on the async backend, in
  lockstep (``step``: each step waits for its slowest session) and first-ready
  (``send``/``recv``: each session on its own, as OpenEnv's loop).

No model runs: what is measured is what each loop adds to the env's own cost (for OpenEnv,
the server's, which both share). Run it in the venv that has both frameworks (``make
.venv-agents/...``, as ``make agents`` does): ``.venv-agents/bin/python
benchmarks/agent_frameworks.py [--repeats 5] [--seconds 3]``; writes
``results/agent_frameworks.md`` after a full run.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode
from harness import arguments, header, median_range, publish, spread_cell

import aiovec
from aiovec.openenv import OpenEnvEnv
from aiovec.skyrl import SkyRLEnv

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "agent_frameworks.md"
SERVER = HERE.parent / "tests" / "agents" / "openenv_server.py"
SKYRL_ENVS, OPENENV_SESSIONS = 64, 32
SKYRL_OWN, OPENENV_OWN = "SkyRL's own loop", "OpenEnv's own loop (a task per session)"


def gsm8k_row(number: int) -> dict[str, Any]:
    return {"prompt": [{"role": "user", "content": f"What is {number} + 0? Output the final "
                        "answer after \"####\"."}],
            "env_class": "gsm8k", "reward_spec": {"method": "rule", "ground_truth": str(number)}}


def reply_to(chat: list[dict[str, Any]]) -> str:
    return f"#### {chat[0]['content'].split()[2]}"


def skyrl_own(seconds: float) -> float:
    """Episodes per second of SkyRL's per-sample loop (the generator's, without a model)."""
    import skyrl_gym

    episodes, started = 0, time.perf_counter()
    for number in itertools.count():
        row = gsm8k_row(number)
        extras = {key: value for key, value in row.items() if key not in ("prompt", "env_class")}
        env = skyrl_gym.make(row["env_class"], env_config=None, extras=extras)
        chat, _ = env.init(list(row["prompt"]))
        output = env.step(reply_to(chat))
        assert output["done"]
        assert output["reward"] == 1.0
        env.close()
        episodes += 1
        if episodes % 64 == 0 and time.perf_counter() - started >= seconds:
            break
    return episodes / (time.perf_counter() - started)


def _rows() -> Callable[[int], dict[str, Any]]:
    numbers = itertools.count()
    return lambda env_index: gsm8k_row(next(numbers))


def _count(rewards: np.ndarray, terminations: np.ndarray) -> int:
    assert terminations.all()
    assert (rewards == 1.0).all()
    return len(rewards)


def skyrl_shim(seconds: float) -> float:
    with aiovec.VectorEnv([SkyRLEnv] * SKYRL_ENVS, backend="inline", episode_options=_rows(),
                          autoreset_mode=AutoresetMode.SAME_STEP) as envs:
        chats, _ = envs.reset(seed=0)
        episodes, started = 0, time.perf_counter()
        while time.perf_counter() - started < seconds:
            chats, rewards, terminations, _, _ = envs.step([reply_to(chat) for chat in chats])
            episodes += _count(rewards, terminations)
        return episodes / (time.perf_counter() - started)


async def _skyrl_await(seconds: float, backend: str) -> float:
    async with aiovec.AsyncVectorEnv([SkyRLEnv] * SKYRL_ENVS, backend=backend,
                                     episode_options=_rows(),
                                     autoreset_mode=AutoresetMode.SAME_STEP) as envs:
        chats, _ = await envs.reset(seed=0)
        for _ in range(3):  # warm: the workers' first imports
            chats, *_ = await envs.step([reply_to(chat) for chat in chats])
        episodes, started = 0, time.perf_counter()
        while time.perf_counter() - started < seconds:
            chats, rewards, terminations, _, _ = await envs.step(
                [reply_to(chat) for chat in chats])
            episodes += _count(rewards, terminations)
        return episodes / (time.perf_counter() - started)


def skyrl_await(seconds: float, backend: str) -> float:
    return asyncio.run(_skyrl_await(seconds, backend))


async def _openenv_own(seconds: float, url: str) -> float:
    from openenv.core.generic_client import GenericEnvClient

    episodes = 0
    tasks = itertools.count()
    started = time.perf_counter()

    async def session() -> None:
        nonlocal episodes
        client = GenericEnvClient(base_url=url)
        try:
            while time.perf_counter() - started < seconds:
                result = await client.reset(task=next(tasks))
                result = await client.step({"guess": result.observation["task"]})
                assert result.done
                assert result.reward == 1.0
                episodes += 1
        finally:
            await client.close()

    await asyncio.gather(*(session() for _ in range(OPENENV_SESSIONS)))
    return episodes / (time.perf_counter() - started)


def _openenv_envs(url: str) -> aiovec.AsyncVectorEnv:
    """``OpenEnvEnv`` sub-envs, a session each, every episode its own task."""
    numbers = itertools.count()
    return aiovec.AsyncVectorEnv(
        [functools.partial(OpenEnvEnv, url)] * OPENENV_SESSIONS, backend="async",
        episode_options=lambda env_index: {"task": next(numbers)},
        autoreset_mode=AutoresetMode.SAME_STEP)


async def _openenv_aiovec(seconds: float, url: str) -> float:
    async with _openenv_envs(url) as envs:
        obs, _ = await envs.reset()
        episodes, started = 0, time.perf_counter()
        while time.perf_counter() - started < seconds:
            obs, rewards, terminations, _, _ = await envs.step(
                [{"guess": row["task"]} for row in obs])
            episodes += _count(rewards, terminations)
        return episodes / (time.perf_counter() - started)


async def _openenv_first_ready(seconds: float, url: str) -> float:
    """Each session on its own: a row's next guess goes out as soon as its result lands."""
    async with _openenv_envs(url) as envs:
        obs, _ = await envs.reset()
        envs.send([{"guess": row["task"]} for row in obs])
        episodes, started = 0, time.perf_counter()
        while time.perf_counter() - started < seconds:
            batch = await envs.recv(min_size=1)
            episodes += _count(batch.rewards, batch.terminations)
            envs.send([{"guess": row["task"]} for row in batch.observations], batch.env_ids)
        rate = episodes / (time.perf_counter() - started)
        await envs.recv(batch_size=OPENENV_SESSIONS)  # what is still out
        return rate


def openenv_own(seconds: float, url: str) -> float:
    return asyncio.run(_openenv_own(seconds, url))


def openenv_aiovec(seconds: float, url: str) -> float:
    return asyncio.run(_openenv_aiovec(seconds, url))


def openenv_first_ready(seconds: float, url: str) -> float:
    return asyncio.run(_openenv_first_ready(seconds, url))


def start_server(ledger: str) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen([sys.executable, str(SERVER), ledger], stdout=subprocess.PIPE,
                               text=True)
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line.startswith("PORT "):
        process.kill()
        raise SystemExit(f"the OpenEnv server did not start: {line!r}")
    url = f"http://127.0.0.1:{line.split()[1]}"
    import httpx

    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                return process, url
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.1)


def main() -> None:
    parser = arguments(__doc__, repeats=5, seconds=3.0, quick="1 repeat of 0.5 s each",
                       output=RESULTS)
    args = parser.parse_args()
    repeats, seconds = (1, 0.5) if args.quick else (args.repeats, args.seconds)
    with tempfile.TemporaryDirectory() as ledger:
        server, url = start_server(ledger)
        try:
            groups: dict[str, dict[str, Callable[[], float]]] = {
                "SkyRL-gym GSM8K": {
                    SKYRL_OWN: functools.partial(skyrl_own, seconds),
                    "aiovec shim, inline": functools.partial(skyrl_shim, seconds),
                    "aiovec await, inline": functools.partial(skyrl_await, seconds, "inline"),
                    "aiovec await, process": functools.partial(skyrl_await, seconds,
                                                               "process"),
                },
                "OpenEnv (a served env)": {
                    OPENENV_OWN: functools.partial(openenv_own, seconds, url),
                    "aiovec step (lockstep), async": functools.partial(openenv_aiovec, seconds,
                                                                       url),
                    "aiovec send/recv (first-ready), async": functools.partial(
                        openenv_first_ready, seconds, url),
                },
            }
            samples = {name: [] for group in groups.values() for name in group}
            for repeat in range(repeats):  # interleaved: drift hits every contender alike
                for group in groups.values():
                    for name, measure in group.items():
                        samples[name].append(measure())
                print(f"  repeat {repeat + 1}/{repeats} done", flush=True)
        finally:
            server.terminate()
            server.wait(30)
    lines = header("What the agent-framework adapters cost",
                   f"{repeats} interleaved repeats of {seconds:g} s per contender; episodes "
                   "per second, median (min-max); the ratio to the framework's own loop is "
                   "the median of the per-repeat ratios",
                   packages=("openenv-core", "skyrl-gym"))
    for title, group in groups.items():
        own = next(iter(group))
        lines += [f"## {title}", "", "| contender | episodes/s | vs its own loop | spread |",
                  "|---|---:|---:|---:|"]
        for name in group:
            ratios = [value / base for value, base in zip(samples[name], samples[own])]
            lines.append(f"| {name} | {median_range(samples[name], digits=0)} | "
                         f"{statistics.median(ratios):.2f}x | {spread_cell(ratios)} |")
        lines.append("")
    lines += ["## Notes", "",
              f"- SkyRL-gym: {SKYRL_ENVS} sub-envs; its own loop runs one sample at a time, "
              "as its generator's per-sample coroutine does between model calls.",
              f"- OpenEnv: {OPENENV_SESSIONS} sessions on one server process; both loops "
              "wait on it, so the ratio shows what aiovec adds on the client side."]
    publish("\n".join(lines), args.output, RESULTS, args.quick)


if __name__ == "__main__":
    main()
