"""The agentic workload of ``agentic.py``, one definition for every contender: the tasks,
an episode's chat and its tool calls, the env classes aiovec steps, the simulated policy server
and the physical limit X*.

- Episode slots: ``num_groups`` groups of ``group_size`` slots; slot ``s`` is member
  ``s % group_size`` of group ``s // group_size``. A slot's ``k``-th episode plays task
  ``(k * num_groups + group) % pool size``: the 8 members of a group play the same task, with the
  same number of turns, each with tool latencies of its own. Tasks come from a pool drawn once
  from the workload's seed (``task_pool``), so every contender, in every process, gets the same
  turns and the same tool latencies for the same (slot, k).
- An episode: a system and a user message, then per turn one policy call (the action, an
  assistant message) and one tool call (a wait, lognormal, plus any CPU work; a tool message).
  The observation is the whole chat, a fresh tuple of ``{"role", "content"}`` dicts each turn.
- The policy (``PolicyServer``): one coroutine serving FIFO requests in batches of up to ``B``,
  each batch taking ``a + b * n`` seconds on the server's own clock.

Environment classes live here so that worker processes unpickle them by reference
(``benchmarks/`` is ``sys.path[0]`` of the script, and workers get the parent's path).
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import math
import os
import time
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from bench_envs import burn_cpu

import aiovec

__all__ = ["ACTION_SPACE", "OBSERVATION_SPACE", "AsyncChatEnv", "ChatEnv", "Episode", "Limits",
           "Messages", "PolicyServer", "Workload", "episode_for", "episode_stream", "limits",
           "slot_episodes", "task_pool", "tool_call", "tool_cap"]

Messages = tuple[dict[str, str], ...]

#: Tasks in the pool per group (a slot's episodes cycle through them).
TASKS_PER_GROUP = 8
#: A tool's latency is capped at this many times its median (about the 99.9th percentile for
#: sigma = 1): a sensible tool has a deadline, and the tail stays finite.
TOOL_CAP_MEDIANS = 20.0


@dataclass(frozen=True)
class Workload:
    """One variant's sizes and costs (hashable: worker processes cache its task pool)."""

    num_groups: int = 512
    group_size: int = 8
    max_turns: int = 16
    tool_median: float = 0.050  # seconds; lognormal, capped at TOOL_CAP_MEDIANS medians
    tool_sigma: float = 1.0
    tool_cap: float | None = None  # seconds: another cap than TOOL_CAP_MEDIANS medians
    tool_cpu: float = 0.0  # seconds of pure Python per tool call
    policy_base: float = 0.010  # a: seconds per batch...
    policy_per_request: float = 0.0001  # ...+ b per request in it
    policy_batch: int = 256  # B: requests per batch, at most
    seed: int = 0

    @property
    def num_slots(self) -> int:
        """N: the episodes in flight."""
        return self.num_groups * self.group_size

    def batch_seconds(self, size: int) -> float:
        """How long the policy takes to serve a batch of ``size`` requests."""
        return self.policy_base + self.policy_per_request * size


# ---------------------------------------------------------------------- text of the chats


def _charset() -> str:
    """~700 characters: ASCII, Latin-1, Latin Extended-A, Greek, Cyrillic and some CJK."""
    ranges = ((0x20, 0x7F), (0xA1, 0x100), (0x100, 0x180), (0x391, 0x3CA), (0x410, 0x450),
              (0x4E00, 0x4F04))
    return "".join(chr(code) for start, end in ranges for code in range(start, end))


CHARSET = _charset()
#: A chat: a tuple of message dicts (any Unicode in them).
OBSERVATION_SPACE = aiovec.ObjectSpace(tuple)
#: What the policy answers with: text over the wide charset.
ACTION_SPACE = gym.spaces.Text(max_length=512, charset=CHARSET)
SYSTEM_PROMPT = ("You are a research agent. Call one tool per turn; answer when you are sure. "
                 "Réponds en français ou en русский, 必要なら日本語で.")
TASK_TEXT = "find the paper that introduced the method, its year and its first author."
ACTIONS = tuple(
    f'<tool_call>{{"name": "search", "arguments": {{"query": "méthode {turn} αβγ поиск '
    f'研究 {"ab" * turn}", "page": {turn}}}}}</tool_call>' for turn in range(16))
TOOL_OUTPUTS = tuple(
    f"Result {turn}: « Über die Lösung » — Ångström, Ð. Þórsson (19{turn + 50}); 摘要: "
    + "該方法は効率的である。Метод эффективен. 🔎 " * (2 + turn % 5) for turn in range(16))


def respond(messages: Messages) -> str:
    """The policy's answer to a chat (cheap: the simulated server's time is its sleep)."""
    return ACTIONS[len(messages) % len(ACTIONS)]


# ------------------------------------------------------------------- tasks and episodes


@dataclass(frozen=True)
class TaskPool:
    """Every task's number of turns, and each member's tool latency at each turn."""

    turns: list[int]  # per task
    waits: np.ndarray  # [task, member, turn] seconds

    @property
    def size(self) -> int:
        return len(self.turns)


