"""``aiovec.skyrl.SkyRLEnv`` against the real SkyRL-gym: its own GSM8K envs scored by its own
reward, a multi-turn chat kept as SkyRL's generator keeps it, and an env that leases something
(``skyrl_envs.LedgerEnv``) closed exactly once however its episode ends, SIGKILL included."""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

import anyio
import pytest
from gymnasium.vector import AutoresetMode

import aiovec
from aiovec.skyrl import SkyRLEnv
from tests.agents.skyrl_envs import LedgerEnv
from tests.leaks import wait_until

pytestmark = pytest.mark.anyio

BACKENDS = ["inline", "thread", "process"]


def gsm8k_row(answer: int, env_class: str = "gsm8k") -> dict[str, Any]:
    """A row as SkyRL's GSM8K dataset script writes it."""
    return {"prompt": [{"role": "user", "content": f"What is {answer} + 0? Output the final "
                        "answer after \"####\"."}],
            "env_class": env_class, "data_source": "openai/gsm8k",
            "reward_spec": {"method": "rule", "ground_truth": str(answer)}}


class Rows:
    """``episode_options``: sub-env ``i``'s k-th row asks for ``100 i + k``."""

    def __init__(self, **row: Any) -> None:
        self.drawn: dict[int, int] = {}
        self.row = row

    def __call__(self, env_index: int) -> dict[str, Any]:
        count = self.drawn[env_index] = self.drawn.get(env_index, -1) + 1
        return {**gsm8k_row(100 * env_index + count), **self.row}


def question_of(chat: list[dict[str, Any]]) -> int:
    return int(chat[0]["content"].split()[2])


@pytest.mark.parametrize("backend", BACKENDS)
async def test_gsm8k_rows_are_scored_by_skyrls_own_reward(backend: str) -> None:
    async with aiovec.AsyncVectorEnv([SkyRLEnv] * 3, backend=backend, episode_options=Rows(),
                                     autoreset_mode=AutoresetMode.SAME_STEP,
                                     timeout=60) as envs:
        chats, infos = await envs.reset(seed=0)
        assert [question_of(chat) for chat in chats] == [0, 100, 200]
        replies = [f"{question_of(chats[0])} + 0 is #### {question_of(chats[0])}",
                   "#### 7", "no answer"]
        chats, rewards, terminations, _, infos = await envs.step(replies)
        assert rewards.tolist() == [1.0, 0.0, 0.0] and terminations.all()  # gsm8k: one turn
        final = infos["final_info"]
        assert [options["reward_spec"]["ground_truth"] for options in
                final["episode_options"]] == ["0", "100", "200"]
        assert final["_metrics"].all()  # get_metrics() on every ending row (gsm8k's: {})
        # The next episodes, their next rows (same step: the chats are theirs already).
        assert [question_of(chat) for chat in chats] == [1, 101, 201]


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_multi_turn_chat_grows_as_skyrls_generator_keeps_it(backend: str) -> None:
    """``gsm8k_multi_turn`` with ``max_turns=2``: a wrong answer gets the env's user message
    back, the chat holds every turn; the second wrong one ends the episode."""
    async with aiovec.AsyncVectorEnv(
            [functools.partial(SkyRLEnv, max_turns=2)] * 2, backend=backend,
            episode_options=Rows(env_class="gsm8k_multi_turn"), timeout=60) as envs:
        chats, _ = await envs.reset(seed=0)
        prompt = chats[1]
        chats, rewards, terminations, _, _ = await envs.step(["#### 0", "#### 5"])
        assert terminations.tolist() == [True, False] and rewards[0] > rewards[1]
        assert chats[1][:len(prompt)] == prompt
        assert chats[1][len(prompt)] == {"role": "assistant", "content": "#### 5"}
        assert chats[1][-1]["role"] == "user" and len(chats[1]) > len(prompt) + 1
        _, _, terminations, _, _ = await envs.step(["#### 0", "#### 6"])
        assert terminations[1]  # its second turn: max_turns


async def test_a_reset_without_a_row_says_what_is_missing() -> None:
    async with aiovec.AsyncVectorEnv([SkyRLEnv] * 2, backend="inline") as envs:
        with pytest.raises(aiovec.SubEnvErrorGroup) as caught:
            await envs.reset(seed=0)
    assert "episode_options" in str(caught.value.exceptions[0].__cause__)


def leases(ledger: Path) -> set[str]:
    """The leases ``LedgerEnv``s hold now."""
    return set(os.listdir(ledger))


def ledger_rows(ledger: Path) -> Any:
    return lambda env_index: {"prompt": [{"role": "user", "content": "answer"}],
                              "answer": "yes", "ledger": str(ledger)}


@pytest.mark.parametrize("backend", BACKENDS)
async def test_an_envs_lease_is_released_once_however_its_episode_ends(
        backend: str, tmp_path: Path) -> None:
    """A finished episode, a raising env (restarted), a replaced episode and the close: each
    closes its SkyRL env; the ledger holds one lease per live episode, then none."""
    make = functools.partial(SkyRLEnv, LedgerEnv)
    async with aiovec.AsyncVectorEnv([make] * 3, backend=backend, restart=True, timeout=60,
                                     episode_options=ledger_rows(tmp_path)) as envs:
        await envs.reset(seed=0)
        assert len(leases(tmp_path)) == 3
        _, rewards, terminations, truncations, infos = await envs.step(["yes", "no", "raise"])
        assert rewards.tolist()[:2] == [1.0, 0.0] and terminations.tolist() == [
            True, False, False] and truncations[2] and infos["_restart"][2]
        # Sub-env 0's episode ended (its env closed); 1's goes on; 2 was remade, its new
        # SkyRL env made as it resets.
        assert len(leases(tmp_path)) == 1
        await envs.step(["no", "no", "no"])  # sub-envs 0 and 2 reset (next-step mode)
        assert len(leases(tmp_path)) == 3
        await envs.reset(seed=1)  # every episode replaced
        assert len(leases(tmp_path)) == 3
    assert not leases(tmp_path)


async def test_a_killed_workers_leases_are_released_by_their_cleanups(tmp_path: Path) -> None:
    """Sub-env 1's worker dies mid-step (``os._exit``): its env's close runs in the process
    that supervised the worker (its registered cleanup), the restart leases anew."""
    make = functools.partial(SkyRLEnv, LedgerEnv)
    async with aiovec.AsyncVectorEnv([make] * 2, backend="process", num_workers=2,
                                     restart=True, timeout=60,
                                     episode_options=ledger_rows(tmp_path)) as envs:
        await envs.reset(seed=0)
        before = leases(tmp_path)
        _, _, _, _, infos = await envs.step(["no", "die"])
        assert infos["_restart"].tolist() == [False, True]
        await anyio.to_thread.run_sync(
            wait_until, lambda: len(before - leases(tmp_path)) == 1, 60,
            "the dead worker's lease to be released")
        assert len(leases(tmp_path)) == 1  # the survivor's
        await envs.step(["no", "no"])  # the remade sub-env resets (next-step mode)
        assert len(leases(tmp_path)) == 2
    assert not leases(tmp_path)
