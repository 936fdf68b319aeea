"""GRPO rollouts with faults: groups of 8 episodes per task, a lost member masked out of its
group, a sandbox lease per episode, a shared judge, an episode timeout.

Each sub-env is an agent's episode slot (an ``AsyncEnv``): its reset takes the episode's task
(a dataset row) from ``episode_options``, leases a sandbox (a file here, deleted by the env or,
whatever happens to it, by its registered cleanup), and its steps are tool calls in that
sandbox; the last one is scored by a judge that at most 4 episodes use at once. Slots
``8g … 8g+7`` play group ``g``'s tasks, one after another. Tools crash (``--crash``) or hang
(``--hang``) now and then: the restart policy replaces the sub-env, its episode is lost, and
the group's advantages are computed over the members that finished (a lost member says
nothing about the policy). First-ready: whatever finished first goes to the policy as a batch.

    python examples/agent_rollouts.py --groups 16 --want 32 [--crash 0.02 --hang 0.01] [--loop trio]
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import tempfile
from collections import defaultdict
from typing import Any

import anyio
import numpy as np
from gymnasium.vector import AutoresetMode

import aiovec

GROUP_SIZE = 8
DATASET = [{"prompt": f"What is {a} + {b}?", "answer": a + b}
           for a, b in zip(range(3, 300, 7), range(5, 500, 11))]
Chat = tuple[dict[str, str], ...]


def delete_lease(path: str) -> None:
    """The sandbox provider's delete (idempotent: the env and its cleanup may both call it)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


class ToolEnv(aiovec.AsyncEnv[Chat, str]):
    """One episode slot: the task comes in the reset's options, a sandbox is leased for the
    episode, each step is a tool call (which may crash or hang), the last one is judged."""

    observation_space = aiovec.ObjectSpace(tuple)  # the chat: message dicts
    action_space = aiovec.ObjectSpace(str)  # what the model said

    def __init__(self, leases: str, crash: float, hang: float) -> None:
        self.leases, self.crash, self.hang = leases, crash, hang
        self.lease: tuple[str, aiovec.CleanupHandle] | None = None

    async def reset(self, *, seed: int | None = None,
                    options: dict[str, Any] | None = None) -> tuple[Chat, dict[str, Any]]:
        await super().reset(seed=seed)
        assert options is not None, "every episode gets its task"
        self.task, self.turns_left = options, 3
        self.end_lease()
        path = os.path.join(self.leases, f"{os.getpid()}-{id(self)}-{options['key']}")
        handle = aiovec.register_cleanup(self, functools.partial(delete_lease, path))
        await anyio.Path(path).touch()  # (registered first: a crash in between leaks nothing)
        self.lease = (path, handle)
        self.chat: Chat = ({"role": "user", "content": options["prompt"]},)
        return self.chat, {}

    async def step(self, action: str) -> tuple[Chat, float, bool, bool, dict[str, Any]]:
        draw = self.np_random.random()
        if draw < self.crash:
            raise RuntimeError("the tool crashed")
        if draw < self.crash + self.hang:
            await anyio.sleep(3600)  # a hung tool: the call's deadline gives up on it
        await anyio.sleep(self.np_random.uniform(0.002, 0.01))  # the tool call
        self.turns_left -= 1
        self.chat = (*self.chat, {"role": "assistant", "content": action},
                     {"role": "tool", "content": f"{len(self.chat)} results"})
        if self.turns_left:
            return self.chat, 0.0, False, False, {}
        async with aiovec.limit("judge"):  # at most 4 at once, across the vector env
            await anyio.sleep(0.002)
            reward = float(action.endswith(str(self.task["answer"])))
        self.end_lease()
        return self.chat, reward, True, False, {}

    def end_lease(self) -> None:
        if self.lease is not None:
            path, handle = self.lease
            self.lease = None
            delete_lease(path)
            handle.discard()