def tool_cap(workload: Workload) -> float:
    """The longest a tool call of ``workload`` takes (seconds)."""
    if workload.tool_cap is not None:
        return workload.tool_cap
    return TOOL_CAP_MEDIANS * workload.tool_median


@functools.lru_cache(maxsize=4)
def task_pool(workload: Workload) -> TaskPool:
    """The workload's tasks, drawn from its seed (cached: each process draws them once)."""
    rng = np.random.default_rng(workload.seed)
    size = workload.num_groups * TASKS_PER_GROUP
    turns = rng.integers(1, workload.max_turns + 1, size)
    shape = (size, workload.group_size, workload.max_turns)
    if workload.tool_median:
        waits = np.minimum(rng.lognormal(math.log(workload.tool_median), workload.tool_sigma,
                                         shape), tool_cap(workload))
    else:  # tool calls that only compute
        waits = np.zeros(shape)
    return TaskPool([int(t) for t in turns], waits)


class Episode:
    """One episode: its chat so far and the tool latencies of its turns."""

    __slots__ = ("cpu_seconds", "messages", "turn", "waits")

    def __init__(self, task: int, waits: list[float], cpu_seconds: float) -> None:
        self.messages: Messages = ({"role": "system", "content": SYSTEM_PROMPT},
                                   {"role": "user", "content": f"Task {task}: {TASK_TEXT}"})
        self.turn = 0
        self.waits = waits
        self.cpu_seconds = cpu_seconds

    def tool_seconds(self) -> float:
        """How long this turn's tool call waits."""
        return self.waits[self.turn]

    def advance(self, action: str) -> tuple[Messages, bool]:
        """The tool's work on ``action`` done: the chat with the action and the tool's answer
        appended (a new tuple), and whether the episode is over."""
        if self.cpu_seconds:
            burn_cpu(self.cpu_seconds)
        turn = self.turn = self.turn + 1
        self.messages = (*self.messages, {"role": "assistant", "content": action},
                         {"role": "tool", "content": TOOL_OUTPUTS[turn % len(TOOL_OUTPUTS)]})
        return self.messages, turn == len(self.waits)


def episode_for(workload: Workload, slot: int, k: int) -> Episode:
    """Slot ``slot``'s ``k``-th episode."""
    pool = task_pool(workload)
    group, member = divmod(slot, workload.group_size)
    task = (k * workload.num_groups + group) % pool.size
    waits = pool.waits[task, member, :pool.turns[task]].tolist()
    return Episode(task, waits, workload.tool_cpu)


def slot_episodes(workload: Workload, slot: int) -> Iterator[Episode]:
    """A slot's episodes, one after another."""
    return (episode_for(workload, slot, k) for k in itertools.count())


def episode_stream(workload: Workload) -> Iterator[Episode]:
    """Every slot's first episode, then every slot's second, ...: a dataset read in order, group
    by group (what the task-per-episode contenders consume)."""
    return (episode_for(workload, slot, k)
            for k in itertools.count() for slot in range(workload.num_slots))


async def tool_call(episode: Episode, action: str) -> tuple[Messages, bool]:
    """One tool call: wait its latency, then do its work (``Episode.advance``)."""
    seconds = episode.tool_seconds()
    if seconds:
        await asyncio.sleep(seconds)
    return episode.advance(action)


# -------------------------------------------------------------------------- environments


class AsyncChatEnv(aiovec.AsyncEnv[Messages, str]):
    """Slot ``slot``'s episodes as a coroutine env: ``step`` is one tool call."""

    def __init__(self, workload: Workload, slot: int) -> None:
        self.observation_space = OBSERVATION_SPACE
        self.action_space = ACTION_SPACE
        self._episodes = slot_episodes(workload, slot)
        self._episode: Episode | None = None

    async def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
                    ) -> tuple[Messages, dict[str, Any]]:
        await super().reset(seed=seed)
        self._episode = next(self._episodes)
        return self._episode.messages, {}

    async def step(self, action: str) -> tuple[Messages, float, bool, bool, dict[str, Any]]:
        assert self._episode is not None
        messages, done = await tool_call(self._episode, action)
        return messages, float(done), done, False, {}


class ChatEnv(gym.Env[Messages, str]):
    """``AsyncChatEnv`` as a plain env (the process backend's): the wait is a ``time.sleep``."""

    def __init__(self, workload: Workload, slot: int) -> None:
        self.observation_space = OBSERVATION_SPACE
        self.action_space = ACTION_SPACE
        self._episodes = slot_episodes(workload, slot)
        self._episode: Episode | None = None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[Messages, dict[str, Any]]:
        super().reset(seed=seed)
        self._episode = next(self._episodes)
        return self._episode.messages, {}

    def step(self, action: str) -> tuple[Messages, float, bool, bool, dict[str, Any]]:
        assert self._episode is not None
        seconds = self._episode.tool_seconds()
        if seconds:
            time.sleep(seconds)
        messages, done = self._episode.advance(action)
        return messages, float(done), done, False, {}


# ------------------------------------------------------------------------------ policy


