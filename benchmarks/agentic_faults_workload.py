"""The faults of ``agentic_faults.py``, one definition for every contender: which tool calls
hang or raise, which sandbox creations fail after the sandbox exists, the sandbox service with
its lease ledger, the judge, the physical limit, and aiovec's env.

- Every fault is drawn from a hash of (seed, slot, k, turn, attempt): the same episode meets
  the same faults under every contender, and whether an episode is lost to them (a tool call
  whose attempt and retry both fail) is known before it runs (``episode_truth``).
- A sandbox lease is a file in the ledger directory: made by ``create`` (after its latency;
  a failing create raises after the file exists, as a provider that timed out on the reply
  but made the sandbox), removed by ``delete``. What is left in the directory after the
  owner's process is gone leaked: nobody will ever delete it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentic_workload import (
    ACTION_SPACE,
    OBSERVATION_SPACE,
    Episode,
    Limits,
    Messages,
    Workload,
    episode_for,
    limits,
    task_pool,
    tool_cap,
)

import aiovec

__all__ = [
    "NO_FAULTS",
    "Faults",
    "FaultyChatEnv",
    "SandboxCreateError",
    "Sandboxes",
    "ToolFailed",
    "TrackedEpisode",
    "call_tool",
    "create_fails",
    "delete_lease",
    "episode_id",
    "episode_truth",
    "fault_limits",
    "p_ok",
    "provider",
    "scaled",
    "tool_fault",
    "under_deadline",
]


@dataclass(frozen=True)
class Faults:
    """The fault rates, the deadlines and retries every contender applies, and the costs and
    limits of the sandboxes and the judge."""

    hang: float = 0.01  # per tool-call attempt: it never answers (until its deadline)
    error: float = 0.01  # per attempt: it raises after its latency
    tool_deadline: float = 10.0  # seconds, per attempt
    retries: int = 1  # of a failed tool call; then the episode is lost
    create_failure: float = 0.001  # per creation: it raises after the sandbox exists
    create_seconds: float = 0.020
    delete_seconds: float = 0.005
    creation_rate: float = 1000.0  # sandboxes created per second, at most
    judge_concurrency: int = 32
    judge_seconds: float = 0.020
    seed: int = 1

    @property
    def any(self) -> bool:
        return bool(self.hang or self.error or self.create_failure)


#: The fault-free run: the same leases, judge and limits, no faults.
NO_FAULTS = Faults(hang=0.0, error=0.0, create_failure=0.0)

_MASK = (1 << 64) - 1


def _draw(*key: int) -> float:
    """A uniform draw in [0, 1) from integers (splitmix64 over them): cheap and stable."""
    state = 0x9E3779B97F4A7C15
    for part in key:
        state = (state ^ (part & _MASK)) * 0xBF58476D1CE4E5B9 & _MASK
        state = (state ^ (state >> 31)) * 0x94D049BB133111EB & _MASK
        state ^= state >> 29
    return (state >> 11) / float(1 << 53)


def tool_fault(faults: Faults, slot: int, k: int, turn: int, attempt: int) -> str | None:
    """``"hang"``, ``"error"`` or ``None`` for this attempt of this turn's tool call."""
    draw = _draw(faults.seed, 1, slot, k, turn, attempt)
    if draw < faults.hang:
        return "hang"
    return "error" if draw < faults.hang + faults.error else None


def create_fails(faults: Faults, slot: int, k: int, attempt: int) -> bool:
    return _draw(faults.seed, 2, slot, k, attempt) < faults.create_failure


def episode_id(slot: int, k: int) -> int:
    return slot << 32 | k


def under_deadline(workload: Workload, faults: Faults) -> Workload:
    """``workload`` with its tool calls capped at half the deadline where their own cap would
    reach it (a 1 s deadline, say): a deadline sits above every healthy call, so that only
    faults miss it (and every episode's truth stays known), with as wide a margin as the
    smoke run's (1 s calls, 1.5 s deadlines) for a loaded event loop's lag."""
    if tool_cap(workload) + 0.5 <= faults.tool_deadline:
        return workload
    return dataclasses.replace(workload, tool_cap=0.5 * faults.tool_deadline)


