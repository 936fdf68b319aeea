"""The Ray backend: sub-envs in Ray actors, several per actor, on one machine or a cluster.

Each actor (``_actor.EnvHost``) hosts a contiguous share of the sub-envs and serves one
batched call per request, so a vector step is one round trip per actor. Replies come back as
Ray object refs; each ref's completion callback (Ray's own thread, the mechanism behind
``await ref``) hands the reply to the event loop with its thread-safe "call soon", on asyncio
and trio alike, so the loop never blocks on Ray.

Results are written in place when the observations batch into arrays (``attach`` returns
``BatchBuffers``): an actor's ``StepBlock`` is copied into its rows of the batch arrays as it
lands, in the loop's thread, and the core sees ``None`` for every sub-env with nothing else to
report, as on the process backend. Actions of array spaces go out as one slice per actor.

aiovec owns failures: actors are created with ``max_restarts=0`` and ``max_task_retries=0``
(Ray's retries would re-run a step on a freshly restarted env). A dead actor, or the death of
its node, fails what it owed with ``WorkerDiedError``; a sub-env that misses a deadline gets
its actor killed (``ray.cancel`` cannot interrupt a running call on a sync actor); ``remake``
creates a new actor with the same options, which Ray may place on another node.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import os
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, ClassVar, cast

import anyio
import anyio.lowlevel
import anyio.to_thread
import cloudpickle
import gymnasium as gym
import numpy as np
import ray
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import concatenate, create_empty_array
from ray.exceptions import RayActorError

from aiovec._backends._base import CountdownPending, split_into_shares, workers_within
from aiovec._backends._ray._actor import EnvHost, StepBlock, Tallied
from aiovec._backends._registrations import export_registrations
from aiovec._core._backend import Arrivals, Backend, Pending
from aiovec._core._batching import take_rows
from aiovec._core._loop_wakeup import ThreadsafeCaller, threadsafe_caller
from aiovec._core._observations import misfit_failure, put_rows
from aiovec._core._requests import BatchBuffers, Failure, Op, Remade
from aiovec._core._selection import ActorOptions
from aiovec._core._spaces import VectorSpaces
from aiovec._exceptions import WorkerDiedError
from aiovec._limits._limit import WorkerLimits
from aiovec._limits._shared import SharedLimits

__all__ = ["RayBackend"]

#: Actor options aiovec sets itself, and why a user may not.
_OWNED_OPTIONS = {
    "max_restarts": "aiovec restarts sub-envs itself (restart=...): a Ray restart would hand "
                    "back a fresh env in the middle of an episode",
    "max_task_retries": "a retried step would run on a freshly restarted (reset) env",
    "max_concurrency": "an actor steps its sub-envs one call at a time (the vector env's own "
                       "max_concurrency= caps how many sub-envs execute at once)",
}
#: An actor steps its sub-envs: it holds one CPU unless told otherwise (``num_cpus=0``).
_DEFAULT_ACTOR_OPTIONS: dict[str, Any] = {"num_cpus": 1}
#: Spaces whose batches are plain arrays: an actor's share of a step is one slice of them.
_ARRAY_SPACES = (gym.spaces.Box, gym.spaces.Discrete, gym.spaces.MultiDiscrete,
                 gym.spaces.MultiBinary)
#: What a ref's future resolves to.
_Answer = list[Any] | StepBlock | Tallied

_RemoteEnvHost: Any = ray.remote(EnvHost)


@dataclass(eq=False)
class _Actor:
    """The driver's handle on one actor and the sub-envs it hosts."""

    index: int
    env_indices: range
    handle: Any
    alive: bool = True
    #: Why it is dead: the cause of every failure it reports from then on.
    death: WorkerDiedError | None = None
    #: Requests it owes a reply to.
    outstanding: set[_RayPending] = field(default_factory=set)


