"""The contenders of ``agentic.py``, each written from its framework's pattern, and the timed
run that measures one of them.

Every contender runs the same episodes (``agentic_workload``) against the same simulated
policy; they differ only in how they orchestrate:

- ``lockstep gather``: ``asyncio.gather`` over a batch of N episodes (every slot's k-th), then
  the next batch (SkyRL's generator, verl's agent loop);
- ``task per episode``: a task per episode, started when a semaphore of N permits allows, each
  tool call under ``asyncio.wait_for`` with retries (verifiers);
- ``adaptive dispatcher``: a dispatcher keeping an in-flight cap of episode tasks, refilled on
  ``asyncio.wait(FIRST_COMPLETED)``, the cap moved by the policy's queue length (prime-rl);
- ``hand-written loop``: a task per episode slot, each looping over its slot's episodes
  (the reference of the stress target);
- ``aiovec``: env-centric, ``recv`` → one policy batch → ``send``, the episodes as sub-envs
  (``AsyncChatEnv`` on the async backend, ``ChatEnv`` on the process backend).
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import resource
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import anyio
import numpy as np
from agentic_workload import (
    AsyncChatEnv,
    ChatEnv,
    Episode,
    Messages,
    PolicyServer,
    Workload,
    episode_for,
    episode_stream,
    slot_episodes,
    tool_call,
)
from async_native_core import on_loop
from gymnasium.vector import AutoresetMode
from harness import Plan

import aiovec

__all__ = ["CONTENDERS", "HAND_WRITTEN", "AdaptiveCap", "Contender", "Sample", "measure",
           "per_slot"]

#: The task-per-episode contender's deadline on a tool call, in tool medians (above the
#: latency cap: it never fires, so every contender does the same work), and its retries.
TOOL_TIMEOUT_MEDIANS = 40.0
TOOL_RETRIES = 2
RETRY_BACKOFF = 0.05
#: The adaptive dispatcher's controller: how often it reads the policy's queue, how it grows
#: and cuts the cap (a cut needs that many overloaded readings in a row).
POLL_SECONDS = 0.1
GROW, CUT, OVERLOADED_POLLS = 1.25, 0.9, 6
#: The dispatcher's own timeout on waiting for a finished episode (it rechecks its cap then).
DISPATCH_WAIT = 0.5


@dataclass(frozen=True)
class Sample:
    """One timed run of one contender."""

    episodes_per_second: float
    turns_per_second: float  # policy calls served per second
    mean_batch: float  # mean policy batch / B
    p50: float  # episode latency, seconds
    p99: float
    cpu: float  # this process's CPU seconds per wall second
    episodes: int
    seconds: float


class Recorder:
    """Counts what happens in the timed window: finished episodes and their latencies, and the
    policy's batches and requests."""

    def __init__(self, policy: PolicyServer) -> None:
        self.policy = policy
        self.latencies: list[float] = []
        self.recording = False
        self.closed = asyncio.Event()
        self._start: tuple[float, float, int, int] = (0.0, 0.0, 0, 0)
        self.sample: Sample | None = None

    def finished(self, started: float, now: float | None = None) -> None:
        """An episode that started at ``started`` (``time.perf_counter``) ended now."""
        if self.recording:
            self.latencies.append((time.perf_counter() if now is None else now) - started)

    def _now(self) -> tuple[float, float, int, int]:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return (time.perf_counter(), usage.ru_utime + usage.ru_stime, self.policy.served,
                self.policy.batches)

    def elapsed(self) -> float:
        return time.perf_counter() - self._start[0]

    def open(self) -> None:
        self._start = self._now()
        self.recording = True

    def close(self) -> None:
        self.recording = False
        end = self._now()
        wall, cpu, served, batches = (b - a for a, b in zip(self._start, end))
        latencies = np.array(self.latencies or [np.nan])
        self.sample = Sample(
            episodes_per_second=len(self.latencies) / wall, turns_per_second=served / wall,
            mean_batch=served / batches / self.policy.workload.policy_batch if batches else 0.0,
            p50=float(np.percentile(latencies, 50)), p99=float(np.percentile(latencies, 99)),
            cpu=cpu / wall, episodes=len(self.latencies), seconds=wall)
        self.closed.set()


