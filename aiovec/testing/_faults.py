"""``FaultyEnv``: an environment that fails on purpose, for testing fault handling end to end.

It raises, hangs, exits abruptly, SIGKILLs itself or returns unpicklable values, at a given call
or at random with given probabilities, in its factory (``init``), ``reset``, ``step`` or
``close``. A ``FaultLedger`` (a directory of append-only files) records what every instance did,
across restarts and worker deaths, so a test can reconcile what the vector env reported with
what the sub-envs really did.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

__all__ = [
    "FAULT_KINDS",
    "Fault",
    "FaultLedger",
    "FaultyEnv",
    "InjectedFault",
    "hangs_in_progress",
    "release_hangs",
]

#: What a fault does: raise ``InjectedFault``; block (until ``release_hangs`` or
#: ``hang_seconds``); ``os._exit``; SIGKILL its own process; return an obs / info that pickle
#: refuses; return an obs one element short of its space's shape.
FAULT_KINDS = ("raise", "hang", "exit", "kill", "unpicklable_obs", "unpicklable_info",
               "misshapen_obs")
PHASES = ("init", "reset", "step", "close")
_PROCESS_ENDING = ("exit", "kill")


class InjectedFault(RuntimeError):
    """The exception a ``FaultyEnv`` raises on purpose."""


@dataclass(frozen=True)
class Fault:
    """Fail with ``kind`` at the ``at``-th (0-based) call of ``phase`` of an instance.

    ``instance`` limits the fault to one instance of the sub-env (0: the first made; 1: its
    first restart; ...), ``None`` strikes every instance; instances are counted by the ledger,
    so without one every instance is instance 0. For ``phase="init"``, ``at`` is ignored:
    the fault strikes while making the given instance(s).
    """

    kind: str
    phase: str = "step"
    at: int = 0
    instance: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {self.kind!r}; choose one of {FAULT_KINDS}")
        if self.phase not in PHASES:
            raise ValueError(f"unknown phase {self.phase!r}; choose one of {PHASES}")


class FaultLedger:
    """What ``FaultyEnv`` instances did, one append-only file per ``env_id`` in ``directory``.

    Each event is one line written with a single ``O_APPEND`` write, so records survive the
    process that wrote them being killed a moment later. Events: ``new`` (an instance is being
    made), ``make``, ``reset``, ``step``, ``close`` (each when it completed) and
    ``fault <kind> <phase>`` (before the fault strikes).
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)

    def _path(self, env_id: int) -> Path:
        return self.directory / f"{env_id}.log"

    def record(self, env_id: int, event: str) -> None:
        fd = os.open(self._path(env_id), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (event + "\n").encode())
        finally:
            os.close(fd)

    def events(self, env_id: int) -> list[str]:
        path = self._path(env_id)
        return path.read_text().splitlines() if path.exists() else []

    def count(self, env_id: int, event: str) -> int:
        """How many recorded events of ``env_id`` equal ``event`` (or start with it + space)."""
        return sum(1 for line in self.events(env_id)
                   if line == event or line.startswith(event + " "))

    def faults(self, env_ids: Iterable[int]) -> int:
        """Every fault injected into the given sub-envs."""
        return sum(self.count(env_id, "fault") for env_id in env_ids)


_hangs_lock = threading.Lock()
_hangs: set[threading.Event] = set()


def release_hangs() -> int:
    """End every ``hang`` fault in progress in this process (its call then raises); returns
    how many there were."""
    with _hangs_lock:
        blocking = [event for event in _hangs if not event.is_set()]
        for event in blocking:
            event.set()
        return len(blocking)


def hangs_in_progress() -> int:
    """How many ``hang`` faults are blocking a call in this process right now (a leak check
    counts them: a thread stuck in one is still running). One released is not: its thread
    runs on, raising, whenever it is next scheduled."""
    with _hangs_lock:
        return sum(1 for event in _hangs if not event.is_set())


def _hang(seconds: float) -> None:
    event = threading.Event()
    with _hangs_lock:
        _hangs.add(event)
    try:
        event.wait(seconds)
    finally:
        with _hangs_lock:
            _hangs.discard(event)
    raise InjectedFault("a hang fault ended (released or timed out)")


def _in_worker_process() -> bool:
    """True in a process that exists only to host sub-envs (a process worker or Ray actor)."""
    worker = sys.modules.get("aiovec._backends._process._worker")
    actor = sys.modules.get("aiovec._backends._ray._actor")
    return bool(getattr(worker, "IN_WORKER", False) or getattr(actor, "IN_ACTOR", False))


def _in_parent_worker() -> bool:
    """True on the thread of a process backend's parent worker (``parent_worker=True``)."""
    module = sys.modules.get("aiovec._backends._process._parent_worker")
    return bool(module is not None and module.on_parent_worker())


class _Unpicklable(np.ndarray):  # type: ignore[type-arg,unused-ignore]
    """An array that refuses to be pickled (as do arrays holding handles, locks, …)."""

    def __reduce__(self) -> Any:
        raise TypeError("this observation cannot be pickled (a fault injected on purpose)")