class _RayPending(CountdownPending):
    """Replies to one request, one batched reply per actor, settled in the loop's thread:
    what it counts down is actors."""

    __slots__ = ("_abandoned", "_backend", "_owing", "whole")

    def __init__(self, backend: RayBackend, op: Op, env_indices: Sequence[int],
                 arrivals: Arrivals | None) -> None:
        super().__init__(op, env_indices, arrivals, owed=0)
        self._backend = backend
        #: The positions (in this request) of the sub-envs each actor still owes.
        self._owing: dict[_Actor, Sequence[int]] = {}
        #: True when the request addresses every sub-env in order (position = env index).
        self.whole = self.env_indices == backend.every_env
        #: The caller gave up: later answers are not written into the batch arrays (an
        #: actor's answers to it and to a later call may settle in either order).
        self._abandoned = False

    def expect(self, actor: _Actor, positions: Sequence[int], reference: Any) -> None:
        self._owing[actor] = positions
        self.owed += 1
        actor.outstanding.add(self)
        wake = self._backend.wake
        reference.future().add_done_callback(functools.partial(_completed, wake, self, actor))

    def settle(self, actor: _Actor, future: Future[_Answer]) -> None:
        """The actor's call ended (runs in the loop's thread)."""
        positions = self._owing.get(actor)
        if positions is None:  # failed already: its actor was discarded or died
            return
        try:
            answer: Any = future.result()
            if type(answer) is Tallied:
                answer, (ended, run, failed) = answer
                self._backend.descendants_reaped += ended
                self._backend.cleanups.add(run, failed)
            if self._abandoned:  # nobody reads it; a later call's rows may be placed already
                replies: list[Any] = [None] * len(positions)
            elif type(answer) is StepBlock:
                replies = self._place_block(positions, answer)
            elif self._backend.buffers is not None and self.op in _PLACED_OPS:
                replies = self._place_each(positions, answer)
            else:
                replies = answer
        except RayActorError as error:
            self._backend.actor_died(actor, error)  # fails this request and all it owed
            return
        except Exception as error:  # Ray could not run the call (e.g. an argument it lost)
            replies = [Failure(self.env_indices[position], self.op.value, error,
                               f"{type(error).__name__}: {error}", str(error))
                       for position in positions]
        self._store(actor, positions, replies)

    def abandon(self) -> None:
        self._abandoned = True

    def _rows(self, positions: Sequence[int]) -> slice | np.ndarray[Any, np.dtype[np.intp]]:
        """The batch rows of the sub-envs at ``positions``."""
        if self.whole and type(positions) is range:
            return slice(positions.start, positions.stop)
        env_indices = self.env_indices
        return np.array([env_indices[position] for position in positions], dtype=np.intp)

    def _place_block(self, positions: Sequence[int], block: StepBlock) -> list[Any]:
        """Copy an actor's block into the batch arrays → the core's replies: ``None``, or
        ``(info, final)``, or a ``Failure`` (whose row keeps its previous observation)."""
        observations, rewards, terminations, truncations, extras = block
        replies: list[Any] = [None] * len(positions)
        failed = []
        for row, reply in extras:
            replies[row] = reply
            if type(reply) is Failure:
                failed.append(row)
        rows = self._rows(positions)
        if failed:
            kept = np.setdiff1d(np.arange(len(positions)), failed)
            rows = np.arange(self._backend.num_envs)[rows][kept]
            space = self._backend.batched_space
            assert space is not None
            observations = take_rows(observations, kept, space)
            rewards, terminations, truncations = (
                rewards[kept], terminations[kept], truncations[kept])
        buffers = self._backend.buffers
        assert buffers is not None
        put_rows(buffers.observations, rows, observations)
        buffers.rewards[rows] = rewards
        buffers.terminations[rows] = terminations
        buffers.truncations[rows] = truncations
        return replies

    def _place_each(self, positions: Sequence[int], replies: Sequence[Any]) -> list[Any]:
        """Replies that came one by one, written in place as a block's would be: a step's →
        ``None`` or ``(info, final)``; a reset's → ``(info, seed)``. Each observation is
        concatenated into its row as the core would batch it; one that does not fit fails its
        sub-env."""
        backend = self._backend
        buffers, space = backend.buffers, backend.batched_space
        assert buffers is not None
        assert space is not None
        placed: list[Any] = []
        for position, reply in zip(positions, replies):
            env_index = self.env_indices[position]
            if type(reply) is not tuple:  # a Failure
                placed.append(reply)
                continue
            row = take_rows(buffers.observations, slice(env_index, env_index + 1), space)  # views
            observation = reply[0]
            try:
                concatenate(space, [observation], row)
            except Exception as error:
                placed.append(misfit_failure(env_index, self.op.value, observation, space,
                                             error))
                continue
            try:
                if self.op is Op.RESET:
                    _, info, seed = reply
                    placed.append((info, seed))
                    continue
                _, reward, terminated, truncated, info, final = reply
                buffers.rewards[env_index] = reward
                buffers.terminations[env_index] = terminated
                buffers.truncations[env_index] = truncated
                placed.append((info, final) if info or final is not None else None)
            except Exception as error:
                placed.append(Failure.capture(env_index, self.op.value, error))
        return placed

    def fail(self, actor: _Actor, positions: Sequence[int], reason: WorkerDiedError) -> None:
        """The actor will never answer for ``positions`` (closing a dead actor is a no-op)."""
        if self.op is Op.CLOSE:
            self._store(actor, positions, [None] * len(positions))
            return
        self._store(actor, positions, [
            Failure(self.env_indices[position], self.op.value, reason, str(reason), "")
            for position in positions])

    def fail_owed(self, actor: _Actor, reason: WorkerDiedError) -> None:
        positions = self._owing.get(actor)
        if positions is not None:
            self.fail(actor, positions, reason)

    def _store(self, actor: _Actor, positions: Sequence[int], replies: Sequence[Any]) -> None:
        expected = self._owing.pop(actor, None) is not None
        actor.outstanding.discard(self)
        if type(positions) is range and positions.step == 1 and len(replies) == len(positions):
            self.replies[positions.start:positions.stop] = replies
        else:
            for position, reply in zip(positions, replies):
                self.replies[position] = reply
        if self.arrivals is not None:
            for position in positions:
                self.arrivals.land(self, position)
        if expected:
            self.paid()