@dataclass
class Run:
    """What a contender gets: the workload, the policy, the recorder, and an event to set once
    its steady loop runs (making and resetting envs is not timed)."""

    workload: Workload
    policy: PolicyServer
    recorder: Recorder
    plan: Plan
    running: asyncio.Event = field(default_factory=asyncio.Event)


async def play(run: Run, episode: Episode, tool: Callable[[Episode, str], Awaitable[
        tuple[Messages, bool]]] = tool_call) -> None:
    """One episode, as the task-centric contenders run it: policy call, tool call, repeat."""
    started = time.perf_counter()
    messages = episode.messages
    while True:
        messages, done = await tool(episode, await run.policy.generate(messages))
        if done:
            run.recorder.finished(started)
            return


class Background:
    """Tasks started and left to run; the first error among them is kept for their owner to
    raise (``check``), and ``changed`` is set whenever one ends."""

    def __init__(self) -> None:
        self.tasks: set[asyncio.Task[None]] = set()
        self.error: BaseException | None = None
        self.changed = asyncio.Event()

    def start(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coroutine)
        self.tasks.add(task)
        task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None and self.error is None:
            self.error = task.exception()
        self.changed.set()

    def check(self) -> None:
        if self.error is not None:
            raise self.error

    async def cancel(self) -> None:
        await _cancel(set(self.tasks))


# ---------------------------------------------------------------------------- contenders


async def lockstep_gather(run: Run) -> None:
    """Batch k: every slot's k-th episode under one ``asyncio.gather``; the timed window is
    whole batches (it opens at a batch's start and closes at the end of the first batch to
    end ``plan.seconds`` after it opened)."""
    run.running.set()
    recorder, num_slots = run.recorder, run.workload.num_slots
    recorder.open()
    for k in itertools.count():
        await asyncio.gather(*(play(run, episode_for(run.workload, slot, k))
                               for slot in range(num_slots)))
        if recorder.elapsed() >= run.plan.seconds:
            recorder.close()
            return


async def task_per_episode(run: Run) -> None:
    """A task per episode, admitted by a semaphore of N permits; a deadline on every tool
    call, retried with backoff when it passes."""
    permits = asyncio.Semaphore(run.workload.num_slots)
    timeout = TOOL_TIMEOUT_MEDIANS * run.workload.tool_median or None

    async def tool_with_deadline(episode: Episode, action: str) -> tuple[Messages, bool]:
        for attempt in range(TOOL_RETRIES + 1):
            try:
                return await asyncio.wait_for(tool_call(episode, action), timeout)
            except asyncio.TimeoutError:
                if attempt == TOOL_RETRIES:
                    raise
                await asyncio.sleep(RETRY_BACKOFF * 2**attempt)
        raise AssertionError("unreachable")

    async def rollout(episode: Episode) -> None:
        try:
            await play(run, episode, tool_with_deadline)
        finally:
            permits.release()

    rollouts = Background()
    run.running.set()
    try:
        for episode in episode_stream(run.workload):
            await permits.acquire()
            rollouts.check()
            rollouts.start(rollout(episode))
    finally:
        await rollouts.cancel()


