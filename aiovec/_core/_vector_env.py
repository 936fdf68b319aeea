"""``AsyncVectorEnv``: sub-envs behind one awaitable ``reset``/``step``, as Gymnasium defines it."""

from __future__ import annotations

import atexit
import copy as _copy
import enum
import logging
import math
import warnings
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Final, NoReturn

import anyio
import gymnasium as gym
import numpy as np
from gymnasium.error import CustomSpaceError
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import concatenate, create_empty_array, iterate

from aiovec._backends import ActorOptions, load_backend, resolve_backend_name
from aiovec._backends._base import NO_REPLY, Arrivals, Backend, BatchBuffers, Pending, Remade
from aiovec._backends._loop_wakeup import threadsafe_caller
from aiovec._backends._shared_memory import read_row
from aiovec._core._actions import ActionChecker
from aiovec._core._async_env import AsyncEnv, CoroutineEnvError
from aiovec._core._first_ready import FirstReady, Restarted, StepBatch
from aiovec._core._infos import merge_info
from aiovec._core._observations import copy_observations, take_rows
from aiovec._core._restart import RestartPolicy
from aiovec._core._seeding import per_env_seeds, split_reset_mask
from aiovec._core._slot import CallRequest, EnvDescription, Failure, Op
from aiovec._core._spaces import (
    ObservationMode,
    VectorSpaces,
    check_observation_mode,
    resolve_spaces,
)
from aiovec._core._statistics import LatencySummary, Statistics
from aiovec._exceptions import (
    BusyError,
    ClosedError,
    EnvTimeoutError,
    NothingSentError,
    NotStartedError,
    ResetNeededError,
    SubEnvError,
    SubEnvErrorGroup,
)

__all__ = ["AsyncVectorEnv", "EnvFactory"]

logger = logging.getLogger("aiovec")

#: What makes a sub-env: a ``gymnasium.Env`` for most backends, a coroutine env (``AsyncEnv``,
#: or an awaitable of one) for ``backend="async"``.
EnvFactory = Callable[[], "gym.Env[Any, Any] | AsyncEnv[Any, Any] | Awaitable[AsyncEnv[Any, Any]]"]
BoolArray = np.ndarray[Any, np.dtype[np.bool_]]
StepResult = tuple[Any, np.ndarray[Any, Any], BoolArray, BoolArray, dict[str, Any]]


class _UseDefault(enum.Enum):
    """``timeout=USE_DEFAULT``: the deadline given at construction."""

    TOKEN = enum.auto()


USE_DEFAULT: Final = _UseDefault.TOKEN
Timeout = float | None | _UseDefault

#: Default deadline (seconds) for making the sub-envs: ``start``, and remaking lost ones in
#: ``reset`` without a restart policy. Imports and worker start-up can be slow; it is not
#: the per-call ``timeout``.
START_TIMEOUT = 120.0


@dataclass
class _Counters:
    steps: int = 0
    resets: int = 0
    errors: int = 0
    timeouts: int = 0
    restarts: int = 0


class _State(enum.Enum):
    CREATED = "created"
    STARTING = "starting"
    RUNNING = "running"
    CLOSED = "closed"


class _InFlight:
    """A request submitted to the backend (or, after lost sub-envs are remade, about to be)
    and not yet collected."""

    __slots__ = ("deadline", "early", "env_indices", "failed", "late", "op", "operation",
                 "payloads", "pending", "remake")

    def __init__(self, operation: str, op: Op, env_indices: Sequence[int],
                 payloads: Sequence[Any], pending: Pending | None,
                 remake: Sequence[int] = ()) -> None:
        self.operation = operation
        self.op = op
        self.env_indices = env_indices
        self.payloads = payloads
        self.pending = pending
        #: Lost sub-envs to make afresh before the request is sent.
        self.remake = list(remake)
        #: Sub-envs that failed before the request was sent (their remake failed).
        self.early: dict[int, Failure] = {}
        self.deadline: float | None = None
        self.late: list[int] = []
        self.failed: list[Failure] = []

    def replies(self) -> list[Any]:
        """One reply per sub-env of ``env_indices`` (``NO_REPLY`` where none came); a copy
        once a deadline passed, since late replies may still land in the original."""
        pending = self.pending
        if pending is not None and not self.early:
            return list(pending.replies) if self.late else pending.replies
        answered = {} if pending is None else dict(zip(pending.env_indices, pending.replies))
        return [self.early.get(index, answered.get(index, NO_REPLY))
                for index in self.env_indices]

    def unanswered(self) -> list[int]:
        return [index for index, reply in zip(self.env_indices, self.replies())
                if reply is NO_REPLY]


def _check_count(value: int | None, what: str, maximum: int | None = None) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{what} must be a positive int or None, got {value!r}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{what} must be at most num_envs={maximum}, got {value}")
    return int(value)


def _check_timeout(timeout: float | None, what: str) -> float | None:
    if timeout is not None and not (isinstance(timeout, (int, float)) and timeout > 0):
        raise ValueError(f"{what} must be a positive number of seconds or None, got {timeout!r}")
    return timeout


#: Vector envs started and not closed yet: closed at interpreter exit, while the modules
#: their teardown needs still exist (a ``__del__`` run later finds them half torn down).
_running: weakref.WeakSet[AsyncVectorEnv] = weakref.WeakSet()


@atexit.register
def _close_left_running() -> None:
    for envs in list(_running):
        if not envs.closed:
            envs._close_unclosed()