#: Requests whose replies are written in place once ``attach`` returned buffers.
_PLACED_OPS = (Op.STEP, Op.RESET)


def _completed(wake: ThreadsafeCaller, pending: _RayPending, actor: _Actor,
               future: Future[_Answer]) -> None:
    """A ref's completion callback (Ray's thread): settle it in the event loop's thread."""
    with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is waiting any more
        wake(functools.partial(pending.settle, actor, future))


class RayBackend(Backend):
    """Sub-envs in ``num_workers`` Ray actors (default: one per CPU of the cluster).

    ``address`` is where to find Ray when it is not initialised in this process yet
    (``"auto"``, ``"ray://host:port"``, or ``"local"`` to start Ray here); an initialised
    runtime is used as it is. ``actor_options`` go to ``ActorClass.options`` unchanged (one
    mapping for every actor, or one per actor): resources, custom resources, scheduling
    strategies, placement groups, runtime envs.
    """

    name: ClassVar[str] = "ray"
    in_process: ClassVar[bool] = False

    def __init__(self, env_fns: Sequence[Any], autoreset_mode: AutoresetMode, *,
                 num_workers: int | None = None, address: str | None = None,
                 actor_options: ActorOptions | None = None,
                 max_concurrency: int | None = None, limits: SharedLimits | None = None,
                 episode_timeout: float | None = None) -> None:
        super().__init__(env_fns, autoreset_mode, limits=limits,
                         episode_timeout=episode_timeout)
        if num_workers is not None and not 1 <= num_workers <= self.num_envs:
            raise ValueError(f"num_workers must be between 1 and {self.num_envs}, "
                             f"got {num_workers}")
        if num_workers is not None:
            workers_within(num_workers, max_concurrency, num_workers)
        self.num_workers = num_workers
        #: At most this many actors (one steps one sub-env at a time): Gymnasium's meaning.
        self.max_concurrency = max_concurrency
        self.address = address
        self._actor_options = _check_actor_options(actor_options, num_workers)
        self._actors: list[_Actor] = []
        self._actor_of: list[int] = []
        self._blobs: list[bytes] = []
        self._limits_here: WorkerLimits | None = None
        #: Each actor's share of a request to every sub-env: (actor index, positions).
        self._every_share: list[tuple[int, range]] = []
        self.every_env: tuple[int, ...] = tuple(range(self.num_envs))
        self.wake: ThreadsafeCaller
        #: The vector env's single observation space once ``attach`` found that it batches
        #: into arrays (actors then answer steps with a ``StepBlock``), and those arrays.
        self.batched_space: gym.Space[Any] | None = None
        self.buffers: BatchBuffers | None = None

    # ------------------------------------------------------------------ start-up

    async def start(self) -> Pending:
        self.wake = threadsafe_caller()
        cpus = await anyio.to_thread.run_sync(_connect, self.address)
        num_actors = self.num_workers or workers_within(None, self.max_concurrency,
                                                        max(1, min(self.num_envs, cpus)))
        if isinstance(self._actor_options, list) and len(self._actor_options) != num_actors:
            raise ValueError(f"actor_options has {len(self._actor_options)} entries for "
                             f"{num_actors} actors")
        shares = split_into_shares(self.num_envs, num_actors)
        # Pickle first: a factory that cannot be pickled fails here, before any actor exists.
        registrations = export_registrations()  # what a fresh interpreter lacks
        self._blobs = [cloudpickle.dumps(({i: self.env_fns[i] for i in share}, registrations))
                       for share in shares]
        # The actors take the limits over TCP, at this machine's address in the cluster.
        self._limits_here = None if self.limits is None else await anyio.to_thread.run_sync(
            self.limits.for_remote_workers, _node_address())
        self._every_share = list(enumerate(shares))
        self._actor_of = [index for index, share in enumerate(shares) for _ in share]
        self._actors = [self._create_actor(index, share) for index, share in enumerate(shares)]
        return self.submit(Op.MAKE, self.every_env, [None] * self.num_envs)

    def _create_actor(self, index: int, share: range) -> _Actor:
        options = self._actor_options
        chosen = options[index] if isinstance(options, list) else options
        handle = _RemoteEnvHost.options(
            **{**_DEFAULT_ACTOR_OPTIONS, **chosen},
            max_restarts=0, max_task_retries=0, max_concurrency=1,
        ).remote(self.autoreset_mode.value, self._blobs[index], share, self.batched_space,
                 self._limits_here, self.episode_timeout)
        return _Actor(index, share, handle)

    async def attach(self, spaces: VectorSpaces) -> BatchBuffers | None:
        # Array actions travel as one slice per actor; others as one value per sub-env.
        self.takes_action_batches = isinstance(spaces.single_action_space, _ARRAY_SPACES)
        space = spaces.single_observation_space
        if not _batches_into_arrays(space):
            return None  # replies stay one per sub-env; the core batches them
        pending = _RayPending(self, Op.MAKE, self.every_env, None)
        for actor_index, positions in self._every_share:
            actor = self._actors[actor_index]
            if actor.alive:
                pending.expect(actor, positions, actor.handle.attach.remote(space))
            else:
                assert actor.death is not None
                pending.fail(actor, positions, actor.death)
        await pending.wait()
        failures = pending.failures()
        if failures:
            raise WorkerDiedError(failures[0].description,
                                  [failure.env_index for failure in failures], None)
        self.batched_space = space  # for the actors of later restarts
        n = self.num_envs
        self.buffers = BatchBuffers(create_empty_array(space, n, np.zeros),
                                    np.zeros(n, dtype=np.float64), np.zeros(n, dtype=np.bool_),
                                    np.zeros(n, dtype=np.bool_))
        return self.buffers

    # ------------------------------------------------------------------ requests

    def submit(self, op: Op, env_indices: Sequence[int], payloads: Any,
               arrivals: Arrivals | None = None) -> Pending:
        pending = _RayPending(self, op, env_indices, arrivals)
        shares = self._every_share if pending.whole else self._shares(pending.env_indices)
        for actor_index, positions in shares:
            actor = self._actors[actor_index]
            if not actor.alive:
                assert actor.death is not None
                pending.fail(actor, positions, actor.death)
                continue
            if op is Op.STEP and pending.whole:  # the actor's whole share, in order
                reference = actor.handle.step.remote(None, self._actions(payloads, positions))
                pending.expect(actor, positions, reference)
                continue
            hosted = [pending.env_indices[position] for position in positions]
            if op is Op.STEP:
                reference = actor.handle.step.remote(hosted, self._actions(payloads, positions))
            elif op is Op.MAKE:
                reference = actor.handle.make.remote(hosted)
            else:
                reference = actor.handle.serve.remote(
                    op, hosted, [payloads[position] for position in positions])
            pending.expect(actor, positions, reference)
        return pending

    def _shares(self, env_indices: tuple[int, ...]) -> list[tuple[int, Sequence[int]]]:
        """Which actor hosts which positions of a request (not addressing every sub-env)."""
        shares: dict[int, list[int]] = {}
        for position, env_index in enumerate(env_indices):
            shares.setdefault(self._actor_of[env_index], []).append(position)
        return list(shares.items())

    def _actions(self, actions: Any, positions: Sequence[int]) -> Any:
        """An actor's share of the actions: one array slice, or one value per sub-env."""
        if not self.takes_action_batches:
            return [actions[position] for position in positions]
        if isinstance(positions, range):
            return actions[positions.start:positions.stop]
        return actions[list(positions)]

    # ------------------------------------------------------------------ failures

    def actor_died(self, actor: _Actor, error: BaseException) -> None:
        """The actor (or its node) is gone: fail everything it owed."""
        self._lose(actor, f"died: {_first_lines(error)}")

    def _lose(self, actor: _Actor, how: str) -> None:
        if not actor.alive:
            return
        actor.alive = False
        share = actor.env_indices
        actor.death = WorkerDiedError(
            f"Ray actor {actor.index} (sub-envs {share.start}..{share.stop - 1}) {how}",
            list(share), None)
        _kill(actor)
        for pending in list(actor.outstanding):
            pending.fail_owed(actor, actor.death)

    def lost_envs(self) -> list[int]:
        return [index for actor in self._actors if not actor.alive
                for index in actor.env_indices]

    def discard(self, env_indices: Sequence[int]) -> None:
        for actor_index in sorted({self._actor_of[index] for index in env_indices}):
            self._lose(self._actors[actor_index], "was killed: a sub-env missed its deadline")

    async def remake(self, env_indices: Sequence[int]) -> Remade:
        self.refuse_if_closing()
        wanted = set(env_indices)
        fresh: list[_Actor] = []
        for actor_index in sorted({self._actor_of[index] for index in wanted}):
            old = self._actors[actor_index]
            if not old.alive:
                actor = self._create_actor(actor_index, old.env_indices)
                self._actors[actor_index] = actor
                fresh.append(actor)
        remade = sorted(wanted.union(*(actor.env_indices for actor in fresh)))
        pending = self.submit(Op.MAKE, remade, [None] * len(remade))
        try:
            await pending.wait()
        except BaseException:  # cancelled: a half-started actor is no use to anyone
            for actor in fresh:
                self._lose(actor, "was killed: its restart was cancelled")
            raise
        return Remade(remade, pending.failures())

    # ------------------------------------------------------------------ shutdown

    def hosts_started(self) -> bool:
        return bool(self._actors)

    async def release_hosts(self, pending: Pending) -> None:
        for actor in self._actors:
            self._lose(actor, "was closed")

    def close_nowait(self) -> None:
        self.closing = True
        for actor in self._actors:
            actor.alive = False
            _kill(actor)

    def describe(self) -> str:
        alive = sum(actor.alive for actor in self._actors)
        return f"ray backend, {alive}/{len(self._actors)} actors alive"