def episode_truth(workload: Workload, faults: Faults, slot: int, k: int) -> tuple[bool, bool]:
    """(lost, affected): lost if a tool call fails on every attempt; affected if any fault
    touches it (a failed attempt, a failed creation)."""
    turns = task_pool(workload).turns[(k * workload.num_groups + slot // workload.group_size)
                                      % task_pool(workload).size]
    affected = create_fails(faults, slot, k, 0)
    for turn in range(turns):
        failed = [tool_fault(faults, slot, k, turn, a) is not None
                  for a in range(faults.retries + 1)]
        if all(failed):
            return True, True
        affected = affected or failed[0]
    return False, affected


def p_ok(workload: Workload, faults: Faults) -> float:
    """The probability that an episode is not lost: E over the tasks of (1 - q^(r+1))^turns,
    q the chance that an attempt fails (creations are retried too; both failing, ~1e-6, is
    counted)."""
    q = faults.hang + faults.error
    turns = task_pool(workload).turns
    per_turn = 1.0 - q ** (faults.retries + 1)
    create = 1.0 - faults.create_failure ** 2
    return create * sum(per_turn ** t for t in turns) / len(turns)


def fault_limits(workload: Workload, faults: Faults) -> Limits:
    """X* of the workload with a sandbox per episode and a judge at its end: the lowest of
    the policy-bound and latency-bound rates (each episode also creates, is judged and
    deletes), the creation rate and the judge's capacity."""
    base = limits(workload)
    extra = faults.create_seconds + faults.judge_seconds + faults.delete_seconds
    latency = workload.num_slots / (workload.num_slots / base.latency + extra)
    judge = faults.judge_concurrency / faults.judge_seconds
    lines = (base.lines[0],
             f"latency-bound: as in the base run, each episode also creating its sandbox, "
             f"judged and deleting it ({extra * 1e3:g} ms more): {latency:,.0f} episodes/s",
             f"creation-bound: {faults.creation_rate:,.0f} sandboxes/s",
             f"judge-bound: {faults.judge_concurrency} at once / {faults.judge_seconds * 1e3:g} "
             f"ms = {judge:,.0f} episodes/s")
    return Limits(min(base.policy, faults.creation_rate, judge), latency, None, lines)


# ---------------------------------------------------------------------------- tool calls


class ToolFailed(Exception):
    """A tool call failed on every attempt: the episode is lost to infrastructure."""


class ToolError(Exception):
    """One attempt of a tool call raised."""


class TrackedEpisode:
    """Slot ``slot``'s ``k``-th episode with its identity, for faults and reports."""

    __slots__ = ("episode", "id", "k", "slot")

    def __init__(self, workload: Workload, slot: int, k: int) -> None:
        self.slot, self.k, self.id = slot, k, episode_id(slot, k)
        self.episode: Episode = episode_for(workload, slot, k)

    @property
    def messages(self) -> Messages:
        return self.episode.messages


async def _attempt(tracked: TrackedEpisode, action: str, faults: Faults,
                   attempt: int) -> tuple[Messages, bool]:
    episode = tracked.episode
    kind = tool_fault(faults, tracked.slot, tracked.k, episode.turn, attempt)
    if kind == "hang":
        await asyncio.Event().wait()  # never set: only the deadline ends it
    seconds = episode.tool_seconds()
    if seconds:
        await asyncio.sleep(seconds)
    if kind == "error":
        raise ToolError(f"tool call failed (turn {episode.turn}, attempt {attempt})")
    return episode.advance(action)


async def call_tool(tracked: TrackedEpisode, action: str,
                    faults: Faults) -> tuple[Messages, bool]:
    """One tool call: each attempt under the deadline, retried ``faults.retries`` times;
    ``ToolFailed`` when every attempt failed."""
    for attempt in range(faults.retries + 1):
        try:
            return await asyncio.wait_for(_attempt(tracked, action, faults, attempt),
                                          faults.tool_deadline)
        except (ToolError, asyncio.TimeoutError) as error:
            if attempt == faults.retries:
                raise ToolFailed(f"episode {tracked.slot}/{tracked.k}: tool call failed "
                                 f"{attempt + 1} times") from error
    raise AssertionError("unreachable")


# ------------------------------------------------------------------------------ sandboxes


class SandboxCreateError(Exception):
    """The provider failed the create call, after the sandbox was made."""


async def delete_lease(path: str, seconds: float) -> None:
    """Delete a sandbox (idempotent): what a cleanup registered for it runs, anywhere."""
    if seconds:
        await asyncio.sleep(seconds)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


class Sandboxes:
    """The sandbox provider: a lease per file in ``ledger``, named ``<owner>-<slot>-<k>-<n>``.
    ``known`` holds the leases whose create returned and that are not deleted yet; a file
    not among them is an orphan (its owner does not know it exists)."""

    def __init__(self, ledger: Path, faults: Faults, owner: str) -> None:
        self.ledger, self.faults, self.owner = ledger, faults, owner
        self.known: set[str] = set()
        ledger.mkdir(parents=True, exist_ok=True)

    def name(self, slot: int, k: int, attempt: int) -> str:
        return f"{self.owner}-{slot}-{k}-{attempt}"

    def path(self, name: str) -> str:
        return str(self.ledger / name)

    async def create(self, name: str, fail: bool) -> str:
        """Make sandbox ``name`` → its name; ``SandboxCreateError`` if ``fail`` (it exists)."""
        await asyncio.sleep(self.faults.create_seconds)
        os.close(os.open(self.path(name), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        if fail:
            raise SandboxCreateError(f"create {name}: the provider's reply failed")
        self.known.add(name)
        return name

    async def delete(self, name: str) -> None:
        await delete_lease(self.path(name), self.faults.delete_seconds)
        self.known.discard(name)

    def orphans(self) -> int:
        """Leases that exist and that no one knows of."""
        return sum(1 for entry in os.scandir(self.ledger) if entry.name not in self.known)


@functools.cache
def provider(ledger: str, faults: Faults, owner: str) -> Sandboxes:
    """This process's ``Sandboxes`` for ``owner`` (one, whoever asks: its ``known`` is
    every lease of the process's sub-envs)."""
    return Sandboxes(Path(ledger), faults, owner)


# ---------------------------------------------------------------------------- aiovec's env


#: Each slot's next episode number, for the sub-envs of this process: a restarted sub-env
#: goes on with its slot's next episode (the lost one is not replayed).
_next_episode: dict[tuple[str, int], int] = {}


class FaultyChatEnv(aiovec.AsyncEnv[Messages, str]):
    """Slot ``slot``'s episodes under faults: ``reset`` creates the episode's sandbox (named
    first, its delete registered as a cleanup before the create, the create taken from the
    ``"sandbox"`` limit), ``step`` is one tool call (deadline and retry; when every attempt
    failed it raises, and aiovec restarts the sub-env: the episode is lost, its sandbox
    deleted by the cleanup), the last step is judged (the ``"judge"`` limit) and deletes the
    sandbox. Infos carry the episode's id."""

    def __init__(self, workload: Workload, faults: Faults, slot: int, ledger: str,
                 owner: str) -> None:
        self.observation_space = OBSERVATION_SPACE
        self.action_space = ACTION_SPACE
        self.workload, self.faults, self.slot = workload, faults, slot
        self.sandboxes = provider(ledger, faults, owner)
        self._key = (owner, slot)
        self._tracked: TrackedEpisode | None = None
        self._lease: tuple[str, aiovec.CleanupHandle] | None = None

    async def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
                    ) -> tuple[Messages, dict[str, Any]]:
        await super().reset(seed=seed)
        await self._delete_lease()  # a reset mid-episode (none here, but a trainer may)
        k = _next_episode.get(self._key, 0)
        _next_episode[self._key] = k + 1
        self._tracked = TrackedEpisode(self.workload, self.slot, k)
        for attempt in range(2):
            name = self.sandboxes.name(self.slot, k, attempt)
            delete = functools.partial(delete_lease, self.sandboxes.path(name),
                                       self.faults.delete_seconds)
            handle = aiovec.register_cleanup(self, delete)
            try:
                async with aiovec.limit("sandbox"):
                    await self.sandboxes.create(name, create_fails(self.faults, self.slot, k,
                                                                   attempt))
            except SandboxCreateError:
                await delete()  # named before it was made: deleted by name
                handle.discard()
                if attempt:
                    raise
                continue
            self._lease = (name, handle)
            break
        return self._tracked.messages, {"episode": self._tracked.id}

    async def step(self, action: str) -> tuple[Messages, float, bool, bool, dict[str, Any]]:
        assert self._tracked is not None
        messages, done = await call_tool(self._tracked, action, self.faults)
        if done:
            async with aiovec.limit("judge"):
                await asyncio.sleep(self.faults.judge_seconds)
            await self._delete_lease()
        return messages, float(done), done, False, {"episode": self._tracked.id}

    async def _delete_lease(self) -> None:
        if self._lease is not None:
            name, handle = self._lease
            self._lease = None
            await self.sandboxes.delete(name)
            handle.discard()


def scaled(workload: Workload, scale: float) -> Workload:
    return dataclasses.replace(workload, num_groups=max(1, round(workload.num_groups * scale)),
                               policy_batch=max(1, round(workload.policy_batch * scale)))
