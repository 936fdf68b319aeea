"""``AsyncVectorEnv``: sub-envs behind one awaitable ``reset``/``step``, as Gymnasium defines it."""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import aclosing
from types import TracebackType
from typing import TYPE_CHECKING, Any

import anyio
import anyio.lowlevel
import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from aiovec._core._arguments import check_count, check_env_fns, check_recv_bounds, check_timeout
from aiovec._core._async_env import AsyncEnv, CoroutineEnvError
from aiovec._core._engine import BoolArray, Engine, PausedStep, State, StepResult
from aiovec._core._exit import close_at_exit, join_at_exit
from aiovec._core._failures import error_group
from aiovec._core._first_ready import StepBatch, received_batches
from aiovec._core._in_flight import START_TIMEOUT, USE_DEFAULT, InFlight, Timeout, checked_timeout
from aiovec._core._options import AsyncVectorOptions, takes_options, with_defaults
from aiovec._core._requests import CallRequest, EnvDescription, Op
from aiovec._core._restart import RestartPolicy
from aiovec._core._seeding import ResetOptions, per_env_seeds, split_options
from aiovec._core._selection import COROUTINE_ENVS_FOUND, BackendSelection
from aiovec._core._spaces import VectorSpaces, check_observation_mode, resolve_spaces
from aiovec._core._statistics import LatencySummary, Statistics
from aiovec._exceptions import BusyError, NotStartedError, SubEnvErrorGroup
from aiovec._limits._shared import SharedLimits

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["AsyncVectorEnv", "EnvFactory", "StepResult"]


