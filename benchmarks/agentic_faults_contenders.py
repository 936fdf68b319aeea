"""The contenders of ``agentic_faults.py`` under faults, each from its framework's pattern,
and the run of one of them in a process of its own (which the benchmark then interrupts).

Every contender runs the same episodes (``agentic_workload``), meets the same faults
(``agentic_faults_workload``) and applies the same deadline and retry to each tool call; each
creates a sandbox per episode (at most ``creation_rate`` a second) and deletes it at the end,
and has each finished episode judged (at most ``judge_concurrency`` at once). They differ in
how they orchestrate (as in ``agentic_contenders``) and in what they do with an episode whose
tool call failed on every attempt, as their frameworks do (read in their code, 2026):

- ``lockstep gather``: ``asyncio.gather`` over the batch with failed rollouts skipped (SkyRL's
  ``skip_failed_rollouts``, proposed; at HEAD one failure fails the whole step);
- ``task per episode``: the failure stored with the rollout, which is then scored (reward 0)
  and kept (verifiers' ``state["error"]``); at exit, every sandbox of its own is deleted in
  bulk (its teardown, hooked to SIGINT);
- ``adaptive dispatcher``: errored rollouts dropped from training (prime-rl);
- ``hand-written loop``: the failure reported as lost;
- ``aiovec``: the env raises, the sub-env is restarted, ``episode_outcomes`` says ``"lost"``.

The task contenders keep the sandbox id their create call returns, as the frameworks' sandbox
code does: a create that fails after the sandbox exists leaves one they cannot name. aiovec's
env names the sandbox first and registers its delete as a cleanup before creating it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import json
import os
import resource
import signal
import sys
import time
from collections.abc import Callable, Coroutine
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from agentic_contenders import AdaptiveCap, per_slot
from agentic_faults_workload import (
    Faults,
    FaultyChatEnv,
    SandboxCreateError,
    Sandboxes,
    ToolFailed,
    TrackedEpisode,
    call_tool,
    create_fails,
    episode_truth,
    provider,
)
from agentic_workload import PolicyServer, Workload
from gymnasium.vector import AutoresetMode

import aiovec

__all__ = ["CONTENDERS", "FaultSample", "run_child"]


@dataclass(frozen=True)
class FaultSample:
    """One contender's timed window under faults (or none)."""

    goodput: float  # episodes not lost and reported as such, per second
    p50: float  # latency of the episodes no fault touched, seconds
    p99: float
    lost: int  # episodes lost to faults and reported lost (kept out of training)
    misreported: int  # infrastructure failures reported as the env's outcome (or the reverse)
    not_once: int  # episodes dropped unreported (a failed batch) or reported twice
    orphans: int  # leases alive at the window's end that their owner does not know of
    episodes: int
    seconds: float
    cpu: float


class Spacing:
    """Creations spaced ``1 / rate`` apart, bursts of 10 ms worth (as ``aiovec.Limit``)."""

    def __init__(self, rate: float) -> None:
        self.interval = 1.0 / rate
        self.tolerance = (max(1, round(rate * 0.01)) - 1) * self.interval
        self.arrival = 0.0

    async def take(self) -> None:
        now = asyncio.get_running_loop().time()
        at = max(self.arrival, now)
        self.arrival = at + self.interval
        if at - self.tolerance > now:
            await asyncio.sleep(at - self.tolerance - now)