#: Name of the thread that initialises Ray: it lives as long as the process (see ``_connect``).
RAY_STARTER_THREAD = "aiovec-ray-starter"
_ray_starter: concurrent.futures.ThreadPoolExecutor | None = None
_ray_starter_lock = threading.Lock()


def _connect(address: str | None) -> int:
    """Make sure Ray is initialised in this process; return the cluster's CPU count.

    Blocking (connecting, or starting Ray, takes seconds): run in a thread. Ray is
    initialised on a thread of its own that lives as long as this process: the processes Ray
    starts (``address="local"``) are killed when the *thread* that started them ends
    (``PR_SET_PDEATHSIG`` is per thread), and a vector env's worker threads end with it, which
    had taken Ray down under every later vector env. So Ray started by aiovec serves every
    vector env of the process until the user shuts it down.
    """
    if not ray.is_initialized():
        if address is None and not os.environ.get("RAY_ADDRESS"):
            raise RuntimeError(
                "backend='ray' found no Ray runtime: call ray.init(...) first, or pass "
                "address='auto' (a running cluster), address='ray://host:port', or "
                "address='local' (start Ray in this process)")
        global _ray_starter
        with _ray_starter_lock:
            if _ray_starter is None:
                _ray_starter = concurrent.futures.ThreadPoolExecutor(
                    max_workers=1, thread_name_prefix=RAY_STARTER_THREAD)
        _ray_starter.submit(_initialise, address).result()
    resources: dict[str, float] = ray.cluster_resources()  # type: ignore[no-untyped-call]
    return int(resources.get("CPU", 1))