#: What makes a sub-env: a ``gymnasium.Env`` for most backends, a coroutine env (``AsyncEnv``,
#: or an awaitable of one) for ``backend="async"``.
EnvFactory = Callable[[], "gym.Env[Any, Any] | AsyncEnv[Any, Any] | Awaitable[AsyncEnv[Any, Any]]"]


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
    - ``"auto"`` (default): picks one for you (the rule is in docs/guide/backends.md).

    ``max_concurrency`` caps how many sub-envs execute at once (Gymnasium's meaning; on the
    process and Ray backends, by starting at most that many workers); ``limits`` declares
    named limits the sub-envs take from inside their calls (``aiovec.limit``). ``send``/``recv``
    step sub-envs on their own and return the first ``batch_size`` to finish (``async for
    batch in envs.batches()`` too), or whatever is ready within a wait (``min_size``,
    ``wait``); ``max_in_flight`` caps how many step at once (movable while running) and
    ``abort`` cancels chosen sub-envs' steps.

    Actions are checked for batch size, shape and dtype before anything is sent;
    ``validate_actions=True`` also refuses any action outside the action space (say, 5 for
    ``Discrete(2)``) with a ``ValueError``: nobody who can send actions can crash or restart a
    sub-env with one (serving code should set it).

    ``timeout`` is the default deadline, in seconds, of every call (``None``: no deadline); each
    call also takes ``timeout=``, and honours the caller's own cancel scopes. ``restart`` (a
    ``RestartPolicy``, ``True`` for its defaults, or an int cap) recreates sub-envs that raise,
    hang or die instead of raising; see docs/guide/failures.md. Use it as ``async with
    AsyncVectorEnv(...) as envs:`` or close it with ``await aclose()``.
    """

    #: What the warning of one left open says to do (a sync shim says its own ``close``).
    _how_to_close = "use `async with` or `await envs.aclose()`"

    @takes_options(AsyncVectorOptions)
    def __init__(self, env_fns: Sequence[EnvFactory],
                 **options: Unpack[AsyncVectorOptions]) -> None:
        given = with_defaults(options)
        check_env_fns(env_fns)
        observation_mode = given["observation_mode"]
        check_observation_mode(observation_mode)
        self.num_envs: int = len(env_fns)
        autoreset_mode = AutoresetMode(given["autoreset_mode"])
        timeout = check_timeout(given["timeout"], "timeout")
        self.close_timeout = check_timeout(given["close_timeout"], "close_timeout") or math.inf
        self.observation_mode = observation_mode
        #: How many results ``recv`` returns by default (first-ready batches).
        self.batch_size: int = (check_count(given["batch_size"], "batch_size", self.num_envs)
                                or self.num_envs)
        parent_worker = given["parent_worker"]
        #: The named limits the sub-envs take (``limits=``), while the vector env lives.
        self._limits = SharedLimits(given["limits"])
        backend_options = {
            "num_workers": given["num_workers"], "start_method": given["start_method"],
            "parent_worker": None if parent_worker is None else bool(parent_worker),
            "max_concurrency": check_count(given["max_concurrency"], "max_concurrency"),
            "address": given["address"], "actor_options": given["actor_options"],
            "limits": self._limits or None,
            "episode_timeout": check_timeout(given["episode_timeout"], "episode_timeout")}
        max_in_flight = check_count(given["max_in_flight"], "max_in_flight")
        self._selection = BackendSelection(given["backend"], env_fns, backend_options,
                                           autoreset_mode)
        #: Carries every call, and holds the vector env's state.
        self._engine = Engine(
            self.num_envs, autoreset_mode, self._selection.make(),
            RestartPolicy.coerce(given["restart"]), copy=given["copy"], timeout=timeout,
            validate_actions=bool(given["validate_actions"]), max_in_flight=max_in_flight,
            episode_options=given["episode_options"])
        self.spec: gym.envs.registration.EnvSpec | None = None
        self._metadata: dict[str, Any] = {}
        self._render_mode: str | None = None
        self._spaces: VectorSpaces | None = None
        self._final_latency: tuple[LatencySummary, ...] | None = None

    @property
    def autoreset_mode(self) -> AutoresetMode:
        """How a sub-env whose episode ended starts the next one (Gymnasium's modes)."""
        return self._engine.autoreset_mode

    @property
    def validate_actions(self) -> bool:
        """Every action is checked against the action space before it is sent; settable
        until start (the checks are set up then)."""
        return self._engine.validate_actions

    @validate_actions.setter
    def validate_actions(self, value: bool) -> None:
        self._engine.validate_actions = bool(value)

    @property
    def timeout(self) -> float | None:
        """The default deadline of every call, in seconds (``None``: none); settable."""
        return self._engine.timeout

    @timeout.setter
    def timeout(self, value: float | None) -> None:
        self._engine.timeout = check_timeout(value, "timeout")

    @property
    def copy(self) -> bool:
        """Observations returned are copies of the batch arrays (else views, overwritten by
        the next call); settable."""
        return self._engine.copy

    @copy.setter
    def copy(self, value: bool) -> None:
        self._engine.copy = value

    # ------------------------------------------------------------------ lifecycle

    async def start(self, *, timeout: float | None = START_TIMEOUT) -> None:
        """Make every sub-env (concurrently where the backend allows). Idempotent.

        ``reset`` and the other calls start the vector env on first use; ``async with`` does it
        up front. If a factory raises or hangs past ``timeout`` seconds, everything made so far
        is closed again and the error is raised; the vector env is then closed.
        """
        timeout = check_timeout(timeout, "timeout")
        engine = self._engine
        if engine.state is State.RUNNING:
            return
        engine.check_not_closed("start")
        if engine.state is State.STARTING or engine.in_flight is not None:
            raise BusyError("another task is already starting this vector env")
        engine.state = State.STARTING
        try:
            if await self._selection.settle(self.num_envs, self.timeout):
                engine.backend = self._selection.make()
        finally:
            if engine.state is State.STARTING:  # else another task's aclose closed it
                engine.state = State.CREATED
        engine.check_not_closed("start")
        try:
            await self._start(timeout)
        except SubEnvErrorGroup as error:
            if not (self._selection.may_switch_to_async and self._start_failed_alone
                    and all(isinstance(sub_error.__cause__, CoroutineEnvError)
                            for sub_error in error.exceptions)):
                raise
            self._selection.switch(COROUTINE_ENVS_FOUND)
            engine.backend = self._selection.make()
            engine.state = State.CREATED
            await self._start(timeout)

    @property
    def backend_name(self) -> str:
        """The backend the sub-envs run on (``"auto"`` settles it at ``start``)."""
        return self._selection.name

    @property
    def backend_reason(self) -> str:
        """Why they run there: what ``"auto"`` measured and estimated, or that it was given."""
        return self._selection.reason

    async def _start(self, timeout: float | None) -> None:
        engine = self._engine
        engine.state = State.STARTING
        self._start_failed_alone = False
        try:
            self._limits.open()
            pending = await engine.backend.start()
            engine.in_flight = InFlight("start", Op.MAKE, pending.env_indices, (), pending)
            descriptions: list[EnvDescription] = await engine.collect_start(engine.in_flight,
                                                                            timeout)
            self._spaces = resolve_spaces(self.observation_mode, descriptions)
            buffers = await engine.backend.attach(self._spaces)
        except BaseException:
            engine.in_flight = None
            if engine.state is not State.CLOSED:  # else another task's aclose closed it all
                engine.state = State.CLOSED
                self._start_failed_alone = True
                with anyio.CancelScope(shield=True):
                    await engine.backend.aclose(self.close_timeout)
                self._limits.close()
            raise
        engine.in_flight = None
        engine.open_first_ready()
        self._metadata = dict(descriptions[0].metadata)
        self._metadata["autoreset_mode"] = self.autoreset_mode
        self._render_mode = descriptions[0].render_mode
        engine.allocate_buffers(self._spaces, buffers)
        engine.state = State.RUNNING
        close_at_exit(self)

    async def aclose(self) -> None:
        """Close every sub-env and release all resources. Idempotent, bounded in time.

        Raises ``SubEnvErrorGroup`` if a sub-env's ``close`` raised (after everything else
        has been released).
        """
        engine = self._engine
        if engine.state is State.CLOSED:
            return
        self._final_latency = self._latency_summaries()
        engine.close()
        with anyio.CancelScope(shield=True):
            pending = await engine.backend.aclose(self.close_timeout)
        self._limits.close()
        if pending is not None and pending.failures():
            raise error_group("close", pending.failures())

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
        engine = self._engine
        if engine.state is not State.CLOSED:
            engine.state = State.CLOSED
            engine.drop_buffers()  # else the shared memory stays mapped (and its descriptor)
            engine.backend.close_nowait()
            self._limits.close()
            # Threads of this process closing sub-envs run cleanups already claimed from the
            # keeper: exit waits for them.
            join_at_exit(engine.backend.closing_threads(), self.close_timeout)

    def __del__(self) -> None:
        # Never started: nothing to release, nothing to warn about.
        engine = self.__dict__.get("_engine")
        if engine is not None and engine.state not in (State.CLOSED, State.CREATED):
            self._close_unclosed()

    def _close_unclosed(self) -> None:
        self.close_nowait()  # first: the warning may be turned into an error
        warnings.warn(f"unclosed {self!r}: {self._how_to_close}", ResourceWarning, stacklevel=1)

    @property
    def closed(self) -> bool:
        """True once ``aclose`` has run (or start failed)."""
        return self._engine.state is State.CLOSED

    def __repr__(self) -> str:
        engine = self._engine
        stepping = "" if engine.in_flight is None else f", {engine.in_flight.operation} in flight"
        return (f"<{type(self).__name__} {self.num_envs} envs, {engine.backend.describe()}, "
                f"{engine.state.value}{stepping}>")

    # ------------------------------------------------------------------ observability

    def statistics(self) -> Statistics:
        """Counters since creation, and each sub-env's exact step count and sampled recent
        step latency (``LatencySummary`` says how); cheap: no I/O."""
        engine = self._engine
        counters, backend = engine.counters, engine.backend
        return Statistics(
            steps=counters.steps, resets=counters.resets, errors=counters.errors,
            timeouts=counters.timeouts, restarts=counters.restarts,
            abandoned_threads=backend.abandoned_threads(),
            step_latency=self._final_latency or self._latency_summaries(),
            descendants_reaped=backend.descendants_reaped,
            cleanups_run=backend.cleanups.run, cleanups_failed=backend.cleanups.failed,
            backend=self.backend_name, backend_reason=self.backend_reason,
            aborts=counters.aborts, limits=self._limits.usage(),
            episodes=engine.recovery.episodes.counts())

    def _latency_summaries(self) -> tuple[LatencySummary, ...]:
        latencies, counts = self._engine.backend.latencies, self._engine.step_counts
        if latencies is None:  # not started yet, or a backend that does not time steps (Ray)
            return tuple(LatencySummary(counts[index], math.nan, math.nan, math.nan)
                         for index in range(self.num_envs))
        return latencies.summaries([counts[index] for index in range(self.num_envs)])

    @property
    def unusable_envs(self) -> tuple[int, ...]:
        """Sub-envs that cannot step until reset: never reset, failed, timed out, died, cut
        short by a cancelled call, or (autoreset disabled) done. ``reset`` recovers them."""
        if self._engine.state is not State.RUNNING:
            return tuple(range(self.num_envs))
        return tuple(self._engine.health.needing_reset())

    @property
    def restart_policy(self) -> RestartPolicy | None:
        """The restart policy, or ``None`` (errors are raised)."""
        return self._engine.restart_policy

    # ------------------------------------------------------------------ attributes

    def _running_spaces(self) -> VectorSpaces:
        if self._spaces is None:
            self._engine.check_not_closed("read the spaces of")
            raise NotStartedError("the spaces are known once the sub-envs run: use `async with "
                                  "envs:` or `await envs.start()` (or `await envs.reset()`) first")
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
        if self._engine.backend.in_process:
            return tuple(self._local_attr("np_random_seed"))
        self._running_spaces()
        return tuple(self._engine.results.np_random_seeds)

    @property
    def np_random(self) -> tuple[np.random.Generator, ...]:
        """Each sub-env's random generator (in-process backends; else ``await get_attr``)."""
        return tuple(self._local_attr("np_random"))

    def _local_attr(self, name: str) -> list[Any]:
        self._running_spaces()
        if not self._engine.backend.in_process:
            raise AttributeError(f"use `await envs.get_attr({name!r})` with the "
                                 f"{self.backend_name} backend")
        return [self._engine.backend.local_env(index).get_wrapper_attr(name)
                for index in range(self.num_envs)]

    # ------------------------------------------------------------------ the API

    async def reset(
        self,
        *,
        seed: int | Sequence[int | None] | None = None,
        options: ResetOptions = None,
        timeout: Timeout = USE_DEFAULT,
        out: Any = None,
    ) -> tuple[Any, dict[str, Any]]:
        """Reset the sub-envs (those in ``options["reset_mask"]``, else all) → ``(obs, infos)``.

        ``seed``: ``None``, an int ``s`` (sub-env ``i`` gets ``s + i``) or one seed per sub-env.
        ``options``: one dict for every sub-env (Gymnasium's); or each sub-env its own (a task
        per episode): a list of one dict (or ``None``) per sub-env, or a dict from the indices
        of the sub-envs to reset to theirs. Sub-envs given none take ``episode_options``'s.
        Each episode's own options are named in ``infos["episode_options"]``.
        Other sub-envs may be stepping after ``send`` meanwhile; a sub-env reset must not be
        (``BusyError``), and its results still waiting for ``recv`` are dropped.
        ``out``: as for ``step`` (the whole batch is written, reset or not).
        """
        timeout = checked_timeout(timeout)
        in_flight = await self._submit_reset(seed, options, out)
        return await self._engine.finish_reset(in_flight, timeout)

    async def step(
        self, actions: Any, *, timeout: Timeout = USE_DEFAULT, out: Any = None
    ) -> tuple[Any, np.ndarray[Any, Any], BoolArray, BoolArray, dict[str, Any]]:
        """Step each sub-env with its action → ``(obs, rewards, terminations, truncations, infos)``.

        The batch is checked first: a wrong batch size, shape or dtype raises ``ValueError``
        and no sub-env steps. ``out``: your own buffer for the observations (an array, or the
        observation's dict/tuple tree of arrays, of exactly its batched shape and dtype), filled
        with one copy and returned as ``obs`` (``copy`` then does not apply); a wrong one is
        refused (``TypeError``/``ValueError``) before any sub-env is sent anything.
        """
        timeout = checked_timeout(timeout)
        engine = self._engine
        in_flight = engine.submit_step(actions, out)
        if not engine.backend.serves_in_caller:
            return await engine.finish_step(in_flight, timeout)
        try:  # the one await (as on every backend): a step cancelled here touched nothing
            await anyio.lowlevel.checkpoint()
        except BaseException:
            engine.release(in_flight)
            raise
        outcome = engine.step_now(in_flight, timeout)
        if isinstance(outcome, PausedStep):
            return await outcome.resume()
        return outcome

    async def call(self, name: str, /, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Call method ``name`` on every sub-env (or read it, if not callable) → the results."""
        in_flight = await self._submit_call(name, args, kwargs)
        return await self._engine.finish_call(in_flight, USE_DEFAULT)

    async def get_attr(self, name: str) -> tuple[Any, ...]:
        """Read attribute ``name`` of every sub-env (through its wrappers)."""
        return await self.call(name)

    async def set_attr(self, name: str, values: Any) -> None:
        """Set attribute ``name`` on every sub-env: one value each (list/tuple) or one for all."""
        if not isinstance(values, (list, tuple)):
            values = [values] * self.num_envs
        if len(values) != self.num_envs:
            raise ValueError("Values must be a list or tuple with length equal to the number of "
                             f"environments. Got `{len(values)}` values for {self.num_envs} "
                             "environments.")
        await self._ensure_started()
        engine = self._engine
        engine.claim("set_attr")
        payloads = [(name, value) for value in values]
        in_flight = engine.submit(Op.SET_ATTR, "set_attr", engine.all_envs, payloads)
        await engine.finish_call(in_flight, USE_DEFAULT)

    async def render(self) -> tuple[Any, ...]:
        """Each sub-env's rendered frame."""
        return await self.call("render")

    # ------------------------------------------------------------------ first-ready batches

    def send(self, actions: Any, env_ids: Any = None, *, timeout: Timeout = USE_DEFAULT) -> None:
        """Start stepping sub-envs ``env_ids`` (default: all) with ``actions``, one each, and
        return at once; ``recv`` collects their results, first finished first.

        ``actions`` is a batch for ``len(env_ids)`` sub-envs, checked like ``step``'s. Each
        sub-env's ``timeout`` runs from now (with ``max_concurrency``, waiting for a turn
        counts; past ``max_in_flight``, it runs from when its step leaves the queue; while
        a ``recv`` restarts failed sub-envs, it waits in that queue too). A sub-env cannot be
        sent a second action before its result was received, and ``step`` refuses to run
        while results are owed (both ``BusyError``).
        """
        self._engine.send(actions, env_ids, timeout)

    async def recv(self, *, batch_size: int | None = None, min_size: int | None = None,
                   wait: float | None = None) -> StepBatch:
        """The results of the first sub-envs to finish since ``send``: at most ``batch_size``
        (default: the constructor's ``batch_size``).

        By default it waits for a full batch (fewer only if fewer are owed). With
        ``min_size`` (1 to ``batch_size``) it returns as soon as ``batch_size`` are ready,
        or once ``min_size`` are and ``wait`` seconds (default 0: no wait) have passed since
        it was called: whatever is ready, never fewer than ``min_size`` unless fewer are
        owed. ``wait`` alone means ``min_size=1``. It returns at most as many as were owed when
        it was called: sends made while it waits do not raise that count (their results may be
        among the earliest); if every result owed is aborted meanwhile, ``NothingSentError``.

        Cancelling ``recv`` loses nothing: results that land meanwhile wait for the next one.
        A failed, timed-out or restarted sub-env is reported as ``step`` reports it, the
        batch's healthy results on the error as ``partial_result``.
        """
        self._engine.check_not_closed("recv")
        bounds = check_recv_bounds(batch_size, min_size, wait,
                                   default_batch_size=self.batch_size, num_envs=self.num_envs)
        return await self._engine.recv(bounds)

    async def batches(self, *, batch_size: int | None = None, min_size: int | None = None,
                      wait: float | None = None, follow: bool = False,
                      ) -> AsyncIterator[StepBatch]:
        """``recv`` batches (same arguments) as they complete, until nothing sent is left to
        receive.

        ``async for batch in envs.batches(): envs.send(policy(batch.observations),
        batch.env_ids)`` keeps every sub-env busy; stop sending to end the loop.

        ``follow=True`` is for a loop that sends each row's action from a task of its own,
        as its reply lands (one request per row to a continuously batching server): owing
        nothing, it waits for the next ``send`` instead of ending (every row may be waiting
        on the server); it ends when the vector env closes, or when you leave the loop (in
        ``async with contextlib.aclosing(envs.batches(...))``, as trio wants of any async
        generator left early).
        """
        self._engine.check_not_closed("receive batches from")
        check_recv_bounds(batch_size, min_size, wait, default_batch_size=self.batch_size,
                          num_envs=self.num_envs)
        # Closed with this generator (left early, in aclosing): trio wants every one closed.
        async with aclosing(received_batches(
                functools.partial(self.recv, batch_size=batch_size, min_size=min_size,
                                  wait=wait), self._engine.owing,
                self._engine.until_owed if follow else None)) as received:
            async for batch in received:
                yield batch

    @property
    def max_in_flight(self) -> int | None:
        """At most this many sub-envs step at once among first-ready sends (``None``: no
        cap); settable at any time.

        Sends past it wait in a queue, in send order, and are dispatched as results land.
        Raising the cap dispatches at once; lowering it lets the running steps finish. A
        queued sub-env owes a result (``recv`` returns it, ``send`` refuses it) and its
        ``timeout`` starts when its step is dispatched. An aborted step the backend cannot
        stop (thread, process, Ray) counts until it ends, so the cap bounds the steps that
        really run (``num_stepping``). ``max_concurrency``, by contrast, caps every call
        inside the backend and counts waiting for a turn in the timeout.
        """
        return self._engine.max_in_flight

    @max_in_flight.setter
    def max_in_flight(self, value: int | None) -> None:
        self._engine.max_in_flight = value

    @property
    def episode_options(self) -> Callable[[int], dict[str, Any] | None] | None:
        """Where each new episode's reset options come from (``episode_options=``): a
        function of the sub-env's index, or ``None``; settable at any time (episodes already
        drawn for keep theirs)."""
        return self._engine.episode_options.source

    @episode_options.setter
    def episode_options(self, source: Callable[[int], dict[str, Any] | None] | None) -> None:
        self._engine.episode_options.set_source(source)

    @property
    def num_stepping(self) -> int:
        """How many first-ready steps run now: dispatched, result not landed, aborted ones
        still running included (a thread, a worker process or a Ray actor cannot stop one;
        their results are never received). This is what ``max_in_flight`` caps."""
        return self._engine.num_stepping

    @property
    def num_queued(self) -> int:
        """How many sub-envs sent an action wait for room under ``max_in_flight``."""
        return self._engine.num_queued

    @property
    def num_ready(self) -> int:
        """How many results landed and wait for ``recv``."""
        return self._engine.num_ready

    def abort(self, env_ids: Any) -> None:
        """Cancel the outstanding first-ready steps of sub-envs ``env_ids`` (``None``: all;
        an empty sequence: none) and return at once: nothing they return is ever received.

        A queued step (``max_in_flight``) is dropped; a running one is cancelled where the
        backend can (the async backend cancels its coroutine), else left to finish (counted
        by ``num_stepping`` and the cap until then), its result thrown away; a result waiting
        for ``recv`` is dropped. Each sub-env that owed anything then needs a reset, which may
        run while others step (``reset(options={"reset_mask": mask})``); counted in
        ``statistics().aborts``, not as a failure, timeout or restart. Refused before
        anything is dropped: a bad ``env_ids`` as ``send``'s, and while another call holds them.
        """
        self._engine.abort(env_ids)

    # ------------------------------------------------------------------ split calls
    # A call in two halves (submit, then finish) for the sync shim's ``*_async``/``*_wait``
    # and the adapters; the submitting half starts the vector env on first use.

    async def _ensure_started(self) -> None:
        if self._engine.state is not State.RUNNING:
            self._engine.check_not_closed("use")
            await self.start()

    async def _submit_step(self, actions: Any) -> InFlight:
        return self._engine.submit_step(actions)

    async def _finish_step(self, in_flight: InFlight, timeout: Timeout) -> StepResult:
        return await self._engine.finish_step(in_flight, timeout)

    async def _submit_reset(
        self, seed: int | Sequence[int | None] | None, options: ResetOptions,
        out: Any = None,
    ) -> InFlight:
        self._engine.check_not_closed("reset")
        seeds = per_env_seeds(seed, self.num_envs)
        reset_mask, env_options, per_env = split_options(options, self.num_envs)
        await self._ensure_started()
        return self._engine.submit_reset(seeds, reset_mask, env_options, out, per_env)

    async def _submit_call(self, name: str, args: tuple[Any, ...],
                           kwargs: dict[str, Any]) -> InFlight:
        if not isinstance(name, str):
            raise TypeError(f"the attribute name must be a str, got {type(name).__name__}")
        return await self._submit_call_at(self._engine.all_envs, name, args, kwargs)

    async def _submit_call_at(
        self, env_ids: Sequence[int], target: str | Callable[..., Any],
        args: tuple[Any, ...], kwargs: dict[str, Any],
    ) -> InFlight:
        """Call ``target`` (a name, or a picklable function taking the env first) on sub-envs
        ``env_ids`` only; the others answer ``None``. For adapters (``aiovec.sb3``)."""
        engine = self._engine
        chosen = set(engine.indices_in_range(env_ids))
        await self._ensure_started()
        engine.claim("call")
        request: CallRequest = (target, args, kwargs)
        payloads = [request if index in chosen else None for index in engine.all_envs]
        return engine.submit(Op.CALL, "call", engine.all_envs, payloads)

    async def _call_at(self, env_ids: Sequence[int], target: str | Callable[..., Any], /,
                       *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """``call`` on sub-envs ``env_ids`` only (see ``_submit_call_at``) → their results."""
        in_flight = await self._submit_call_at(env_ids, target, args, kwargs)
        results = await self._engine.finish_call(in_flight, USE_DEFAULT)
        return tuple(results[index] for index in env_ids)

    async def _set_attr_at(self, env_ids: Sequence[int], name: str, value: Any) -> None:
        """Set attribute ``name`` to ``value`` on sub-envs ``env_ids`` only."""
        engine = self._engine
        chosen = set(engine.indices_in_range(env_ids))
        await self._ensure_started()
        engine.claim("set_attr")
        payloads = [(name, value) if index in chosen else None for index in engine.all_envs]
        in_flight = engine.submit(Op.SET_ATTR, "set_attr", engine.all_envs, payloads)
        await engine.finish_call(in_flight, USE_DEFAULT)