class Recorder:
    """Counts the window's reports against the truth of each episode."""

    def __init__(self, workload: Workload, faults: Faults, sandboxes: Sandboxes,
                 sequential: bool) -> None:
        self.workload, self.faults, self.sandboxes = workload, faults, sandboxes
        #: Each slot plays its episodes one after another: a slot's k-th report must follow
        #: its (k-1)-th, and a gap is an episode dropped unreported.
        self.last_k: dict[int, int] | None = {} if sequential else None
        self.recording = False
        self.closed = asyncio.Event()
        self.seen: set[int] = set()
        self.latencies: list[float] = []
        self.good = self.lost = self.misreported = self.not_once = 0
        self._start = (0.0, 0.0)
        self.sample: FaultSample | None = None

    def report(self, tracked_id: int, outcome: str, started: float,
               now: float | None = None) -> None:
        """Episode ``tracked_id`` ended: ``"ok"``, ``"lost"``, ``"scored"`` (a failure kept as
        the env's outcome) or ``"dropped"`` (never reported to training)."""
        if not self.recording:
            return
        if tracked_id in self.seen:
            self.not_once += 1
            return
        self.seen.add(tracked_id)
        slot, k = tracked_id >> 32, tracked_id & 0xFFFFFFFF
        if self.last_k is not None:
            previous = self.last_k.get(slot)
            if previous is not None and k != previous + 1:
                self.not_once += abs(k - previous - 1)  # skipped (or gone back over) episodes
            self.last_k[slot] = k
        lost, affected = episode_truth(self.workload, self.faults, slot, k)
        if outcome == "dropped":
            self.not_once += 1
        elif (outcome == "lost") != lost:  # "scored" (a loss kept), or "ok" when lost
            self.misreported += 1
        elif lost:
            self.lost += 1
        else:
            self.good += 1
            if not affected:
                self.latencies.append((time.perf_counter() if now is None else now) - started)

    @staticmethod
    def _now() -> tuple[float, float]:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return time.perf_counter(), usage.ru_utime + usage.ru_stime

    def open(self) -> None:
        self._start = self._now()
        self.recording = True

    def elapsed(self) -> float:
        return time.perf_counter() - self._start[0]

    def close(self) -> None:
        self.recording = False
        end = self._now()
        wall, cpu = end[0] - self._start[0], end[1] - self._start[1]
        latencies = np.array(self.latencies or [np.nan])
        self.sample = FaultSample(
            goodput=self.good / wall, p50=float(np.percentile(latencies, 50)),
            p99=float(np.percentile(latencies, 99)), lost=self.lost,
            misreported=self.misreported, not_once=self.not_once,
            orphans=self.sandboxes.orphans(), episodes=len(self.seen), seconds=wall,
            cpu=cpu / wall)
        self.closed.set()


@dataclass
class Run:
    """What a contender gets: the workload and its faults, the policy, the sandboxes, the
    limits, the recorder, the window, and an event to set once its steady loop runs."""

    workload: Workload
    faults: Faults
    policy: PolicyServer
    sandboxes: Sandboxes
    recorder: Recorder
    seconds: float
    ledger: str
    owner: str
    creation: Spacing
    judge: asyncio.Semaphore
    running: asyncio.Event = field(default_factory=asyncio.Event)


# --------------------------------------------------------------- one episode, task-centric


async def create_sandbox(run: Run, tracked: TrackedEpisode) -> str:
    """Create the episode's sandbox as the frameworks' code does: the provider's reply names
    it; a failed create is retried once (a sandbox made by the failed call is not known)."""
    for attempt in range(2):
        await run.creation.take()
        name = run.sandboxes.name(tracked.slot, tracked.k, attempt)
        try:
            return await run.sandboxes.create(
                name, create_fails(run.faults, tracked.slot, tracked.k, attempt))
        except SandboxCreateError:
            if attempt:
                raise
    raise AssertionError("unreachable")


async def play(run: Run, tracked: TrackedEpisode) -> None:
    """One episode: its sandbox, policy and tool calls until it ends, the judge; the sandbox
    deleted on every way out. ``ToolFailed`` when a tool call failed on every attempt."""
    sandbox = await create_sandbox(run, tracked)
    try:
        messages = tracked.messages
        while True:
            action = await run.policy.generate(messages)
            messages, done = await call_tool(tracked, action, run.faults)
            if done:
                break
        async with run.judge:
            await asyncio.sleep(run.faults.judge_seconds)
    finally:
        await run.sandboxes.delete(sandbox)


async def play_reported(run: Run, tracked: TrackedEpisode, failed_as: str) -> None:
    """``play``, reported: ``"ok"``, or ``failed_as`` when a tool call failed for good."""
    started = time.perf_counter()
    try:
        await play(run, tracked)
    except (ToolFailed, SandboxCreateError):
        run.recorder.report(tracked.id, failed_as, started)
    else:
        run.recorder.report(tracked.id, "ok", started)


def stream(workload: Workload) -> itertools.chain[TrackedEpisode]:
    """Every slot's first episode, then every slot's second, ... (a dataset read in order)."""
    return itertools.chain.from_iterable(
        (TrackedEpisode(workload, slot, k) for slot in range(workload.num_slots))
        for k in itertools.count())


async def _cancel(tasks: set[asyncio.Task[Any]]) -> None:
    """Cancel each task once (one already being cancelled is left to finish its clean-up: a
    second cancellation would cut its sandbox's delete short), and wait for them; again for
    any still running after 5 s (on Python 3.11 ``asyncio.wait_for`` may lose one)."""
    left = {task for task in tasks if not task.done()}
    while left:
        for task in left:
            if not task.cancelling():
                task.cancel()
        _, left = await asyncio.wait(left, timeout=5.0)
        for task in left:
            task.uncancel()


# ----------------------------------------------------------------------------- contenders


def _note_end(ended: dict[int, float], tracked_id: int, _: object) -> None:
    ended[tracked_id] = time.perf_counter()