class AdaptiveCap:
    """The adaptive dispatcher (prime-rl): episode tasks kept up to an in-flight cap that
    starts at B, grows ``GROW``x per reading of the policy's queue while the queue is shorter
    than a batch and the cap is 90 % used, and is cut to ``CUT`` · the episodes in flight after
    ``OVERLOADED_POLLS`` readings in a row over two batches (those drain; no cut again until
    they have)."""

    def __init__(self, policy: PolicyServer) -> None:
        self.policy = policy
        self.in_flight: set[asyncio.Task[None]] = set()
        self.high, self.big_b = policy.workload.num_slots, policy.workload.policy_batch
        self.value = min(self.high, self.big_b)

    async def control(self) -> None:
        """Read the policy's queue every ``POLL_SECONDS`` and move the cap, until cancelled."""
        overloaded, draining, big_b = 0, False, self.big_b
        while True:
            await asyncio.sleep(POLL_SECONDS)
            waiting, running = len(self.policy.queue), len(self.in_flight)
            overloaded = overloaded + 1 if waiting > 2 * big_b else 0
            draining = draining and running > self.value
            if overloaded >= OVERLOADED_POLLS and not draining:
                self.value, overloaded, draining = max(1, int(CUT * running)), 0, True
            elif waiting < big_b and running >= 0.9 * self.value:
                self.value = min(self.high, int(self.value * GROW) + 1)

    async def dispatch(self, start: Callable[[], Coroutine[Any, Any, None]],
                       cancel: Callable[[set[asyncio.Task[Any]]], Awaitable[None]]) -> None:
        """Keep up to the cap of episodes in flight (``start()``: the next one), refilled as
        they finish, until cancelled; then ``cancel`` the rest."""
        in_flight = self.in_flight
        controller = asyncio.create_task(self.control())
        try:
            while True:
                while len(in_flight) < self.value:
                    in_flight.add(asyncio.create_task(start()))
                done, _ = await asyncio.wait(in_flight, timeout=DISPATCH_WAIT,
                                             return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    in_flight.discard(task)
                    task.result()
        finally:
            await cancel({*in_flight, controller})


async def adaptive_dispatcher(run: Run) -> None:
    """Episode tasks up to an adaptive cap (``AdaptiveCap``), refilled as they finish."""
    stream = episode_stream(run.workload)
    run.running.set()
    await AdaptiveCap(run.policy).dispatch(lambda: play(run, next(stream)), _cancel)


async def hand_written_loop(run: Run) -> None:
    """A task per episode slot, each playing its slot's episodes one after another; the
    policy's own queue batches their requests."""

    async def slot_loop(slot: int) -> None:
        for episode in slot_episodes(run.workload, slot):
            await play(run, episode)

    await per_slot(run.workload.num_slots, slot_loop, run.running, _cancel)


async def per_slot(num_slots: int, slot_loop: Callable[[int], Coroutine[Any, Any, None]],
                   running: asyncio.Event,
                   cancel: Callable[[set[asyncio.Task[Any]]], Awaitable[None]]) -> None:
    """A task per slot running ``slot_loop(slot)`` (``running`` set once they are started),
    until cancelled; then ``cancel`` them."""
    tasks = {asyncio.create_task(slot_loop(slot)) for slot in range(num_slots)}
    running.set()
    try:
        await asyncio.gather(*tasks)
    finally:
        await cancel(tasks)


async def aiovec_env_centric(run: Run, backend: str, coroutines: bool | None = None) -> None:
    """The episodes as sub-envs (same-step autoreset: a finished episode's row already holds
    the next one's first chat): ``recv`` the first B to finish, ask the policy for that batch
    in one call, ``send`` its actions; the policy call runs as a task so that the next
    ``recv`` overlaps it. ``coroutines``: the sub-envs are ``AsyncChatEnv`` (default: on the
    async backend only), else ``ChatEnv``."""
    workload, policy, recorder = run.workload, run.policy, run.recorder
    num_slots, big_b = workload.num_slots, workload.policy_batch
    env_class = AsyncChatEnv if (backend == "async" if coroutines is None else coroutines) \
        else ChatEnv
    fns = [functools.partial(env_class, workload, slot) for slot in range(num_slots)]
    owed = 0  # sub-envs sent an action and not received yet
    acting = Background()  # policy calls, each then sending its actions
    # copy=False: each sub-env returns a new tuple every turn and never changes one it
    # returned, so the chats need no copy (the guide's cheap path).
    async with aiovec.AsyncVectorEnv(fns, backend=backend, batch_size=big_b, copy=False,
                                     autoreset_mode=AutoresetMode.SAME_STEP) as envs:

        async def act(observations: Any, env_ids: Any) -> None:
            nonlocal owed
            actions = await policy.generate_batch(observations)
            envs.send(actions, env_ids)
            owed += len(env_ids)

        observations, _ = await envs.reset(seed=workload.seed)
        now = time.perf_counter()
        started = [now] * num_slots
        for first in range(0, num_slots, big_b):
            rows = np.arange(first, min(num_slots, first + big_b))
            acting.start(act(observations[first:first + big_b], rows))
        run.running.set()
        try:
            while True:
                while not owed:  # every episode is waiting on the policy
                    acting.changed.clear()
                    acting.check()
                    await acting.changed.wait()
                # Full batches: the policy's own queue batches across calls, and fewer, fuller
                # recv calls cost the least CPU per turn (a batching window, min_size=B // 4
                # and wait=a, cost about 1.3x as much at N = 1,024 in the stress variant).
                batch = await envs.recv(batch_size=big_b)
                owed -= len(batch.env_ids)
                ended = np.flatnonzero(batch.terminations | batch.truncations)
                if ended.size:
                    now = time.perf_counter()
                    for row in ended.tolist():
                        env_id = int(batch.env_ids[row])
                        recorder.finished(started[env_id], now)
                        started[env_id] = now
                acting.check()
                acting.start(act(batch.observations, batch.env_ids))
        finally:
            await acting.cancel()


async def _cancel(tasks: set[asyncio.Task[Any]]) -> None:
    """Cancel ``tasks`` and wait for them; again while any is left (on Python 3.11,
    ``asyncio.wait_for`` loses a cancellation that lands as its inner call finishes)."""
    left = set(tasks)
    while left:
        for task in left:
            task.cancel()
        _, left = await asyncio.wait(left, timeout=1.0)
    for task in tasks:  # their errors were raised already, or are of no interest now
        if not task.cancelled():
            task.exception()


# ------------------------------------------------------------------------------ measuring


@dataclass(frozen=True)
class Contender:
    name: str
    run: Callable[[Run], Coroutine[Any, Any, None]]
    #: It times its own window (whole batches), so it has no warm-up.
    aligned: bool = False


HAND_WRITTEN = "hand-written loop"
CONTENDERS = {c.name: c for c in (
    Contender("lockstep gather (SkyRL/verl)", lockstep_gather, aligned=True),
    Contender("task per episode (verifiers)", task_per_episode),
    Contender("adaptive dispatcher (prime-rl)", adaptive_dispatcher),
    Contender(HAND_WRITTEN, hand_written_loop),
    Contender("aiovec async", functools.partial(aiovec_env_centric, backend="async")),
    Contender("aiovec process", functools.partial(aiovec_env_centric, backend="process")),
    Contender("aiovec process, coroutine envs",
              functools.partial(aiovec_env_centric, backend="process", coroutines=True)),
)}


async def _until(condition: Callable[[], bool], work: asyncio.Task[None]) -> None:
    """Poll ``condition`` until it holds; raise if ``work`` ended first (with its error)."""
    while not condition():
        if work.done():
            work.result()
            raise RuntimeError("the contender stopped before its window ended")
        await asyncio.sleep(0.02)


async def _measure(contender: Contender, workload: Workload, plan: Plan,
                   warmup_turns: int) -> Sample:
    policy = PolicyServer(workload)
    recorder = Recorder(policy)
    run = Run(workload, policy, recorder, plan)
    server = asyncio.create_task(policy.serve())
    work = asyncio.create_task(contender.run(run))
    try:
        with anyio.fail_after(plan.cell_timeout):
            await _until(run.running.is_set, work)
            if not contender.aligned:
                warm = policy.served + warmup_turns
                await _until(lambda: policy.served >= warm, work)
                recorder.open()
                await asyncio.sleep(plan.seconds)
                recorder.close()
            await _until(recorder.closed.is_set, work)
    finally:
        await _cancel({work})
        # What the contender left behind (its clean-up cut short by a second cancellation,
        # or a rollout whose cancellation asyncio.wait_for lost on Python 3.11) is cancelled
        # while the policy still serves: none is left waiting on it forever.
        await _cancel(asyncio.all_tasks() - {server, asyncio.current_task()})
        await _cancel({server})
    assert recorder.sample is not None
    return recorder.sample


def measure(contender: Contender, workload: Workload, plan: Plan, warmup_turns: int,
            loop: str) -> Sample:
    """Run ``contender`` on a fresh event loop: warm up until the policy has served
    ``warmup_turns`` requests, then time ``plan.seconds``."""
    return on_loop(loop, functools.partial(_measure, contender, workload, plan, warmup_turns))