class AsyncVectorEnv:
    """Runs ``len(env_fns)`` sub-envs concurrently behind an awaitable, Gymnasium-shaped API.

    ``reset``, ``step``, ``call``, ``get_attr``, ``set_attr`` and ``render`` are coroutines
    with exactly the semantics of ``gymnasium.vector.SyncVectorEnv`` (autoreset modes, info
    merging with ``_key`` masks, seeding, ``reset_mask``), whatever the ``backend``:

    - ``"inline"``: sub-envs stepped one after another in the event loop's thread (the oracle);
    - ``"thread"``: each sub-env on its own dedicated thread, stepped concurrently;
    - ``"process"``: ``num_workers`` worker processes (default: one per usable CPU), each
      hosting a share of the sub-envs, results in shared memory; ``start_method``
      ``"forkserver"`` (default on Linux: workers forked by a fresh interpreter of their own,
      safe when the parent has threads, fast), ``"spawn"`` (a fresh interpreter per worker)
      or ``"fork"`` (copies the parent: opt in knowingly);
    - ``"async"``: coroutine sub-envs (``aiovec.AsyncEnv``) as tasks on the event loop itself;
    - ``"ray"`` (``pip install 'aiovec[ray]'``): ``num_workers`` Ray actors (default: one per
      CPU of the cluster), each hosting a share of the sub-envs; Ray is found at ``address``
      unless initialised already, and ``actor_options`` (resources, scheduling strategy,
      placement group, ...) go to Ray unchanged;
    - ``"auto"`` (default): picks one for you (see the README).

    ``max_concurrency`` caps how many sub-envs execute at once (Gymnasium's meaning; on the
    process and Ray backends, by starting at most that many workers).
    ``send``/``recv`` step sub-envs on their own and return the first ``batch_size`` to
    finish (``async for batch in envs.batches()`` too).

    Actions are checked for batch size, shape and dtype before anything is sent;
    ``validate_actions=True`` also refuses any action outside the action space (say, 5 for
    ``Discrete(2)``) with a ``ValueError``, so nobody who can send actions can crash or
    restart a sub-env with one (serving code should set it).

    ``timeout`` is the default deadline, in seconds, of every call (``None``: no deadline);
    each call also takes ``timeout=``, and honours the caller's own cancel scopes.
    ``restart`` (a ``RestartPolicy``, ``True`` for its defaults, or an int cap) recreates
    sub-envs that raise, hang or die instead of raising; see the README, "Failure semantics".
    Use it as ``async with AsyncVectorEnv(...) as envs:`` or close it with ``await aclose()``.
    """

    def __init__(
        self,
        env_fns: Sequence[EnvFactory],
        *,
        backend: str = "auto",
        autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
        copy: bool = True,
        timeout: float | None = None,
        observation_mode: ObservationMode = "same",
        close_timeout: float = 10.0,
        restart: RestartPolicy | bool | int | None = None,
        batch_size: int | None = None,
        max_concurrency: int | None = None,
        num_workers: int | None = None,
        start_method: str | None = None,
        address: str | None = None,
        actor_options: ActorOptions | None = None,
        validate_actions: bool = False,
    ) -> None:
        candidate: object = env_fns  # checked as an object: callers may pass anything
        if isinstance(candidate, (str, bytes)) or not isinstance(candidate, Sequence):
            raise TypeError(f"env_fns must be a sequence of callables, got {type(env_fns)}")
        if not env_fns:
            raise ValueError("env_fns is empty: a vector env needs at least one sub-env")
        for index, env_fn in enumerate(env_fns):
            if not callable(env_fn):
                raise TypeError(
                    f"env_fns[{index}] is {type(env_fn).__name__}, not a callable that makes "
                    "an env (pass `lambda: gym.make(...)`, not `gym.make(...)`)"
                )
        check_observation_mode(observation_mode)
        self.num_envs: int = len(env_fns)
        self.autoreset_mode = AutoresetMode(autoreset_mode)
        self.copy = copy
        self.timeout = _check_timeout(timeout, "timeout")
        self.close_timeout = _check_timeout(close_timeout, "close_timeout") or math.inf
        self.observation_mode = observation_mode
        #: Every action is checked against the action space before it is sent.
        self.validate_actions = bool(validate_actions)
        self._restart_policy = RestartPolicy.coerce(restart)
        #: How many results ``recv`` returns by default (first-ready batches).
        self.batch_size: int = (_check_count(batch_size, "batch_size", self.num_envs)
                                or self.num_envs)
        options = {"num_workers": num_workers, "start_method": start_method,
                   "max_concurrency": _check_count(max_concurrency, "max_concurrency"),
                   "address": address, "actor_options": actor_options}
        self.backend_name = resolve_backend_name(backend, env_fns, options)
        if backend == "auto":
            logger.info("backend='auto' picked %r for %d sub-envs", self.backend_name,
                        self.num_envs)
        self.spec: gym.envs.registration.EnvSpec | None = None
        backend_class = load_backend(self.backend_name)
        backend_options = {key: value for key, value in options.items() if value is not None}
        self._backend: Backend = backend_class(env_fns, self.autoreset_mode, **backend_options)
        # "auto" could not tell coroutine envs made by plain callables: it finds out at start.
        self._may_switch_to_async = (backend == "auto" and self.backend_name != "async"
                                     and set(backend_options) <= {"max_concurrency"})
        self._env_fns = list(env_fns)
        self._backend_options = backend_options
        self._state = _State.CREATED
        self._in_flight: _InFlight | None = None
        self._metadata: dict[str, Any] = {}
        self._render_mode: str | None = None
        self._spaces: VectorSpaces | None = None
        self._counters = _Counters()
        self._unmade: set[int] = set()
        self._restart_counts = np.zeros(self.num_envs, dtype=np.int64)
        self._consecutive_restarts = np.zeros(self.num_envs, dtype=np.int64)
        self._last_restart_at = np.full(self.num_envs, -2, dtype=np.int64)
        #: Steps each sub-env returned (``step`` and ``recv``), to tell restarts in a row.
        self._env_steps = np.zeros(self.num_envs, dtype=np.int64)
        self._final_latency: tuple[LatencySummary, ...] | None = None
        self._first_ready: FirstReady | None = None
        #: Sub-envs restarted along with another one while not stepping: their next result
        #: carries ``infos["restart"]``.
        self._restart_notes: dict[int, str] = {}

    # ------------------------------------------------------------------ lifecycle

    async def start(self, *, timeout: float | None = START_TIMEOUT) -> None:
        """Make every sub-env (concurrently where the backend allows). Idempotent.

        ``reset`` and the other calls start the vector env on first use; ``async with`` does it
        up front. If a factory raises or hangs past ``timeout`` seconds, everything made so far
        is closed again and the error is raised; the vector env is then closed.
        """
        if self._state is _State.RUNNING:
            return
        self._check_not_closed("start")
        if self._state is _State.STARTING or self._in_flight is not None:
            raise BusyError("another task is already starting this vector env")
        try:
            await self._start(timeout)
        except SubEnvErrorGroup as error:
            if not (self._may_switch_to_async and self._start_failed_alone
                    and all(isinstance(sub_error.__cause__, CoroutineEnvError)
                            for sub_error in error.exceptions)):
                raise
            logger.info("backend='auto': the sub-envs are coroutine envs, switching to 'async'")
            self._may_switch_to_async = False
            self.backend_name = "async"
            self._backend = load_backend("async")(self._env_fns, self.autoreset_mode,
                                                  **self._backend_options)
            self._state = _State.CREATED
            await self._start(timeout)

    async def _start(self, timeout: float | None) -> None:
        self._state = _State.STARTING
        self._start_failed_alone = False
        try:
            pending = await self._backend.start()
            self._in_flight = _InFlight("start", Op.MAKE, pending.env_indices, (), pending)
            descriptions: list[EnvDescription] = await self._collect_start(self._in_flight,
                                                                           timeout)
            self._spaces = resolve_spaces(self.observation_mode, descriptions)
            buffers = await self._backend.attach(self._spaces)
        except BaseException:
            self._in_flight = None
            if self._state is not _State.CLOSED:  # else another task's aclose closed it all
                self._state = _State.CLOSED
                self._start_failed_alone = True
                with anyio.CancelScope(shield=True):
                    await self._backend.aclose(self.close_timeout)
            raise
        self._in_flight = None
        self._first_ready = FirstReady(Arrivals(threadsafe_caller()))
        self._metadata = dict(descriptions[0].metadata)
        self._metadata["autoreset_mode"] = self.autoreset_mode
        self._render_mode = descriptions[0].render_mode
        self._allocate_buffers(self._spaces, buffers)
        self._state = _State.RUNNING
        _running.add(self)

    def _allocate_buffers(self, spaces: VectorSpaces, buffers: BatchBuffers | None) -> None:
        n = self.num_envs
        self._in_place = buffers is not None
        if buffers is not None:  # the backend's sub-envs write straight into these
            self._observations: Any = buffers.observations
            self._rewards = buffers.rewards
            self._terminations = buffers.terminations
            self._truncations = buffers.truncations
        else:
            self._observations = create_empty_array(spaces.single_observation_space, n,
                                                    np.zeros)
            try:  # never-reset sub-envs show zeros until their first reset
                self._env_obs: list[Any] = list(iterate(spaces.observation_space,
                                                        self._observations))
            except CustomSpaceError:  # a space Gymnasium cannot batch into arrays
                self._env_obs = [None] * n
            self._rewards = np.zeros(n, dtype=np.float64)
            self._terminations = np.zeros(n, dtype=np.bool_)
            self._truncations = np.zeros(n, dtype=np.bool_)
        self._reset_needed = np.ones(n, dtype=np.bool_)
        # False whenever _reset_needed may hold a True: saves a numpy reduction per step.
        self._ready_to_step = False
        self._np_random_seeds: list[int | None] = [None] * n
        self._has_reset = False
        self._actions = ActionChecker(spaces.single_action_space, n, self.validate_actions)
        self._checkers: dict[int, ActionChecker] = {}  # for first-ready batches of other sizes
        self._all_envs = range(n)

    async def aclose(self) -> None:
        """Close every sub-env and release all resources. Idempotent, bounded in time.

        Raises ``SubEnvErrorGroup`` if a sub-env's ``close`` raised (after everything else
        has been released).
        """
        if self._state is _State.CLOSED:
            return
        self._final_latency = self._latency_summaries()
        self._state = _State.CLOSED
        if self._in_flight is not None and self._in_flight.pending is not None:
            self._in_flight.pending.abort()  # its task wakes up to a ClosedError
        self._in_flight = None
        if self._first_ready is not None:
            self._first_ready.arrivals.wake()  # a waiting recv wakes up to a ClosedError
        self._drop_buffers()
        with anyio.CancelScope(shield=True):
            pending = await self._backend.aclose(self.close_timeout)
        if pending is not None and pending.failures():
            raise _error_group("close", pending.failures())

    def _drop_buffers(self) -> None:
        """Let go of the batch arrays, so shared memory can be unmapped when closing."""
        for name in ("_observations", "_env_obs", "_rewards", "_terminations", "_truncations"):
            self.__dict__.pop(name, None)

    async def __aenter__(self) -> AsyncVectorEnv:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    def close_nowait(self) -> None:
        """Tear down without an event loop: kill worker processes, tell threads to close.

        For when no loop can run ``aclose`` (interpreter shutdown, ``__del__``); sub-envs'
        ``close`` may not run and its errors are not reported. Prefer ``aclose``.
        """
        if self._state is not _State.CLOSED:
            self._state = _State.CLOSED
            self._drop_buffers()  # else the shared memory stays mapped (and its descriptor)
            self._backend.close_nowait()

    def __del__(self) -> None:
        # Never started: nothing to release, nothing to warn about.
        if getattr(self, "_state", _State.CLOSED) not in (_State.CLOSED, _State.CREATED):
            self._close_unclosed()

    def _close_unclosed(self) -> None:
        self.close_nowait()  # first: the warning may be turned into an error
        warnings.warn(f"unclosed {self!r}: use `async with` or `await envs.aclose()`",
                      ResourceWarning, stacklevel=1)

    @property
    def closed(self) -> bool:
        """True once ``aclose`` has run (or start failed)."""
        return self._state is _State.CLOSED

    def __repr__(self) -> str:
        stepping = "" if self._in_flight is None else f", {self._in_flight.operation} in flight"
        return (f"<{type(self).__name__} {self.num_envs} envs, {self._backend.describe()}, "
                f"{self._state.value}{stepping}>")

    # ------------------------------------------------------------------ observability

    def statistics(self) -> Statistics:
        """Counters since creation and each sub-env's recent step latency (cheap: no I/O)."""
        counters = self._counters
        return Statistics(
            steps=counters.steps,
            resets=counters.resets,
            errors=counters.errors,
            timeouts=counters.timeouts,
            restarts=counters.restarts,
            abandoned_threads=self._backend.abandoned_threads(),
            step_latency=self._final_latency or self._latency_summaries(),
            descendants_reaped=self._backend.descendants_reaped,
            cleanups_run=self._backend.cleanups.run,
            cleanups_failed=self._backend.cleanups.failed,
        )

    def _latency_summaries(self) -> tuple[LatencySummary, ...]:
        latencies = self._backend.latencies
        if latencies is None:
            nan = math.nan
            return (LatencySummary(0, nan, nan, nan),) * self.num_envs
        return tuple(latencies.summary(index) for index in range(self.num_envs))

    @property
    def unusable_envs(self) -> tuple[int, ...]:
        """Sub-envs that cannot step until reset: never reset, failed, timed out, died, cut
        short by a cancelled call, or (autoreset disabled) done. ``reset`` recovers them."""
        if self._state is not _State.RUNNING:
            return tuple(range(self.num_envs))
        return tuple(np.flatnonzero(self._reset_needed).tolist())

    @property
    def restart_policy(self) -> RestartPolicy | None:
        """The restart policy, or ``None`` (errors are raised)."""
        return self._restart_policy

    # ------------------------------------------------------------------ attributes

    def _running_spaces(self) -> VectorSpaces:
        if self._spaces is None:
            self._check_not_closed("read the spaces of")
            raise NotStartedError(
                "the spaces are known once the sub-envs run: use `async with envs:` or "
                "`await envs.start()` (or `await envs.reset()`) first"
            )
        return self._spaces

    @property
    def single_observation_space(self) -> gym.Space[Any]:
        """The observation space of one sub-env."""
        return self._running_spaces().single_observation_space

    @property
    def observation_space(self) -> gym.Space[Any]:
        """The batched observation space."""
        return self._running_spaces().observation_space

    @property
    def single_action_space(self) -> gym.Space[Any]:
        """The action space of one sub-env."""
        return self._running_spaces().single_action_space

    @property
    def action_space(self) -> gym.Space[Any]:
        """The batched action space."""
        return self._running_spaces().action_space

    @property
    def metadata(self) -> dict[str, Any]:
        """The first sub-env's metadata, plus ``autoreset_mode``."""
        self._running_spaces()
        return self._metadata

    @property
    def render_mode(self) -> str | None:
        """The first sub-env's render mode."""
        self._running_spaces()
        return self._render_mode

    @property
    def np_random_seed(self) -> tuple[int | None, ...]:
        """Each sub-env's ``np_random_seed``: live for in-process backends, else as of its last
        explicit ``reset`` (``None`` before one; ``await get_attr(...)`` reads it live)."""
        if self._backend.in_process:
            return tuple(self._local_attr("np_random_seed"))
        self._running_spaces()
        return tuple(self._np_random_seeds)

    @property
    def np_random(self) -> tuple[np.random.Generator, ...]:
        """Each sub-env's random generator (in-process backends; else ``await get_attr``)."""
        return tuple(self._local_attr("np_random"))

    def _local_attr(self, name: str) -> list[Any]:
        self._running_spaces()
        if not self._backend.in_process:
            raise AttributeError(f"use `await envs.get_attr({name!r})` with the "
                                 f"{self.backend_name} backend")
        return [self._backend.local_env(index).get_wrapper_attr(name)
                for index in range(self.num_envs)]

    # ------------------------------------------------------------------ the API

    async def reset(
        self,
        *,
        seed: int | Sequence[int | None] | None = None,
        options: dict[str, Any] | None = None,
        timeout: Timeout = USE_DEFAULT,
    ) -> tuple[Any, dict[str, Any]]:
        """Reset the sub-envs (those in ``options["reset_mask"]``, else all) → ``(obs, infos)``.

        ``seed``: ``None``, an int ``s`` (sub-env ``i`` gets ``s + i``) or one seed per sub-env.
        """
        in_flight = await self._submit_reset(seed, options)
        return await self._finish_reset(in_flight, timeout)

    async def step(
        self, actions: Any, *, timeout: Timeout = USE_DEFAULT
    ) -> tuple[Any, np.ndarray[Any, Any], BoolArray, BoolArray, dict[str, Any]]:
        """Step each sub-env with its action → ``(obs, rewards, terminations, truncations, infos)``.

        The batch is checked first: a wrong batch size, shape or dtype raises ``ValueError``
        and no sub-env steps.
        """
        in_flight = await self._submit_step(actions)
        return await self._finish_step(in_flight, timeout)

    async def call(self, name: str, /, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Call method ``name`` on every sub-env (or read it, if not callable) → the results."""
        in_flight = await self._submit_call(name, args, kwargs)
        return await self._finish_call(in_flight, USE_DEFAULT)

    async def get_attr(self, name: str) -> tuple[Any, ...]:
        """Read attribute ``name`` of every sub-env (through its wrappers)."""
        return await self.call(name)

    async def set_attr(self, name: str, values: Any) -> None:
        """Set attribute ``name`` on every sub-env: one value each (list/tuple) or one for all."""
        if not isinstance(values, (list, tuple)):
            values = [values] * self.num_envs
        if len(values) != self.num_envs:
            raise ValueError(
                "Values must be a list or tuple with length equal to the number of environments. "
                f"Got `{len(values)}` values for {self.num_envs} environments."
            )
        await self._ensure_started()
        self._claim("set_attr")
        payloads = [(name, value) for value in values]
        in_flight = self._submit(Op.SET_ATTR, "set_attr", self._all_envs, payloads)
        await self._finish_call(in_flight, USE_DEFAULT)

    async def render(self) -> tuple[Any, ...]:
        """Each sub-env's rendered frame."""
        return await self.call("render")

    # ------------------------------------------------------------------ first-ready batches

    def send(self, actions: Any, env_ids: Any = None, *, timeout: Timeout = USE_DEFAULT) -> None:
        """Start stepping sub-envs ``env_ids`` (default: all) with ``actions``, one each, and
        return at once; ``recv`` collects their results, first finished first.

        ``actions`` is a batch for ``len(env_ids)`` sub-envs, checked like ``step``'s. Each
        sub-env's ``timeout`` runs from now (with ``max_concurrency``, waiting for a turn
        counts). A sub-env cannot be sent a second action before its result was received, and
        ``step``/``reset`` refuse to run while results are owed (both ``BusyError``).
        """
        self._check_not_closed("send")
        first = self._first_ready
        if self._state is not _State.RUNNING or first is None or not self._has_reset:
            raise ResetNeededError("cannot send before reset: call `await envs.reset()` first")
        if self._in_flight is not None:
            raise BusyError(f"cannot send: another task is still running "
                            f"{self._in_flight.operation} on this vector env")
        ids = self._env_ids(env_ids)
        owed = first.owed(ids)
        if owed:
            raise BusyError(f"cannot send to sub-env(s) {owed}: each is still stepping or its "
                            "result is waiting for recv()")
        if self._reset_needed[ids].any():
            needy = [env for env in ids if self._reset_needed[env]]
            raise ResetNeededError(
                f"cannot send to sub-env(s) {needy}: they need a reset first (never reset, "
                "failed, or done with autoreset disabled)")
        batch = self._actions_for(len(ids)).check(actions, ids)
        payloads = (batch if self._backend.takes_action_batches
                    else self._actions_for(len(ids)).split(batch))
        seconds = self.timeout if timeout is USE_DEFAULT else _check_timeout(timeout, "timeout")
        pending = self._backend.submit(Op.STEP, ids, payloads, first.arrivals)
        deadline = None if seconds is None else anyio.current_time() + seconds
        first.sent(pending, deadline, seconds)

    def _env_ids(self, env_ids: Any) -> list[int]:
        if env_ids is None:
            return list(self._all_envs)
        ids = np.asarray(env_ids)
        if ids.ndim != 1 or (ids.size and ids.dtype.kind not in "iu"):
            raise ValueError(f"env_ids must be a 1-D sequence of sub-env indices, got {env_ids!r}")
        listed: list[int] = ids.tolist()
        if not listed:
            raise ValueError("env_ids is empty: send at least one sub-env an action")
        if min(listed) < 0 or max(listed) >= self.num_envs:
            raise ValueError(f"env_ids must lie in [0, {self.num_envs}), got {listed}")
        if len(set(listed)) != len(listed):
            raise ValueError(f"env_ids lists a sub-env twice: {listed}")
        return listed

    def _actions_for(self, count: int) -> ActionChecker:
        if count == self.num_envs:
            return self._actions
        checker = self._checkers.get(count)
        if checker is None:
            checker = self._checkers[count] = ActionChecker(self.single_action_space, count,
                                                            self.validate_actions)
        return checker

    async def recv(self, *, batch_size: int | None = None) -> StepBatch:
        """The results of the first ``batch_size`` sub-envs to finish since ``send``
        (default: the constructor's ``batch_size``; fewer if fewer were sent).

        Cancelling ``recv`` loses nothing: results that land meanwhile wait for the next one.
        A failed, timed-out or restarted sub-env is reported as ``step`` reports it, the
        batch's healthy results on the error as ``partial_result``.
        """
        self._check_not_closed("recv")
        first = self._first_ready
        size = self.batch_size if batch_size is None else _check_count(
            batch_size, "batch_size", self.num_envs)
        if first is None or not first:
            raise NothingSentError("nothing to receive: no sub-env was sent an action (send() "
                                   "first), or every result was received already")
        if first.receiving:
            raise BusyError("cannot recv: another task is already receiving")
        assert size is not None
        first.receiving = True
        try:
            first.collect()
            needed = min(size, len(first))
            while len(first.ready) < needed:
                await self._wait_for_results(first, needed - len(first.ready))
                self._check_open("recv")
                first.collect()
                self._give_up_on_late(first)
            return await self._receive(first, first.first(needed))
        finally:
            first.receiving = False

    async def batches(self, *, batch_size: int | None = None) -> AsyncIterator[StepBatch]:
        """``recv`` batches as they complete, until nothing sent is left to receive.

        ``async for batch in envs.batches(): envs.send(policy(batch.observations),
        batch.env_ids)`` keeps every sub-env busy; stop sending to end the loop.
        """
        while self._first_ready:
            yield await self.recv(batch_size=batch_size)

    async def _wait_for_results(self, first: FirstReady, count: int) -> None:
        deadline = first.next_deadline()
        if deadline == math.inf:
            await self._backend.wait_arrivals(first.arrivals, count)
            return
        with anyio.move_on_after(max(0.0, deadline - anyio.current_time())):
            await self._backend.wait_arrivals(first.arrivals, count)

    def _give_up_on_late(self, first: FirstReady) -> None:
        """Sub-envs past their deadline: discarded by the backend, reported as timed out."""
        late = first.expire(anyio.current_time())
        if not late:
            return
        late_ids = [env_index for env_index, _ in late]
        self._counters.timeouts += len(late)
        self._backend.discard(late_ids)
        self._reset_needed[self._backend.lost_envs()] = True
        self._ready_to_step = False
        first.collect()  # co-hosted sub-envs of a killed worker fail now
        for env_index, seconds in late:
            error = EnvTimeoutError("step", [env_index], seconds)
            first.ready[env_index] = Failure(env_index, "step", error,
                                             f"step timed out after {seconds:g} s", "")

    async def _receive(self, first: FirstReady, env_ids: list[int]) -> StepBatch:
        replies = [first.ready[env_index] for env_index in env_ids]
        broken = {env_index: reply.description for env_index, reply in zip(env_ids, replies)
                  if type(reply) is Failure}
        self._counters.errors += len(broken)
        restarted: dict[int, tuple[Any, str]] = {
            env_index: reply for env_index, reply in zip(env_ids, replies)
            if type(reply) is Restarted}
        previous: dict[int, Any] = {}
        if broken and self._restart_policy is not None:
            previous = {env_index: self._observation_row(env_index) for env_index in broken}
            same_step = self.autoreset_mode is AutoresetMode.SAME_STEP
            # Claimed meanwhile: no send, step or reset may touch sub-envs being remade.
            claim = _InFlight("recv (restarting sub-envs)", Op.STEP, list(broken), (), None)
            self._in_flight = claim
            try:
                outcome = await self._restart(broken, {} if same_step else None, previous)
            except BaseException:  # the results stay waiting: the next recv retries
                if self._state is _State.RUNNING:
                    self._reset_needed[list(broken)] = True
                raise
            finally:
                self._release(claim)
            self._check_open("recv")
            if outcome is not None:
                batch_ids = set(env_ids)
                self._settle_restart_extras(first, outcome, batch_ids)
                # Neighbours restarted with them (same worker) are cut short in this batch too.
                restarted.update((env_index, reason) for env_index, reason in outcome.items()
                                 if env_index in batch_ids)
                broken = {}
        # No await from here on: the results leave `ready` only with the finished batch.
        batch = self._assemble_batch(env_ids, replies, broken, restarted, previous)
        first.forget(env_ids)
        if self.autoreset_mode is AutoresetMode.DISABLED:
            done = batch.terminations | batch.truncations
            self._reset_needed[batch.env_ids[done]] = True
        if broken:
            self._reset_needed[list(broken)] = True
            self._ready_to_step = False
            failures = sorted((reply for reply in replies if type(reply) is Failure
                               and reply.env_index in broken),
                              key=lambda failure: failure.env_index)
            error: EnvTimeoutError | SubEnvErrorGroup
            if all(type(failure.exception) is EnvTimeoutError for failure in failures):
                error = EnvTimeoutError("step", sorted(broken), max(
                    failure.exception.timeout or 0.0 for failure in failures
                    if isinstance(failure.exception, EnvTimeoutError)))
            else:
                error = _error_group("step", failures)
            error.partial_result = batch
            raise error
        self._counters.steps += 1
        self._env_steps[batch.env_ids] += 1
        return batch

    def _settle_restart_extras(self, first: FirstReady, outcome: dict[int, tuple[Any, str]],
                               batch_ids: set[int]) -> None:
        """Sub-envs restarted along with this batch's (same worker) but not in it: a failed
        result still waiting is replaced by the restart; otherwise their next result says so."""
        first.collect()
        for env_index, (reply, reason) in outcome.items():
            if env_index in batch_ids:
                continue
            waiting = first.ready.get(env_index)
            if type(waiting) is Failure:
                first.ready[env_index] = Restarted(reply, reason)
            else:
                self._restart_notes[env_index] = reason

    def _assemble_batch(self, env_ids: list[int], replies: list[Any], broken: dict[int, str],
                        restarted: dict[int, tuple[Any, str]],
                        previous: dict[int, Any]) -> StepBatch:
        size = len(env_ids)
        ids = np.array(env_ids, dtype=np.intp)
        infos: dict[str, Any] = {}
        rewards, terminations, truncations = self._rewards, self._terminations, self._truncations
        notes = self._restart_notes
        for position, (env_index, reply) in enumerate(zip(env_ids, replies)):
            if env_index in restarted or env_index in broken:
                continue
            if self._in_place:
                info, final = (None, None) if reply is None else reply
            else:
                info, final = self._store_result(env_index, reply)
            if final is not None:
                merge_info(infos, final, position, size)
            if info:
                merge_info(infos, info, position, size)
            if notes and env_index in notes:
                merge_info(infos, {"restart": notes.pop(env_index)}, position, size)
        if broken:
            failed = list(broken)
            rewards[failed] = 0.0
            terminations[failed] = False
            truncations[failed] = False
        if restarted:
            positions = {env_index: position for position, env_index in enumerate(env_ids)}
            self._apply_restarts(restarted, previous, infos, positions)
        if self._in_place:
            observations = take_rows(self._observations, ids)
        else:
            space = self.single_observation_space
            buffer: Any = create_empty_array(space, size, np.zeros)
            observations = concatenate(space, [self._env_obs[env] for env in env_ids], buffer)
        return StepBatch(observations, rewards[ids], terminations[ids], truncations[ids],
                         infos, ids)

    # ------------------------------------------------------------------ two-phase internals
    # ``_submit_*`` sends a request and claims the vector env; ``_finish_*`` collects it and
    # releases the claim, whatever happens. The sync shim calls them separately to offer
    # Gymnasium's ``step_async``/``step_wait`` pairs.

    def _check_not_closed(self, verb: str) -> None:
        if self._state is _State.CLOSED:
            raise ClosedError(f"cannot {verb} the vector env: it was closed")

    def _claim(self, operation: str) -> None:
        """Refuse a second concurrent call; the claim lasts until its ``_finish_*``."""
        self._check_not_closed(operation)
        if self._in_flight is not None:
            raise BusyError(
                f"cannot {operation}: another task is still running "
                f"{self._in_flight.operation} on this vector env (one call at a time)"
            )
        if operation in ("step", "reset") and self._first_ready:
            first = self._first_ready
            first.collect()
            if first.in_flight:
                raise BusyError(
                    f"cannot {operation}: sub-env(s) {sorted(first.in_flight)} are stepping "
                    "after send(); recv() their results first")
            if operation == "step" and first.ready:
                raise BusyError(
                    f"cannot step: the results of sub-env(s) {sorted(first.ready)} are waiting "
                    "for recv(); receive them (or reset those sub-envs) first")

    def _submit(
        self, op: Op, operation: str, env_indices: Sequence[int], payloads: Sequence[Any]
    ) -> _InFlight:
        pending = self._backend.submit(op, env_indices, payloads)
        in_flight = _InFlight(operation, op, env_indices, payloads, pending)
        self._in_flight = in_flight
        return in_flight

    async def _ensure_started(self) -> None:
        if self._state is not _State.RUNNING:
            self._check_not_closed("use")
            await self.start()

    async def _submit_reset(
        self, seed: int | Sequence[int | None] | None, options: dict[str, Any] | None
    ) -> _InFlight:
        self._check_not_closed("reset")
        seeds = per_env_seeds(seed, self.num_envs)
        reset_mask, env_options = split_reset_mask(options, self.num_envs)
        await self._ensure_started()
        self._claim("reset")
        if reset_mask is None:
            indices: Sequence[int] = self._all_envs
        else:
            indices = np.flatnonzero(reset_mask).tolist()
        payloads = [(seeds[index], env_options) for index in indices]
        lost = set(self._backend.lost_envs()).union(self._unmade).intersection(indices)
        if lost:  # made afresh first, under the reset's deadline
            in_flight = _InFlight("reset", Op.RESET, indices, payloads, None, sorted(lost))
            self._in_flight = in_flight
            return in_flight
        return self._submit(Op.RESET, "reset", indices, payloads)

    async def _finish_reset(
        self, in_flight: _InFlight, timeout: Timeout
    ) -> tuple[Any, dict[str, Any]]:
        try:
            if in_flight.pending is None:
                await self._remake_lost(in_flight)
            replies, broken = await self._gather(in_flight, timeout)
            indices = list(in_flight.env_indices)
            restarted = None
            if broken and self._restart_policy is not None:
                payloads = dict(zip(indices, in_flight.payloads))
                restarted = await self._restart_or_abandon(
                    in_flight, broken, {index: payloads[index] for index in broken})
                self._check_open("reset")
                if restarted is not None:
                    for env_index, (reply, _reason) in restarted.items():
                        replies[indices.index(env_index)] = reply
                    broken = {}
            result = self._assemble_reset(indices, replies, broken)
            if broken:
                self._fail("reset", in_flight, broken, result)
            for env_index, (_reply, reason) in (restarted or {}).items():
                merge_info(result[1], {"restart": reason}, env_index, self.num_envs)
            self._counters.resets += 1
            return result
        finally:
            self._release(in_flight)

    def _assemble_reset(self, indices: list[int], replies: list[Any],
                        broken: dict[int, str]) -> tuple[Any, dict[str, Any]]:
        n = self.num_envs
        infos: dict[str, Any] = {}
        seeds = self._np_random_seeds
        healthy = [position for position, env_index in enumerate(indices)
                   if env_index not in broken] if broken else range(len(indices))
        if self._in_place:  # observations are in place; the replies are the infos
            for position in healthy:
                info, seed = replies[position]
                merge_info(infos, info, indices[position], n)
                seeds[indices[position]] = seed
        else:
            env_obs = self._env_obs
            for position in healthy:
                obs, info, seed = replies[position]
                env_index = indices[position]
                env_obs[env_index] = obs
                merge_info(infos, info, env_index, n)
                seeds[env_index] = seed
            self._observations = concatenate(self.single_observation_space, env_obs,
                                             self._observations)
        done = [indices[position] for position in healthy]
        if self._first_ready:  # results still waiting for recv belong to the old episodes
            self._first_ready.forget(done)
        for env_index in done:
            self._restart_notes.pop(env_index, None)
        self._terminations[done] = False
        self._truncations[done] = False
        self._reset_needed[done] = False
        self._has_reset = True
        observations = self._observations
        return (copy_observations(observations) if self.copy else observations), infos

    async def _submit_step(self, actions: Any) -> _InFlight:
        self._claim("step")
        if self._state is not _State.RUNNING or not self._ready_to_step:
            if self._state is not _State.RUNNING or self._reset_needed.any():
                raise ResetNeededError(self._reset_needed_message())
            self._ready_to_step = True
        batch = self._actions.check(actions)
        payloads = batch if self._backend.takes_action_batches else self._actions.split(batch)
        return self._submit(Op.STEP, "step", self._all_envs, payloads)

    def _reset_needed_message(self) -> str:
        if self._state is not _State.RUNNING or not self._has_reset:
            return "cannot step before reset: call `await envs.reset()` first"
        indices = np.flatnonzero(self._reset_needed).tolist()
        return (f"cannot step: sub-env(s) {', '.join(map(str, indices))} need a reset first "
                "(never reset, failed, or done with autoreset disabled); reset them with "
                "`reset(options={'reset_mask': mask})`")

    async def _finish_step(self, in_flight: _InFlight, timeout: Timeout) -> StepResult:
        try:
            replies, broken = await self._gather(in_flight, timeout)
            restarted = None
            if broken and self._restart_policy is not None:
                same_step = self.autoreset_mode is AutoresetMode.SAME_STEP
                previous = {index: self._observation_row(index) for index in broken}
                restarted = await self._restart_or_abandon(
                    in_flight, broken, {} if same_step else None, previous)
                self._check_open("step")
            infos = self._assemble_step(replies, broken)
            if restarted is not None:
                self._apply_restarts(restarted, previous, infos)
                broken = {}
            if self.autoreset_mode is AutoresetMode.DISABLED:
                self._reset_needed |= self._terminations
                self._reset_needed |= self._truncations
                self._ready_to_step = False
            # No local name for the batch: a raised error's frames must not pin shared memory.
            result = (
                copy_observations(self._observations) if self.copy else self._observations,
                self._rewards.copy(),
                self._terminations.copy(),
                self._truncations.copy(),
                infos,
            )
            if broken:
                self._fail("step", in_flight, broken, result)
            self._counters.steps += 1
            self._env_steps += 1
            return result
        finally:
            self._release(in_flight)

    def _assemble_step(self, replies: list[Any], broken: dict[int, str]) -> dict[str, Any]:
        """Batch the healthy replies; broken sub-envs keep their observation, with reward 0
        and no episode end (the restart policy may then overwrite them)."""
        n = self.num_envs
        infos: dict[str, Any] = {}
        rewards, terminations, truncations = self._rewards, self._terminations, self._truncations
        if self._in_place:  # results are in place; a reply is None or (info, final)
            for env_index, reply in enumerate(replies):
                if reply is not None and env_index not in broken:
                    info, final = reply
                    if final is not None:
                        merge_info(infos, final, env_index, n)
                    if info:
                        merge_info(infos, info, env_index, n)
        else:
            store = self._store_result
            for env_index, reply in enumerate(replies):
                if broken and env_index in broken:
                    continue
                info, final = store(env_index, reply)
                if final is not None:
                    merge_info(infos, final, env_index, n)
                if info:
                    merge_info(infos, info, env_index, n)
        if broken:
            failed = list(broken)
            rewards[failed] = 0.0
            terminations[failed] = False
            truncations[failed] = False
        if not self._in_place:
            self._observations = concatenate(self.single_observation_space, self._env_obs,
                                             self._observations)
        return infos

    def _store_result(self, env_index: int, reply: Any) -> tuple[Any, Any]:
        """Keep a sub-env's step outcome (not in place) → its ``(info, final)``."""
        obs, reward, terminated, truncated, info, final = reply
        self._env_obs[env_index] = obs
        self._rewards[env_index] = reward
        self._terminations[env_index] = terminated
        self._truncations[env_index] = truncated
        return info, final

    def _observation_row(self, env_index: int) -> Any:
        """A private copy of sub-env ``env_index``'s current observation."""
        if self._in_place:
            return read_row(self._observations, env_index)
        return _copy.deepcopy(self._env_obs[env_index])

    def _apply_restarts(self, restarted: dict[int, tuple[Any, str]],
                        previous: dict[int, Any], infos: dict[str, Any],
                        positions: dict[int, int] | None = None) -> None:
        """Restarted sub-envs: episode cut (``truncated``), reward 0, ``infos["restart"]``;
        in same-step mode their new episode's first observation, the old one in ``final_obs``.

        ``positions`` maps each to its row in a first-ready batch (else rows are env indices);
        the full batch of observations is then left alone.
        """
        n = self.num_envs if positions is None else len(positions)
        for env_index, (reply, reason) in restarted.items():
            row = env_index if positions is None else positions[env_index]
            self._rewards[env_index] = 0.0
            self._terminations[env_index] = False
            self._truncations[env_index] = True
            extra: dict[str, Any] = {"restart": reason}
            if reply is not None:  # same-step mode: the sub-env was reset too
                info, self._np_random_seeds[env_index] = reply[-2:]
                if not self._in_place:
                    self._env_obs[env_index] = reply[0]
                extra = {"final_obs": previous.get(env_index), "final_info": {}, **extra}
                merge_info(infos, info, row, n)
            merge_info(infos, extra, row, n)
        if positions is None and not self._in_place and any(
                reply is not None for reply, _ in restarted.values()):
            self._observations = concatenate(self.single_observation_space, self._env_obs,
                                             self._observations)

    async def _submit_call(
        self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> _InFlight:
        if not isinstance(name, str):
            raise TypeError(f"the attribute name must be a str, got {type(name).__name__}")
        return await self._submit_call_at(self._all_envs, name, args, kwargs)

    async def _submit_call_at(
        self, env_ids: Sequence[int], target: str | Callable[..., Any],
        args: tuple[Any, ...], kwargs: dict[str, Any],
    ) -> _InFlight:
        """Call ``target`` (a name, or a picklable function taking the env first) on sub-envs
        ``env_ids`` only; the others answer ``None``. For adapters (``aiovec.sb3``)."""
        chosen = set(self._indices_in_range(env_ids))
        await self._ensure_started()
        self._claim("call")
        request: CallRequest = (target, args, kwargs)
        payloads = [request if index in chosen else None for index in self._all_envs]
        return self._submit(Op.CALL, "call", self._all_envs, payloads)

    async def _call_at(
        self, env_ids: Sequence[int], target: str | Callable[..., Any], /,
        *args: Any, **kwargs: Any,
    ) -> tuple[Any, ...]:
        """``call`` on sub-envs ``env_ids`` only (see ``_submit_call_at``) → their results."""
        in_flight = await self._submit_call_at(env_ids, target, args, kwargs)
        results = await self._finish_call(in_flight, USE_DEFAULT)
        return tuple(results[index] for index in env_ids)

    async def _set_attr_at(self, env_ids: Sequence[int], name: str, value: Any) -> None:
        """Set attribute ``name`` to ``value`` on sub-envs ``env_ids`` only."""
        chosen = set(self._indices_in_range(env_ids))
        await self._ensure_started()
        self._claim("set_attr")
        payloads = [(name, value) if index in chosen else None for index in self._all_envs]
        in_flight = self._submit(Op.SET_ATTR, "set_attr", self._all_envs, payloads)
        await self._finish_call(in_flight, USE_DEFAULT)

    def _indices_in_range(self, env_ids: Sequence[int]) -> Sequence[int]:
        for index in env_ids:
            if not 0 <= index < self.num_envs:
                raise IndexError(f"sub-env index {index} is out of range for "
                                 f"{self.num_envs} sub-envs")
        return env_ids

    async def _finish_call(self, in_flight: _InFlight, timeout: Timeout) -> tuple[Any, ...]:
        try:
            replies, broken = await self._gather(in_flight, timeout)
            result = tuple(None if reply is NO_REPLY or type(reply) is Failure else reply
                           for reply in replies)
            if broken:
                self._fail(in_flight.operation, in_flight, broken, result)
            return result
        finally:
            self._release(in_flight)

    def _release(self, in_flight: _InFlight) -> None:
        if self._in_flight is in_flight:
            self._in_flight = None

    # ------------------------------------------------------------------ failures, restarts

    async def _gather(self, in_flight: _InFlight,
                      timeout: Timeout) -> tuple[list[Any], dict[int, str]]:
        """Await the replies (under the deadline) → (replies, broken sub-envs and why).

        A sub-env that missed the deadline is discarded by the backend (worker killed, thread
        abandoned), so nothing it still owes can ever reach a later call.
        """
        deadline = self.timeout if timeout is USE_DEFAULT else _check_timeout(timeout, "timeout")
        in_flight.deadline = deadline
        try:
            assert in_flight.pending is not None
            if deadline is None:  # no cancel scope of our own: the caller's still apply
                await in_flight.pending.wait()
            else:
                with anyio.move_on_after(deadline) as scope:
                    await in_flight.pending.wait()
                if scope.cancelled_caught:
                    in_flight.late = in_flight.unanswered()
        except BaseException:  # cancelled by the caller (or interrupted)
            self._abandon(in_flight)
            raise
        if self._state is _State.CLOSED:  # another task closed the vector env meanwhile
            raise ClosedError(f"the vector env was closed during {in_flight.operation}")
        replies = in_flight.replies()
        broken: dict[int, str] = {}
        if in_flight.late:
            self._counters.timeouts += len(in_flight.late)
            self._backend.discard(in_flight.late)
            if self._state is _State.RUNNING:  # whatever the call, lost sub-envs need a reset
                self._reset_needed[self._backend.lost_envs()] = True
                self._ready_to_step = False
            for env_index in in_flight.late:
                broken[env_index] = f"{in_flight.operation} timed out after {deadline:g} s"
        in_flight.failed = [reply for reply in replies if type(reply) is Failure
                            and reply.env_index not in broken]
        for failure in in_flight.failed:
            broken[failure.env_index] = failure.description
        self._counters.errors += len(in_flight.failed)
        return replies, broken

    async def _remake_lost(self, in_flight: _InFlight) -> None:
        """Make a reset's lost sub-envs afresh, then send the reset.

        Bounded by the make deadline (``RestartPolicy.make_timeout``, else ``START_TIMEOUT``),
        not the call's: starting a worker process may take longer than a reset should.
        """
        deadline = self._make_deadline()
        try:
            with anyio.move_on_after(deadline) as scope:
                remade = await self._backend.remake(in_flight.remake)
        except BaseException:
            self._abandon(in_flight)
            raise
        self._counters.restarts += len(in_flight.remake)
        if scope.cancelled_caught:
            self._backend.discard(in_flight.remake)
            self._counters.timeouts += len(in_flight.remake)
            self._reset_needed[in_flight.remake] = True
            self._ready_to_step = False
            raise EnvTimeoutError("make", in_flight.remake, deadline)
        self._check_open("reset")
        self._note_remade(remade)
        for failure in remade.failures:
            in_flight.early[failure.env_index] = failure
        early = in_flight.early
        indices = [index for index in in_flight.env_indices if index not in early]
        payloads = [payload for index, payload in zip(in_flight.env_indices, in_flight.payloads)
                    if index not in early]
        in_flight.pending = self._backend.submit(in_flight.op, indices, payloads)

    def _make_deadline(self) -> float | None:
        policy = self._restart_policy
        return START_TIMEOUT if policy is None else policy.make_timeout

    def _note_remade(self, remade: Remade) -> None:
        failed = {failure.env_index for failure in remade.failures}
        for env_index in remade.env_indices:
            if env_index in failed:
                self._unmade.add(env_index)
            else:
                self._unmade.discard(env_index)
        self._reset_needed[remade.env_indices] = True
        self._ready_to_step = False

    def _abandon(self, in_flight: _InFlight) -> None:
        """The caller gave up on ``in_flight``: sub-envs it may have moved need a reset."""
        pending = in_flight.pending
        if pending is not None and not pending.started:
            return  # it never reached a sub-env
        if in_flight.operation in ("step", "reset") and self._state is _State.RUNNING:
            self._reset_needed[list(in_flight.env_indices)] = True
            self._ready_to_step = False

    def _fail(self, operation: str, in_flight: _InFlight, broken: dict[int, str],
              partial_result: Any) -> NoReturn:
        """Raise for the broken sub-envs of a call; the healthy ones' results ride along."""
        if operation in ("step", "reset") and self._state is _State.RUNNING:
            self._reset_needed[list(broken)] = True
            self._ready_to_step = False
        error: EnvTimeoutError | SubEnvErrorGroup
        if in_flight.late and not in_flight.failed:
            error = EnvTimeoutError(operation, in_flight.late, in_flight.deadline)
        else:
            errors = []
            for env_index in in_flight.late:
                late = SubEnvError(env_index, operation, broken[env_index])
                late.__cause__ = EnvTimeoutError(operation, [env_index], in_flight.deadline)
                errors.append(late)
            errors += [_sub_env_error(failure) for failure in in_flight.failed]
            errors.sort(key=lambda sub_error: sub_error.env_index)
            error = SubEnvErrorGroup.from_errors(operation, errors)
        error.partial_result = partial_result
        raise error

    async def _restart(
        self, broken: dict[int, str], reset_payloads: dict[int, Any] | None,
        previous: dict[int, Any] | None = None,
    ) -> dict[int, tuple[Any, str]] | None:
        """Recreate the broken sub-envs under the restart policy (and reset them, with
        ``reset_payloads``) → ``{env_index: (reset reply or None, why)}``, or ``None`` when a
        sub-env is out of restarts (the caller then raises as without a policy).

        In a step (``previous`` given), sub-envs remade only because they share a worker with
        a broken one are restarted too (their observation is saved in ``previous`` first); in
        a reset they are left needing a reset (``unusable_envs``).
        """
        policy = self._restart_policy
        assert policy is not None
        reasons = dict(broken)
        restarted: dict[int, tuple[Any, str]] = {}
        while reasons:
            envs = sorted(reasons)
            if policy.max_restarts is not None and any(
                self._restart_counts[index] >= policy.max_restarts for index in envs
            ):
                logger.warning("sub-env(s) %s used up their %d restarts", envs,
                               policy.max_restarts)
                return None
            delay = policy.delay(max(self._count_restart(index) for index in envs))
            if delay:
                await anyio.sleep(delay)
            self._counters.restarts += len(envs)
            failed: dict[int, str] = {}
            with anyio.move_on_after(policy.make_timeout) as scope:
                self._check_open("restart")
                remade = await self._backend.remake(envs)
                self._check_open("restart")
                self._note_remade(remade)
                for failure in remade.failures:
                    failed[failure.env_index] = failure.description
                made = [index for index in envs if index not in failed]
                if previous is not None:
                    for index in remade.env_indices:
                        if index not in reasons and index not in restarted:
                            previous[index] = self._observation_row(index)
                            reasons[index] = (f"restarted with sub-env(s) {envs} "
                                              "(same worker process)")
                            self._counters.restarts += 1
                            made.append(index)
                if reset_payloads is None:
                    restarted.update((index, (None, reasons[index])) for index in made)
                elif made:
                    pending = self._backend.submit(
                        Op.RESET, made, [reset_payloads.get(index, (None, None))
                                         for index in made])
                    await pending.wait()
                    self._check_open("restart")
                    for index, reply in zip(made, pending.replies):
                        if type(reply) is Failure:
                            failed[index] = reply.description
                        else:
                            restarted[index] = (reply, reasons[index])
            if scope.cancelled_caught:
                late = [index for index in reasons
                        if index not in restarted and index not in failed]
                self._backend.discard(late)
                self._counters.timeouts += len(late)
                failed.update((index, "restart timed out") for index in late)
            self._counters.errors += len(failed)
            for index in failed:
                restarted.pop(index, None)
            reasons = {index: reasons[index] for index in failed}
        self._reset_needed[list(restarted)] = self.autoreset_mode is AutoresetMode.DISABLED
        return restarted

    async def _restart_or_abandon(
        self, in_flight: _InFlight, broken: dict[int, str], reset_payloads: dict[int, Any] | None,
        previous: dict[int, Any] | None = None,
    ) -> dict[int, tuple[Any, str]] | None:
        """``_restart``; if the caller is cancelled meanwhile, the call's sub-envs need a reset
        (the healthy ones moved unseen, the broken ones may be half made)."""
        try:
            return await self._restart(broken, reset_payloads, previous)
        except BaseException:
            self._abandon(in_flight)
            if self._state is _State.RUNNING:
                self._reset_needed[list(broken)] = True
            raise

    def _check_open(self, operation: str) -> None:
        """After an await: another task may have closed the vector env meanwhile."""
        if self._state is _State.CLOSED:
            raise ClosedError(f"the vector env was closed during {operation}")

    def _count_restart(self, env_index: int) -> int:
        """Count one restart of ``env_index`` → how many it has had in a row, no step of its
        own between."""
        steps = int(self._env_steps[env_index])
        if steps - self._last_restart_at[env_index] <= 1:
            self._consecutive_restarts[env_index] += 1
        else:
            self._consecutive_restarts[env_index] = 1
        self._last_restart_at[env_index] = steps
        self._restart_counts[env_index] += 1
        return int(self._consecutive_restarts[env_index])

    async def _collect_start(self, in_flight: _InFlight, timeout: Timeout) -> list[Any]:
        """The sub-envs' descriptions; a factory that fails or hangs fails the start."""
        replies, broken = await self._gather(in_flight, timeout)
        if broken:
            self._fail("start", in_flight, broken, None)
        return replies


def _sub_env_error(failure: Failure) -> SubEnvError:
    """The ``SubEnvError`` for a failure reply, its original exception as ``__cause__``."""
    error = SubEnvError(failure.env_index, failure.phase, failure.description, failure.traceback)
    error.__cause__ = failure.exception
    return error


def _error_group(operation: str, failures: Sequence[Failure]) -> SubEnvErrorGroup:
    return SubEnvErrorGroup.from_errors(operation, [_sub_env_error(f) for f in failures])