class Tasks:
    """``episode_options``: the k-th episode of each slot of group ``g`` plays the same task."""

    def __init__(self, groups: int) -> None:
        self.groups, self.episodes = groups, defaultdict(int)

    def __call__(self, slot: int) -> dict[str, Any]:
        group, k = divmod(slot, GROUP_SIZE)[0], self.episodes[slot]
        self.episodes[slot] += 1
        return {**DATASET[(k * self.groups + group) % len(DATASET)], "key": f"{group}-{k}"}


async def policy(chats: Any) -> list[str]:
    """A batched inference server (10 ms + 0.1 ms per request); right half of the time."""
    await anyio.sleep(0.010 + 0.0001 * len(chats))
    rng = np.random.default_rng(len(chats))
    answers = []
    for chat in chats:
        a, b = (int(word.strip("?")) for word in chat[0]["content"].split()[2::2])
        answers.append(f"the answer is {a + b if rng.random() < 0.5 else a - b}")
    return answers


async def main(groups: int, want: int, crash: float, hang: float) -> None:
    results: dict[str, list[float | None]] = defaultdict(list)  # group round → rewards
    complete: list[np.ndarray] = []  # each group's advantages, over its members that finished
    dropped = turns = ended = 0
    with tempfile.TemporaryDirectory() as leases:
        env_fns = [functools.partial(ToolEnv, leases, crash, hang)] * (groups * GROUP_SIZE)
        async with aiovec.AsyncVectorEnv(
                env_fns, backend="async", autoreset_mode=AutoresetMode.SAME_STEP,
                episode_options=Tasks(groups), episode_timeout=5.0, timeout=1.0,
                restart=aiovec.RestartPolicy(backoff=0.01, max_failure_fraction=0.5),
                limits={"judge": aiovec.Limit(concurrency=4)}) as envs:
            chats, _ = await envs.reset(seed=0)
            envs.send(await policy(chats))
            size = min(32, envs.num_envs)  # whatever finished, up to 32, once a quarter did
            async for batch in envs.batches(batch_size=size, min_size=size // 4, wait=0.02):
                turns += len(batch.env_ids)
                outcomes = aiovec.episode_outcomes(batch.terminations, batch.truncations,
                                                   batch.infos)
                for row in np.flatnonzero(outcomes != "").tolist():
                    ended += 1
                    # The ending episode's task (same-step mode: in the final info).
                    task = batch.infos["final_info"]["episode_options"][row]
                    lost = outcomes[row] == "lost"
                    results[task["key"]].append(None if lost else float(batch.rewards[row]))
                    members = results[task["key"]]
                    if len(members) == GROUP_SIZE:  # the group's round is in
                        rewards = np.array([r for r in results.pop(task["key"]) if r is not None])
                        if len(rewards) >= 2:  # a baseline needs two
                            complete.append(rewards - rewards.mean())
                        else:
                            dropped += 1
                if len(complete) < want:  # else stop sending; receive what is owed
                    envs.send(await policy(batch.observations), batch.env_ids)
            counts = envs.statistics().episodes
        left = os.listdir(leases)
    scored = sum(len(advantages) for advantages in complete)
    counted = counts.finished + counts.truncated + counts.episode_timeout + counts.lost
    print(f"{len(env_fns)} slots, groups of {GROUP_SIZE}: {turns} turns, complete groups: "
          f"{len(complete)} ({scored} episodes scored), dropped groups: {dropped}; episodes "
          f"ended: {ended} (counted by aiovec: {counted}), lost: {counts.lost} (masked out), "
          f"timed out: {counts.episode_timeout}; leases left: {len(left)}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=16)
    parser.add_argument("--want", type=int, default=32, help="complete groups to collect")
    parser.add_argument("--crash", type=float, default=0.0, help="P(a tool call raises)")
    parser.add_argument("--hang", type=float, default=0.0, help="P(a tool call hangs)")
    parser.add_argument("--loop", choices=["asyncio", "trio"], default="asyncio")
    args = parser.parse_args()
    anyio.run(main, args.groups, args.want, args.crash, args.hang, backend=args.loop)
