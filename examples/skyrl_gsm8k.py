"""SkyRL-gym environments under aiovec: SkyRL's own GSM8K env, one per episode, made from the
dataset row each episode is handed, scored by SkyRL's own reward.

Rows as SkyRL's GSM8K dataset script writes them (a prompt, ``env_class``, ``reward_spec``)
go out through ``episode_options``; 8 sub-envs (``aiovec.skyrl.SkyRLEnv``) in worker processes
play them through the sync shim, a drop-in ``gymnasium.vector.VectorEnv``. The "policy"
answers right for every other row, so the mean reward is 0.5. Needs SkyRL-gym:
``pip install aiovec[skyrl]``.

    python examples/skyrl_gsm8k.py [--num-envs 8] [--rows 64]
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

import aiovec
from aiovec.skyrl import SkyRLEnv

INSTRUCTION = ' Let\'s think step by step and output the final answer after "####".'


def dataset(size: int) -> list[dict[str, Any]]:
    """GSM8K-shaped rows: the question, and its ground truth as a string."""
    return [{"prompt": [{"role": "user", "content": f"What is {n} times 3?{INSTRUCTION}"}],
             "env_class": "gsm8k", "data_source": "openai/gsm8k",
             "reward_spec": {"method": "rule", "ground_truth": str(3 * n)},
             "extra_info": {"index": n}} for n in range(size)]


def policy(chats: Any) -> list[str]:
    """Answers each chat's question: right for even n, off by one for odd n."""
    replies = []
    for chat in chats:
        n = int(chat[0]["content"].split()[2])
        replies.append(f"{n} times 3 is {3 * n + n % 2}. #### {3 * n + n % 2}")
    return replies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--rows", type=int, default=64)
    args = parser.parse_args()
    rows = iter(dataset(args.rows))
    # Past the dataset's end, a row nobody scores keeps the idle sub-envs busy.
    idle = {**dataset(1)[0], "extra_info": {"index": -1}}
    rewards: dict[int, float] = {}
    with aiovec.VectorEnv([SkyRLEnv] * args.num_envs, backend="process", timeout=30,
                          episode_options=lambda env_index: next(rows, idle)) as envs:
        chats, _ = envs.reset(seed=0)
        while len(rewards) < args.rows:
            chats, reward, terminated, _, infos = envs.step(policy(chats))
            for env_index in np.flatnonzero(terminated):  # GSM8K: one turn per episode
                index = infos["episode_options"][env_index]["extra_info"]["index"]
                if index >= 0:
                    rewards[index] = float(reward[env_index])
            if terminated.any():
                chats, *_ = envs.step(policy(chats))  # next-step mode: the resets
    print(f"{len(rewards)} rows scored by SkyRL's GSM8K reward, mean "
          f"{np.mean(list(rewards.values())):.2f} (expected 0.50)")
    print(f"every episode counted: {len(rewards)} rewards for {args.rows} rows")


if __name__ == "__main__":
    main()
