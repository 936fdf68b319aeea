"""The per-request loop: one request per row to a server that batches continuously (as an
OpenAI-compatible vLLM or SGLang server does), each row's action sent the moment its reply
lands, with aiovec's guarantees (a deadline per call, restarts, every episode counted).

``envs.batches(min_size=1, follow=True)`` receives results as they land; a task per row asks
the server and ``send``s its reply. While every row waits on the server nothing is owed, and
the loop waits for the next send instead of ending. For comparison the same work runs as a
batch loop (receive B rows, one batched call, send B), whose rows wait for each other.

The server is simulated (a reply takes 20 ms plus 0.2 ms per request in flight); the envs are
coroutine envs whose tool calls take 5-50 ms and sometimes fail (restarted, the episode
reported lost).

    python examples/per_request.py [--num-envs 64] [--episodes 400] [--loop asyncio|trio]
"""

from __future__ import annotations

import argparse
import functools
import itertools
import time
from contextlib import aclosing
from typing import Any

import anyio
import numpy as np

import aiovec


class Server:
    """A continuously batching server: each request is served on its own, in 20 ms plus
    0.2 ms per request in flight; a batch of B costs one request's time at load B."""

    def __init__(self) -> None:
        self.in_flight = 0

    async def complete(self, prompt: str) -> str:
        self.in_flight += 1
        try:
            await anyio.sleep(0.020 + 0.0002 * self.in_flight)
            return f"call a tool about {prompt[-12:]}"
        finally:
            self.in_flight -= 1

    async def complete_batch(self, prompts: list[str]) -> list[str]:
        self.in_flight += len(prompts)
        try:
            await anyio.sleep(0.020 + 0.0002 * self.in_flight)
            return [f"call a tool about {prompt[-12:]}" for prompt in prompts]
        finally:
            self.in_flight -= len(prompts)


class ToolEnv(aiovec.AsyncEnv[str, str]):
    """A chat episode of 3 to 8 turns, a tool call per turn (5-50 ms); 1 % of calls fail."""

    observation_space = aiovec.ObjectSpace(str)
    action_space = aiovec.ObjectSpace(str)

    async def reset(self, *, seed: int | None = None,
                    options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        await super().reset(seed=seed)
        self.turns, self.left = 0, int(self.np_random.integers(3, 9))
        return f"task {options['task'] if options else '?'}", {}

    async def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        await anyio.sleep(float(self.np_random.uniform(0.005, 0.050)))
        if self.np_random.random() < 0.01:
            raise RuntimeError("the tool crashed")
        self.turns += 1
        return f"tool result {self.turns}", 1.0, self.turns >= self.left, False, {}


def vector_env(num_envs: int) -> aiovec.AsyncVectorEnv:
    tasks = itertools.count()
    return aiovec.AsyncVectorEnv(
        [ToolEnv] * num_envs, backend="async", timeout=5.0,
        restart=aiovec.RestartPolicy(backoff=0),
        episode_options=lambda env_index: {"task": next(tasks)})


def count(tally: dict[str, int], batch: Any) -> None:
    """Each ended episode once: finished, or lost to a restart."""
    for outcome in aiovec.episode_outcomes(batch.terminations, batch.truncations,
                                           batch.infos):
        if outcome:
            tally[str(outcome)] = tally.get(str(outcome), 0) + 1


async def per_request(num_envs: int, episodes: int) -> dict[str, int]:
    server, tally = Server(), {}
    async with vector_env(num_envs) as envs:
        observations, _ = await envs.reset(seed=0)

        async def request(env_id: int, prompt: str) -> None:
            reply = await server.complete(prompt)
            envs.send([reply], [env_id])  # the moment it lands

        async with anyio.create_task_group() as tasks:
            for env_id, prompt in enumerate(observations):
                tasks.start_soon(request, env_id, prompt)
            # (aclosing: the loop is left early, and trio wants every async generator closed)
            async with aclosing(envs.batches(min_size=1, follow=True)) as batches:
                async for batch in batches:
                    count(tally, batch)
                    for env_id, prompt in zip(batch.env_ids.tolist(), batch.observations):
                        tasks.start_soon(request, env_id, prompt)
                    if sum(tally.values()) >= episodes:
                        tasks.cancel_scope.cancel()  # the requests still out: not needed
                        break
    return tally


async def batch_loop(num_envs: int, episodes: int, batch_size: int) -> dict[str, int]:
    server, tally = Server(), {}
    async with vector_env(num_envs) as envs:
        observations, _ = await envs.reset(seed=0)
        for first in range(0, num_envs, batch_size):
            ids = np.arange(first, min(num_envs, first + batch_size))
            envs.send(await server.complete_batch(list(observations[first:ids[-1] + 1])), ids)
        async with aclosing(envs.batches(batch_size=batch_size)) as batches:
            async for batch in batches:
                count(tally, batch)
                if sum(tally.values()) >= episodes:
                    break
                envs.send(await server.complete_batch(list(batch.observations)),
                          batch.env_ids)
    return tally


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--episodes", type=int, default=400)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--loop", choices=["asyncio", "trio"], default="asyncio")
    args = parser.parse_args()
    for name, loop in [("per request (follow=True)", functools.partial(
                           per_request, args.num_envs, args.episodes)),
                       (f"batches of {args.batch_size}", functools.partial(
                           batch_loop, args.num_envs, args.episodes, args.batch_size))]:
        started = time.perf_counter()
        tally = anyio.run(loop, backend=args.loop)
        seconds = time.perf_counter() - started
        print(f"{name:<28} {sum(tally.values()) / seconds:7.1f} episodes/s  "
              f"(finished {tally.get('finished', 0)}, lost {tally.get('lost', 0)})")


if __name__ == "__main__":
    main()