class Reply:
    """The answers to one submission of requests, and a future set once all are in."""

    __slots__ = ("actions", "done", "remaining", "submitted")

    def __init__(self, count: int, submitted: float) -> None:
        self.actions = [""] * count
        self.remaining = count
        self.submitted = submitted
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def answer(self, position: int, action: str) -> None:
        self.actions[position] = action
        self.remaining -= 1
        if not self.remaining and not self.done.done():  # done: its caller was cancelled
            self.done.set_result(None)


class PolicyServer:
    """The simulated batched policy, the workload's bottleneck: requests queue FIFO; ``serve``
    takes up to ``B`` of them at a time and answers them ``a + b * n`` seconds after the batch
    starts, on the server's own clock: a batch starts when the previous one ended or when its
    last request arrived, whichever is later (a late wake-up of the event loop delays the
    replies, as a busy orchestrator would read them late, but not the server's next batch)."""

    def __init__(self, workload: Workload) -> None:
        self.workload = workload
        self.queue: deque[tuple[Messages, Reply, int]] = deque()
        self._wakeup = asyncio.Event()
        self.batches = 0
        self.served = 0

    def submit(self, observations: Sequence[Messages]) -> Reply:
        """Queue one request per chat → their ``Reply``."""
        reply = Reply(len(observations), asyncio.get_running_loop().time())
        self.queue.extend((messages, reply, i) for i, messages in enumerate(observations))
        self._wakeup.set()
        return reply

    async def generate(self, messages: Messages) -> str:
        """One request (what a task per episode sends)."""
        reply = self.submit((messages,))
        await reply.done
        return reply.actions[0]

    async def generate_batch(self, observations: Sequence[Messages]) -> list[str]:
        """One request per chat, queued together → their answers in order."""
        reply = self.submit(observations)
        await reply.done
        return reply.actions

    async def serve(self) -> None:
        """Serve batches until cancelled."""
        loop = asyncio.get_running_loop()
        queue, limit, free_at = self.queue, self.workload.policy_batch, loop.time()
        while True:
            while not queue:
                self._wakeup.clear()
                await self._wakeup.wait()
            taken = [queue.popleft() for _ in range(min(limit, len(queue)))]
            free_at = max(free_at, taken[-1][1].submitted) + self.workload.batch_seconds(
                len(taken))
            await asyncio.sleep(max(0.0, free_at - loop.time()))
            for messages, reply, position in taken:
                reply.answer(position, respond(messages))
            self.batches += 1
            self.served += len(taken)


# ------------------------------------------------------------------------------ limits


def usable_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
        os.cpu_count() or 1)


@dataclass(frozen=True)
class Limits:
    """The physical limits of a workload's episode rate, and the formulas behind them."""

    policy: float  # episodes/s with every policy batch full
    latency: float  # N / the shortest mean episode latency (an idle policy)
    cpu: float | None  # cores / CPU seconds per episode (when tool calls compute)
    lines: tuple[str, ...]

    @property
    def x_star(self) -> float:
        return min(v for v in (self.policy, self.latency, self.cpu) if v is not None)

    @property
    def binding(self) -> str:
        found = {"policy": self.policy, "latency": self.latency, "CPU": self.cpu}
        return min((v, k) for k, v in found.items() if v is not None)[1]


def limits(workload: Workload, cores: int | None = None) -> Limits:
    """X* of ``workload``: the lowest of its policy, latency and CPU limits."""
    pool = task_pool(workload)
    cores = cores or usable_cores()
    turns = np.array(pool.turns)
    mean_turns = float(turns.mean())
    in_episode = np.arange(workload.max_turns) < turns[:, None, None]
    waits = float((pool.waits * in_episode).sum() / (pool.size * workload.group_size))
    big_b, batch = workload.policy_batch, workload.batch_seconds(workload.policy_batch)
    policy = big_b / batch / mean_turns
    alone = mean_turns * (workload.batch_seconds(1) + workload.tool_cpu) + waits
    latency = workload.num_slots / alone
    ms, per_turn = 1e3, workload.batch_seconds(1) + workload.tool_cpu
    lines = [f"policy-bound: B / (a + b·B) / E[turns] = {big_b} / ({workload.policy_base * ms:g} "
             f"ms + {workload.policy_per_request * ms:g} ms · {big_b}) / {mean_turns:.2f} = "
             f"{policy:,.0f} episodes/s",
             f"latency-bound: N / (E[turns]·(a + b + tool CPU) + E[tool waits per episode]) = "
             f"{workload.num_slots} / ({mean_turns:.2f} · {per_turn * ms:.2f} ms + "
             f"{waits * ms:.0f} ms) = {latency:,.0f} episodes/s"]
    cpu = None
    if workload.tool_cpu:
        cpu = cores / (mean_turns * workload.tool_cpu)
        lines.append(f"CPU-bound: cores / (E[turns] · tool CPU) = {cores} / ({mean_turns:.2f} · "
                     f"{workload.tool_cpu * ms:g} ms) = {cpu:,.0f} episodes/s (one core: "
                     f"{cpu / cores:,.0f})")
    return Limits(policy, latency, cpu, tuple(lines))