def _unpicklable_info() -> dict[str, Any]:
    return {"handle": threading.Lock()}


class FaultyEnv(gym.Env[np.ndarray, np.ndarray]):
    """A small deterministic env that fails where told.

    Observation ``[episode step, last action, a draw from np_random, instance]`` (float64):
    seeded resets give identical trajectories for identical actions, and the last action and
    step count let a test prove that no reply is stale. Episodes end (``terminated``) after
    ``episode_length`` steps; the reward is the action.

    Faults come from ``faults`` (scheduled) and ``probabilities`` (``{kind: p}`` per step,
    drawn from a generator seeded by ``fault_seed``, ``env_id`` and the instance number, never
    from the env's own ``np_random``). ``exit`` and ``kill`` end the process hosting the env:
    outside an aiovec worker process they raise ``InjectedFault`` instead, so a test runner is
    never killed by mistake. ``make_delay`` seconds of sleep in the factory model a slow start.
    """

    metadata = {"render_modes": []}  # noqa: RUF012 - Gymnasium's own convention

    def __init__(
        self,
        env_id: int = 0,
        *,
        faults: Iterable[Fault] = (),
        probabilities: Mapping[str, float] | None = None,
        fault_seed: int = 0,
        episode_length: int = 25,
        ledger: str | os.PathLike[str] | None = None,
        hang_seconds: float = 3600.0,
        make_delay: float = 0.0,
    ) -> None:
        self.env_id = env_id
        self.faults = tuple(faults)
        self.probabilities = dict(probabilities or {})
        for kind in self.probabilities:
            if kind not in FAULT_KINDS:
                raise ValueError(f"unknown fault kind {kind!r}; choose one of {FAULT_KINDS}")
        self.episode_length = episode_length
        self.ledger = None if ledger is None else FaultLedger(ledger)
        self.hang_seconds = hang_seconds
        self.observation_space = spaces.Box(-np.inf, np.inf, (4,), np.float64)
        self.action_space = spaces.Box(-1e9, 1e9, (), np.float64)
        self.instance = 0 if self.ledger is None else self.ledger.count(env_id, "new")
        self._record("new")
        self._fault_rng = np.random.default_rng(
            [fault_seed, env_id, self.instance, zlib.crc32(b"aiovec-faults")])
        self._calls = dict.fromkeys(PHASES, 0)
        self._episode_step = 0
        self._last_action = 0.0
        self._strike("init")
        if make_delay:
            time.sleep(make_delay)
        self._record("make")

    # ------------------------------------------------------------------ the env

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        kind = self._strike("reset")
        self._episode_step = 0
        self._last_action = 0.0
        self._record("reset")
        return self._observation(kind), self._info(kind)

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        kind = self._strike("step")
        self._episode_step += 1
        self._last_action = float(action)
        self._record("step")
        terminated = self._episode_step >= self.episode_length
        return self._observation(kind), float(action), terminated, False, self._info(kind)

    def close(self) -> None:
        self._strike("close")
        self._record("close")

    # ------------------------------------------------------------------ faults

    def _observation(self, kind: str | None) -> np.ndarray:
        values = [self._episode_step, self._last_action, self.np_random.random(),
                  self.instance]
        obs = np.array(values, dtype=np.float64)
        if kind == "misshapen_obs":
            return obs[:-1]
        return obs.view(_Unpicklable) if kind == "unpicklable_obs" else obs

    @staticmethod
    def _info(kind: str | None) -> dict[str, Any]:
        return _unpicklable_info() if kind == "unpicklable_info" else {}

    def _record(self, event: str) -> None:
        if self.ledger is not None:
            self.ledger.record(self.env_id, event)

    def _due(self, phase: str) -> str | None:
        """The fault kind due at this call of ``phase``, if any."""
        call = self._calls[phase]
        self._calls[phase] += 1
        for fault in self.faults:
            if (fault.phase == phase and (phase == "init" or fault.at == call)
                    and fault.instance in (None, self.instance)):
                return fault.kind
        if phase == "step":
            for kind, probability in self.probabilities.items():
                if self._fault_rng.random() < probability:
                    return kind
        return None

    def _strike(self, phase: str) -> str | None:
        """Inject the fault due now: raise, hang, end the process, or return the kind of
        value to corrupt (``unpicklable_*``); ``None`` when no fault is due."""
        kind = self._due(phase)
        if kind is None:
            return None
        self._record(f"fault {kind} {phase}")
        if kind == "raise":
            raise InjectedFault(f"sub-env {self.env_id} failed in {phase} (injected)")
        if kind == "hang":
            _hang(self.hang_seconds)
        if kind in _PROCESS_ENDING:
            if _in_parent_worker():  # a thread: it ends as the process it stands for would
                raise SystemExit(f"a {kind!r} fault ended the parent worker's thread")
            if not _in_worker_process():
                raise InjectedFault(f"a {kind!r} fault would end this process, which is not "
                                    "an aiovec worker: raising instead")
            sys.stdout.flush()
            if kind == "exit":
                os._exit(3)
            os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(60)  # pragma: no cover - the signal arrives first
        return kind