def _initialise(address: str | None) -> None:
    """On the starter thread, one vector env after another: the first one initialises."""
    if not ray.is_initialized():
        ray.init(address=address)


def _node_address() -> str:
    """This machine's address in the Ray cluster."""
    address: str = cast(Any, ray.util).get_node_ip_address()
    return address


def _check_actor_options(options: ActorOptions | None,
                         num_workers: int | None) -> dict[str, Any] | list[dict[str, Any]]:
    if options is None:
        return {}
    if isinstance(options, Mapping):
        each = [dict(options)]
        chosen: dict[str, Any] | list[dict[str, Any]] = each[0]
    else:
        chosen = each = [dict(entry) for entry in options]
        if num_workers is not None and len(each) != num_workers:
            raise ValueError(f"actor_options has {len(each)} entries for num_workers="
                             f"{num_workers} actors")
    for entry in each:
        for key, reason in _OWNED_OPTIONS.items():
            if key in entry:
                raise ValueError(f"actor_options may not set {key!r}: {reason}")
    return chosen


def _batches_into_arrays(space: gym.Space[Any]) -> bool:
    """True when the space's batches are (trees of) plain arrays that rows can be copied into."""
    if isinstance(space, gym.spaces.Dict):
        return all(_batches_into_arrays(child) for child in space.spaces.values())
    if isinstance(space, gym.spaces.Tuple):
        return all(_batches_into_arrays(child) for child in space.spaces)
    return isinstance(space, _ARRAY_SPACES)


def _kill(actor: _Actor) -> None:
    """Kill the actor for good, if Ray is still there to do it."""
    if ray.is_initialized():
        with contextlib.suppress(Exception):
            ray.kill(actor.handle, no_restart=True)


def _first_lines(error: BaseException, count: int = 8) -> str:
    lines = str(error).strip().splitlines()
    return "\n".join(lines[:count]) if lines else type(error).__name__