async def lockstep_gather(run: Run) -> None:
    """Batch k: every slot's k-th episode under one gather, failed rollouts skipped; the
    window is whole batches (from a batch's start to the end of the first batch ending
    ``seconds`` later)."""
    run.running.set()
    recorder = run.recorder
    recorder.open()
    for k in itertools.count():
        batch = [TrackedEpisode(run.workload, slot, k) for slot in range(run.workload.num_slots)]
        tasks = [asyncio.create_task(play(run, tracked)) for tracked in batch]
        started = time.perf_counter()
        ended: dict[int, float] = {}
        for tracked, task in zip(batch, tasks):
            task.add_done_callback(functools.partial(_note_end, ended, tracked.id))
        try:
            results = await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            await _cancel({task for task in tasks if not task.done()})
        for tracked, result in zip(batch, results):
            if isinstance(result, BaseException) and not isinstance(
                    result, (ToolFailed, SandboxCreateError)):
                raise result
            recorder.report(tracked.id, "lost" if isinstance(result, BaseException) else "ok",
                            started, ended[tracked.id])
        if recorder.recording and recorder.elapsed() >= run.seconds:
            recorder.close()  # and on with the next batches, until interrupted


async def task_per_episode(run: Run) -> None:
    """A task per episode behind a semaphore of N; a failed rollout scored and kept; at exit
    (a SIGINT included) every sandbox of this owner deleted in bulk."""
    permits = asyncio.Semaphore(run.workload.num_slots)
    rollouts: set[asyncio.Task[None]] = set()

    async def rollout(tracked: TrackedEpisode) -> None:
        try:
            await play_reported(run, tracked, "scored")
        finally:
            permits.release()

    run.running.set()
    try:
        for tracked in stream(run.workload):
            await permits.acquire()
            task = asyncio.create_task(rollout(tracked))
            rollouts.add(task)
            task.add_done_callback(rollouts.discard)
    finally:
        await _cancel(rollouts)
        await asyncio.gather(*(  # the teardown: list this owner's sandboxes, delete each
            run.sandboxes.delete(entry.name) for entry in os.scandir(run.ledger)
            if entry.name.startswith(f"{run.owner}-")))


async def adaptive_dispatcher(run: Run) -> None:
    """Episode tasks up to an adaptive cap (``agentic_contenders.AdaptiveCap``); errored
    rollouts dropped from training."""
    episodes = stream(run.workload)
    run.running.set()
    await AdaptiveCap(run.policy).dispatch(
        lambda: play_reported(run, next(episodes), "lost"), _cancel)


async def hand_written_loop(run: Run) -> None:
    """A task per slot, playing its episodes one after another; a failure reported lost."""

    async def slot_loop(slot: int) -> None:
        for k in itertools.count():
            await play_reported(run, TrackedEpisode(run.workload, slot, k), "lost")

    await per_slot(run.workload.num_slots, slot_loop, run.running, _cancel)


async def aiovec_env_centric(run: Run) -> None:
    """``FaultyChatEnv`` sub-envs on the async backend: ``recv`` the first B, one policy
    batch, ``send``; a restart policy with a failure budget; ``episode_outcomes`` per row."""
    workload, faults, policy, recorder = run.workload, run.faults, run.policy, run.recorder
    num_slots, big_b = workload.num_slots, workload.policy_batch
    fns = [functools.partial(FaultyChatEnv, workload, faults, slot, run.ledger, run.owner)
           for slot in range(num_slots)]
    deadline = (faults.retries + 1) * faults.tool_deadline + 10.0  # a call's, beyond the tools'
    owed = 0
    acting: set[asyncio.Task[None]] = set()
    sent = asyncio.Event()
    limits = {"sandbox": aiovec.Limit(rate=faults.creation_rate),
              "judge": aiovec.Limit(concurrency=faults.judge_concurrency)}
    restart = aiovec.RestartPolicy(max_restarts=None, max_failure_fraction=0.05,
                                   failure_window=1000)
    async with aiovec.AsyncVectorEnv(fns, backend="async", batch_size=big_b, copy=False,
                                     autoreset_mode=AutoresetMode.SAME_STEP, timeout=deadline,
                                     limits=limits, restart=restart) as envs:

        async def act(observations: Any, env_ids: Any) -> None:
            nonlocal owed
            actions = await policy.generate_batch(observations)
            envs.send(actions, env_ids)
            owed += len(env_ids)
            sent.set()

        def start(observations: Any, env_ids: Any) -> None:
            task = asyncio.create_task(act(observations, env_ids))
            acting.add(task)
            task.add_done_callback(acting.discard)

        observations, infos = await envs.reset(seed=workload.seed)
        current = [int(i) for i in infos["episode"]]
        now = time.perf_counter()
        started = [now] * num_slots
        for first in range(0, num_slots, big_b):
            start(observations[first:first + big_b], np.arange(first, min(num_slots,
                                                                           first + big_b)))
        run.running.set()
        try:
            while True:
                while not owed:  # every episode is waiting on the policy
                    sent.clear()
                    await sent.wait()
                batch = await envs.recv(batch_size=big_b)
                owed -= len(batch.env_ids)
                outcomes = aiovec.episode_outcomes(batch.terminations, batch.truncations,
                                                   batch.infos)
                ended = np.flatnonzero(outcomes != "")
                if ended.size:
                    now = time.perf_counter()
                    ids, has_id = batch.infos["episode"], batch.infos["_episode"]
                    for row in ended.tolist():
                        env_id = int(batch.env_ids[row])
                        recorder.report(current[env_id],
                                        "lost" if outcomes[row] == "lost" else "ok",
                                        started[env_id], now)
                        started[env_id] = now
                        if has_id[row]:
                            current[env_id] = int(ids[row])
                start(batch.observations, batch.env_ids)
        finally:
            await _cancel(set(acting))


