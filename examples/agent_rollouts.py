"""Agent rollouts: multi-turn tool-using chat episodes, in groups, feeding one batched policy.

Each sub-env is an agent's episode slot (an ``AsyncEnv``): the observation is the chat so far
(a tuple of ``{"role", "content"}`` dicts), the action the policy's next message, a step one
tool call. Slots come in groups of 8 playing the same task, scored together once all 8 are in.
First-ready: whatever finished first goes to the policy as one batch, then back.

    python examples/agent_rollouts.py --groups 16 --batch-size 32 --want 48 [--loop trio]
"""

from __future__ import annotations

import argparse
import functools
from collections import defaultdict
from typing import Any

import anyio
import numpy as np
from gymnasium.vector import AutoresetMode

import aiovec

GROUP_SIZE = 8
Chat = tuple[dict[str, str], ...]
CHAT = aiovec.ObjectSpace(tuple)  # a chat: a tuple of message dicts, any Unicode in them
MESSAGE = aiovec.ObjectSpace(str)  # what the policy says


class ToolEnv(aiovec.AsyncEnv[Chat, str]):
    """One slot of group ``group``: its k-th episode plays the group's k-th task."""

    def __init__(self, group: int) -> None:
        self.observation_space, self.action_space = CHAT, MESSAGE
        self.group, self.episodes = group, 0

    async def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[Chat, Any]:
        await super().reset(seed=seed)
        task = np.random.default_rng([self.group, self.episodes])  # the same for the group
        self.episodes += 1
        self.turns_left = int(task.integers(1, 6))
        self.chat: Chat = ({"role": "user", "content": f"Task {task.integers(1000)}: find X"},)
        return self.chat, {}

    async def step(self, action: str) -> tuple[Chat, float, bool, bool, Any]:
        await anyio.sleep(self.np_random.uniform(0.005, 0.05))  # the tool call
        self.turns_left -= 1
        self.chat = (*self.chat, {"role": "assistant", "content": action},
                     {"role": "tool", "content": f"{len(self.chat)} results for {action}"})
        done = self.turns_left == 0
        return self.chat, float(done and self.np_random.random() < 0.5), done, False, {}


async def policy(chats: Any) -> list[str]:
    """A batched inference server: 10 ms + 0.1 ms per request, one reply per chat."""
    await anyio.sleep(0.010 + 0.0001 * len(chats))
    return [f'search("turn {len(chat) // 2}")' for chat in chats]


async def main(groups: int, batch_size: int, want: int) -> None:
    fns = [functools.partial(ToolEnv, slot // GROUP_SIZE) for slot in range(groups * GROUP_SIZE)]
    ended: dict[tuple[int, int], list[tuple[int, float]]] = defaultdict(list)  # (group, k)
    complete, turns = [], 0
    async with aiovec.AsyncVectorEnv(fns, backend="async", batch_size=batch_size,
                                     autoreset_mode=AutoresetMode.SAME_STEP) as envs:
        chats, _ = await envs.reset(seed=0)
        episode_of = [0] * envs.num_envs  # which episode each slot plays
        envs.send(await policy(chats))
        # Whatever finished, up to batch_size, once a quarter of it did or 20 ms passed (a
        # batching server's knobs), until nothing sent is owed.
        async for batch in envs.batches(min_size=max(1, batch_size // 4), wait=0.02):
            turns += len(batch.env_ids)
            for row in np.flatnonzero(batch.terminations):  # its row holds the next chat now
                env_id = int(batch.env_ids[row])
                key = (env_id // GROUP_SIZE, episode_of[env_id])
                episode_of[env_id] += 1
                final_chat = batch.infos["final_obs"][row]
                ended[key].append((len(final_chat), float(batch.rewards[row])))
                if len(ended[key]) == GROUP_SIZE:  # the group is in
                    complete.append(ended.pop(key))
            if len(complete) < want:  # else stop sending; the loop receives what is owed
                envs.send(await policy(batch.observations), batch.env_ids)
    rewards = np.array([[reward for _, reward in group] for group in complete])
    advantages = rewards - rewards.mean(axis=1, keepdims=True)  # GRPO-style, per group
    same = all(len({length for length, _ in group}) == 1 for group in complete)
    print(f"{envs.num_envs} slots, groups of {GROUP_SIZE}: {turns} turns, complete groups: "
          f"{len(complete)}, mean reward {rewards.mean():.2f}, advantage std "
          f"{advantages.std():.2f}; chats of a group equally long: {same}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--want", type=int, default=48, help="complete groups to collect")
    parser.add_argument("--loop", choices=["asyncio", "trio"], default="asyncio")
    args = parser.parse_args()
    anyio.run(main, args.groups, args.batch_size, args.want, backend=args.loop)