CONTENDERS: dict[str, Callable[[Run], Coroutine[Any, Any, None]]] = {
    "lockstep gather (SkyRL/verl)": lockstep_gather,
    "task per episode (verifiers)": task_per_episode,
    "adaptive dispatcher (prime-rl)": adaptive_dispatcher,
    "hand-written loop": hand_written_loop,
    "aiovec async": aiovec_env_centric,
}
#: Contenders that time their own window (whole batches).
ALIGNED = {"lockstep gather (SkyRL/verl)"}
#: Contenders whose slots each play their episodes one after another (checked for gaps).
SEQUENTIAL = {"lockstep gather (SkyRL/verl)", "hand-written loop", "aiovec async"}


# --------------------------------------------------------------------- the child's run


async def _first(work: asyncio.Task[None], event: asyncio.Event) -> None:
    """Until ``event`` is set or ``work`` ended."""
    waiter = asyncio.create_task(event.wait())
    try:
        await asyncio.wait({work, waiter}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()


async def _child(spec: dict[str, Any]) -> None:
    workload, faults = Workload(**spec["workload"]), Faults(**spec["faults"])
    name, ledger, owner = spec["contender"], spec["ledger"], spec["owner"]
    sandboxes = provider(ledger, faults, owner)
    policy = PolicyServer(workload)
    recorder = Recorder(workload, faults, sandboxes, sequential=name in SEQUENTIAL)
    run = Run(workload, faults, policy, sandboxes, recorder, spec["seconds"], ledger, owner,
              Spacing(faults.creation_rate), asyncio.Semaphore(faults.judge_concurrency))
    server = asyncio.create_task(policy.serve())
    began = time.perf_counter()
    work = asyncio.create_task(CONTENDERS[name](run))
    try:
        await _first(work, run.running)
        print("READY", flush=True)  # leases exist: a kill trial may strike now
        if name not in ALIGNED:  # from the contender's start, for all alike (aiovec's
            await asyncio.sleep(spec["warmup"] - (time.perf_counter() - began))  # make too)
        if name not in ALIGNED:
            recorder.open()
            await asyncio.sleep(spec["seconds"])
            recorder.close()
        await _first(work, recorder.closed)
        if work.done():
            work.result()
            raise RuntimeError("the contender stopped before its window ended")
        assert recorder.sample is not None
        print("RESULT " + json.dumps(asdict(recorder.sample)), flush=True)
        await work  # until interrupted
    finally:  # cancelled once (its clean-up may take a while), then waited for
        work.cancel()
        await asyncio.wait({work}, timeout=120.0)
        server.cancel()


def run_child(spec: dict[str, Any]) -> None:
    """Run one contender until interrupted (SIGINT: the event loop's runner cancels it, its
    clean-up runs; SIGKILL: nothing of this process runs)."""
    # The SIGINT is the run's protocol: a shell that starts the benchmark in the background
    # (``... &`` in a script, no job control) starts it with SIGINT ignored, which its children
    # inherit, and then no contender would ever see one (each ran on, killed after 120 s).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    loop_factory = None
    if spec.get("loop") == "uvloop":
        import uvloop

        loop_factory = uvloop.new_event_loop
    with contextlib.suppress(KeyboardInterrupt), asyncio.Runner(
            loop_factory=loop_factory) as runner:
        runner.run(_child(spec))
    sys.stdout.flush()


def spec_for(contender: str, workload: Workload, faults: Faults, ledger: Path, owner: str,
             seconds: float, warmup: float, loop: str) -> dict[str, Any]:
    return {"contender": contender, "workload": asdict(workload), "faults": asdict(faults),
            "ledger": str(ledger), "owner": owner, "seconds": seconds, "warmup": warmup,
            "loop": loop}
