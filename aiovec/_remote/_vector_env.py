"""``AsyncRemoteVectorEnv``: a session of an ``aiovec.serve`` server as a vector env.

One WebSocket (``/ws``) carries the session: its first message opens it, and it is the
session's lease: closing the env closes the connection and the server releases the sub-envs.
Requests carry ids and the call's deadline (``timeout``), which the server applies to its
sub-envs as a local deadline would: a late one is given up on there when the client gives up
on it, so the session can be reset at once. A call that is cancelled, or that the server does
not answer within ``TRANSPORT_GRACE`` seconds of its deadline, sends ``cancel`` for its id, so
the server stops that step too, and its late answer is skipped when it comes.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import time
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import nullcontext
from typing import Any, Literal

import anyio
import gymnasium as gym
import numpy as np

from aiovec._core._actions import ActionCheckers
from aiovec._core._arguments import check_count, check_recv_bounds, check_timeout
from aiovec._core._batching import batch_space, take_rows
from aiovec._core._first_ready import StepBatch
from aiovec._core._in_flight import USE_DEFAULT, Timeout
from aiovec._core._refusals import (
    check_can_abort,
    check_can_recv,
    check_can_send,
    check_not_busy,
    check_nothing_owed,
    check_reset_done,
)
from aiovec._core._seeding import (
    ResetOptions,
    check_options,
    per_env_seeds,
    per_sub_env,
    split_options,
)
from aiovec._exceptions import (
    ClosedError,
    EnvTimeoutError,
    NotStartedError,
    RemoteError,
    ServerGoneError,
)
from aiovec._remote._deadlines import Due, latest_answer
from aiovec._remote._replies import arrays_of, infos_of, refusal, rejection, rows_of
from aiovec._remote._websocket import WebSocket, WebSocketClosed, WebSocketRejected
from aiovec._wire._codec import decode_frame, encode_frame, to_jsonable
from aiovec._wire._schema import space_from_schema

__all__ = ["AsyncRemoteVectorEnv"]

Encoding = Literal["binary", "json"]
#: How long a cancelled call may take to tell the server, and closing to say goodbye.
_GOODBYE_SECONDS = 2.0
#: Seconds past a call's deadline the client waits for the server's answer (which the server
#: sends at the deadline: ``timeout`` if sub-envs were late) before it gives up on its own:
#: room for the network and a loaded server, and the bound when the server is stalled.
TRANSPORT_GRACE = 2.0


class _Call:
    """A request claimed and not answered yet: ``_begin`` makes it, ``_finish`` sends it."""

    __slots__ = ("deadline", "message", "op", "reset_ids")

    def __init__(self, op: str, message: dict[str, Any], deadline: float | None) -> None:
        self.op, self.message, self.deadline = op, message, deadline
        self.reset_ids: list[int] = []


class AsyncRemoteVectorEnv:
    """``num_envs`` sub-envs of ``env_id`` served at ``url`` (``http://host:port``, with any
    mount prefix), awaited like ``aiovec.AsyncVectorEnv``.

    ``token``: the server's bearer token. ``timeout``: seconds a call may take, end to end,
    before it raises ``EnvTimeoutError`` (and the server's step is cancelled); ``None``
    waits as long as the server does. ``encoding``: ``"binary"`` frames (arrays as raw
    bytes) or ``"json"``. Use ``async with`` (or ``start()`` and ``aclose()``).
    """

    def __init__(self, url: str, env_id: str, num_envs: int = 1, *, token: str | None = None,
                 timeout: float | None = 60.0, encoding: Encoding = "binary",
                 headers: Mapping[str, str] | None = None) -> None:
        if encoding not in ("binary", "json"):
            raise ValueError(f"encoding must be 'binary' or 'json', got {encoding!r}")
        if type(num_envs) is not int or num_envs < 1:
            raise ValueError(f"num_envs must be a positive int, got {num_envs!r}")
        self.url = url.rstrip("/")
        self.env_id, self.num_envs = env_id, num_envs
        self.timeout, self.encoding = check_timeout(timeout, "timeout"), encoding
        self._headers = dict(headers or {})
        if token is not None:
            self._headers["Authorization"] = f"Bearer {token}"
        self._socket: WebSocket | None = None
        self._closed = False
        self._broken: RemoteError | None = None  # why the connection ended, if it did
        self._running: str | None = None  # the call in progress, if any
        self._ids = itertools.count(1)
        self._has_reset = False
        # First-ready batches: ``send``, ``abort`` and cap requests not sent yet, those sent
        # and not answered (request id -> op, env ids owing for it), the sub-envs owing a
        # result, and those aborted (they need a reset before a ``send``).
        self._queued: list[dict[str, Any]] = []
        self._unacked: dict[int, tuple[str, list[int]]] = {}
        self._owed: set[int] = set()
        self._aborted: set[int] = set()
        self._due: dict[int, Due] = {}  # each sent sub-env's deadline
        self._max_in_flight: int | None = None
        #: How many results ``recv`` returns by default: the served session's (once started).
        self.batch_size = num_envs
        # Abandoned recv requests, and the batches their answers brought all the same.
        self._abandoned_recvs: set[int] = set()
        self._stashed: list[StepBatch] = []
        self._deferred: Exception | None = None  # a refusal to raise at the next call
        #: The server's id of the session (``None`` before ``start``): it names the session
        #: in the HTTP API (``GET /sessions/{id}``); only this client's token may use it.
        self.session_id: str | None = None
        self.metadata: dict[str, Any] = {}

    # ------------------------------------------------------------------ lifecycle

    async def start(self, *, timeout: float | None = 60.0) -> None:
        """Connect and open the session (its sub-envs start on the server): one WebSocket,
        whose first message opens the session it will carry."""
        if self._closed:
            raise ClosedError("cannot start: the remote vector env was closed")
        if self._socket is not None:
            return
        scheme, _, rest = self.url.partition("://")
        if scheme not in ("http", "https", "ws", "wss"):
            raise ValueError(f"url must start with http://, https://, ws:// or wss://, got "
                             f"{self.url!r}")
        address = f"{'wss' if scheme in ('https', 'wss') else 'ws'}://{rest}/ws"
        seconds = check_timeout(timeout, "timeout")
        with anyio.fail_after(seconds) if seconds is not None else nullcontext():
            try:
                socket = await WebSocket.connect(address, headers=list(self._headers.items()))
            except WebSocketRejected as rejected:
                raise rejection(rejected) from None
            except (OSError, WebSocketClosed) as error:
                raise ServerGoneError("unreachable", f"cannot connect to {address}: "
                                      f"{error}") from error
            try:
                await self._send(socket, {"op": "open", "id": 0, "env_id": self.env_id,
                                          "num_envs": self.num_envs})
                reply = await self._reply_to(socket, 0)
            except BaseException:
                with anyio.CancelScope(shield=True), anyio.move_on_after(_GOODBYE_SECONDS):
                    await socket.aclose()
                raise
            if not reply.get("ok"):
                await socket.aclose()
                raise refusal(reply, "open")
            self._describe(reply["session"])
            self._socket = socket

    def _describe(self, body: Mapping[str, Any]) -> None:
        self.session_id = str(body["session_id"])
        self.single_observation_space = space_from_schema(body["single_observation_space"])
        self.single_action_space = space_from_schema(body["single_action_space"])
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.metadata = {"autoreset_mode": gym.vector.AutoresetMode(body["autoreset_mode"])}
        self.batch_size = int(body.get("batch_size", self.num_envs))
        self._max_in_flight = body.get("max_in_flight")
        self._checkers = ActionCheckers(self.single_action_space, self.num_envs, values=True)

    async def aclose(self) -> None:
        """Close the session (the server releases its sub-envs). Idempotent."""
        if self._closed:
            return
        self._closed = True
        socket, self._socket = self._socket, None
        if socket is not None:
            with anyio.CancelScope(shield=True), anyio.move_on_after(_GOODBYE_SECONDS):
                with contextlib.suppress(WebSocketClosed):  # the server says goodbye first
                    await socket.send_text('{"op": "close"}')
                await socket.aclose()

    async def __aenter__(self) -> AsyncRemoteVectorEnv:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    @property
    def closed(self) -> bool:
        return self._closed

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("open" if self._socket else "not started")
        return (f"<AsyncRemoteVectorEnv {self.num_envs} {self.env_id} envs at {self.url}, "
                f"{state}>")

    # ------------------------------------------------------------------ the API

    async def reset(self, *, seed: int | Sequence[int | None] | None = None,
                    options: ResetOptions = None,
                    timeout: Timeout = USE_DEFAULT) -> tuple[Any, dict[str, Any]]:
        """Reset the sub-envs → ``(obs, infos)``; ``seed`` and ``options`` as for
        ``AsyncVectorEnv`` (each sub-env's own options too)."""
        call = self._begin_reset(seed, options, timeout)
        return self._reset_result(call, await self._finish(call, refusals=False))

    async def step(self, actions: Any, *, timeout: Timeout = USE_DEFAULT
                   ) -> tuple[Any, np.ndarray[Any, Any], np.ndarray[Any, Any],
                              np.ndarray[Any, Any], dict[str, Any]]:
        """Step every sub-env → ``(obs, rewards, terminations, truncations, infos)``; the
        actions are checked here first, as ``AsyncVectorEnv`` checks them."""
        call = self._begin_step(actions, timeout)
        return self._step_result(await self._finish(call))

    def send(self, actions: Any, env_ids: Any = None, *, timeout: Timeout = USE_DEFAULT
             ) -> None:
        """Start stepping sub-envs ``env_ids`` (default: all) with ``actions``, one each;
        ``recv`` collects their results, first finished first (``AsyncVectorEnv.send``).

        Checked here as locally (``ValueError``, ``BusyError`` for a sub-env whose result is
        still owed, ``ResetNeededError`` before the first reset), and returns at once. The
        request goes out with the next call on this env (``recv``, as a rule right after);
        each sub-env's ``timeout`` runs from then, on the server. A refusal only the server
        can make (a sub-env it knows needs a reset) is raised by that call.
        """
        self._raise_deferred()
        self._check_open("send")
        deadline = self._deadline(timeout)
        ids = check_can_send(env_ids, self.num_envs,
                             running=None if self._running == "recv" else self._running,
                             has_reset=self._has_reset, owed=self._owed.intersection)
        check_reset_done(self._aborted.intersection(ids))
        checked = self._checkers.of_size(len(ids)).check(actions, ids, copy=True)  # queued
        message: dict[str, Any] = {"op": "send", "id": next(self._ids), "actions": checked,
                                   "env_ids": ids}
        if deadline is not None:
            message["timeout"] = deadline
        self._queued.append(message)
        self._owed.update(ids)

    async def recv(self, *, batch_size: int | None = None, min_size: int | None = None,
                   wait: float | None = None) -> StepBatch:
        """The results of the first sub-envs to finish since ``send``, at most ``batch_size``
        (default: the served session's), within ``min_size`` and ``wait`` (seconds, on the
        server), as ``AsyncVectorEnv.recv``: a ``StepBatch``.

        Cancelling it loses nothing (a batch whose answer was already on its way waits for
        the next ``recv``). A failed or timed-out sub-env raises as ``step`` does (the other
        results of that batch stay on the server's side of the error)."""
        self._raise_deferred()
        self._check_open("recv")
        check_recv_bounds(batch_size, min_size, wait, default_batch_size=self.batch_size,
                          num_envs=self.num_envs)
        bounds: dict[str, Any] = {"batch_size": batch_size}  # what was given: checked
        if min_size is not None:
            bounds["min_size"] = int(min_size)
        if wait is not None:
            bounds["wait"] = float(wait)
        if self._stashed:  # a cancelled recv's batch that came all the same: it waited here
            batch = self._stashed.pop(0)
            self._forget(batch.env_ids.tolist())
            return batch
        check_can_recv(running=self._running, anything_owed=bool(self._owed))
        call = self._begin("recv", bounds, None, tell_server=False)
        started = await self._start(call)  # queued sends first: then every deadline is known
        latest = latest_answer(map(self._due.get, self._owed), self._max_in_flight,
                               time.monotonic())
        reply = await self._finish(call, refusals=False, started=started, timeout=None
                                   if latest is None else latest + TRANSPORT_GRACE)
        if reply.get("ok"):  # after any batch a cancelled recv's late answer brought
            self._stashed.append(self._batch(reply))
        elif not (self._stashed and reply.get("error") == "nothing_sent"):
            # A failed batch was received all the same: its sub-envs owe none.
            self._forget(int(index) for index in reply.get("received", ()) or ())
            self._raise_deferred()  # a refused send explains a recv with nothing to receive
            raise refusal(reply, "recv")
        batch = self._stashed.pop(0)
        self._forget(batch.env_ids.tolist())
        return batch

    def abort(self, env_ids: Any = None) -> None:
        """Cancel the outstanding first-ready steps of sub-envs ``env_ids`` (``None``: all;
        an empty sequence: none), as ``AsyncVectorEnv.abort``: nothing they return is ever
        received, and each that owed a result needs a reset. Refused as locally, and also
        while a ``recv`` waits (the session answers one request at a time). The request
        goes out with the next call, as ``send``'s."""
        self._raise_deferred()
        if self._socket is not None or self._closed:  # (not started: nothing owed)
            self._check_open("abort")
        owed = sorted(self._owed.intersection(
            check_can_abort(env_ids, self.num_envs, running=self._running)))
        if owed:
            self._queued.append({"op": "abort", "id": next(self._ids), "env_ids": owed})
            self._aborted.update(owed)
            self._drop_waiting(owed)  # stashed batches' rows too

    @property
    def max_in_flight(self) -> int | None:
        """At most this many sub-envs step at once among first-ready sends, on the server
        (``None``: no cap), as ``AsyncVectorEnv.max_in_flight``; the session's to begin with
        (``ServedEnv.vector_options``). Settable: the change goes out with the next call."""
        return self._max_in_flight

    @max_in_flight.setter
    def max_in_flight(self, value: int | None) -> None:
        self._check_open("set max_in_flight")
        cap = check_count(value, "max_in_flight")
        self._queued.append({"op": "max_in_flight", "id": next(self._ids),
                             "max_in_flight": cap})
        self._max_in_flight = cap

    def _batch(self, reply: dict[str, Any]) -> StepBatch:
        env_ids = np.asarray(reply["env_ids"], dtype=np.intp)
        observations, rewards, terminations, truncations, infos = self._step_result(reply)
        return StepBatch(observations, rewards, terminations, truncations, infos, env_ids)

    async def batches(self, *, batch_size: int | None = None, min_size: int | None = None,
                      wait: float | None = None) -> AsyncIterator[StepBatch]:
        """``recv`` batches (same arguments) as they complete, until nothing sent is left to
        receive (as ``AsyncVectorEnv.batches``, whose ``follow`` mode it has not yet)."""
        check_recv_bounds(batch_size, min_size, wait, default_batch_size=self.batch_size,
                          num_envs=self.num_envs)
        while self._owed:
            yield await self.recv(batch_size=batch_size, min_size=min_size, wait=wait)

    # ------------------------------------------------------------------ calls, in two phases

    def _begin_reset(self, seed: int | Sequence[int | None] | None,
                     options: ResetOptions, timeout: Timeout) -> _Call:
        deadline = self._deadline(timeout)
        seeds = per_env_seeds(seed, self.num_envs)  # the caller's mistake, refused here
        fields: dict[str, Any] = {"seed": None if seed is None else seeds}
        if per_sub_env(options):  # each sub-env its own: an array on the wire
            reset_mask, _, per_env = split_options(options, self.num_envs)
            reset_ids = (list(range(self.num_envs)) if reset_mask is None
                         else np.flatnonzero(reset_mask).tolist())
            fields["options"] = per_env
            if reset_mask is not None:
                fields["reset_ids"] = reset_ids
        else:
            check_options(options)
            assert options is None or isinstance(options, dict)
            mask = None if options is None else options.get("reset_mask")
            try:  # (a mask the server will refuse still names no sub-env here)
                reset_ids = (list(range(self.num_envs)) if mask is None
                             else np.flatnonzero(np.asarray(mask)).tolist())
            except (TypeError, ValueError):
                reset_ids = []
            if options is not None:
                fields["options"] = options
        call = self._begin("reset", fields, deadline)  # claims the env: last
        call.reset_ids = reset_ids
        return call

    def _reset_result(self, call: _Call, reply: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        """A reset's answer (``_finish(..., refusals=False)``'s) → ``(obs, infos)``, or its
        refusal raised. Results still waiting for ``recv`` belonged to the old episodes: the
        server dropped those of every sub-env it reset, also in a reset that failed for
        others."""
        if not reply.get("ok"):
            if reply.get("error") in ("timeout", "sub_env_failed"):
                failed = {int(index) for index in reply.get("env_ids", ()) or ()}
                self._drop_waiting([index for index in call.reset_ids if index not in failed])
                self._aborted.difference_update(set(call.reset_ids) - failed)
            raise refusal(reply, call.op, call.deadline)
        self._has_reset = True
        self._drop_waiting(call.reset_ids)
        self._aborted.difference_update(call.reset_ids)
        return (arrays_of(reply["observations"], self.single_observation_space),
                infos_of(reply["infos"]))

    def _drop_waiting(self, env_ids: list[int]) -> None:
        """Sub-envs reset: they owe nothing, and their stashed results are dropped."""
        self._forget(env_ids)
        dropped = set(env_ids)
        kept = []
        for batch in self._stashed:
            rows = [row for row, index in enumerate(batch.env_ids.tolist())
                    if index not in dropped]
            if rows:
                kept.append(StepBatch(
                    take_rows(batch.observations, rows, self.single_observation_space),
                    *(rows_of(part, rows) for part in batch[1:])))
        self._stashed = kept

    def _begin_step(self, actions: Any, timeout: Timeout) -> _Call:
        self._raise_deferred()
        self._check_open("step")
        deadline = self._deadline(timeout)
        check_nothing_owed("step", self._owed)
        checked = self._checkers.full.check(actions, copy=False)
        return self._begin("step", {"actions": checked}, deadline)

    def _step_result(self, reply: dict[str, Any]
                     ) -> tuple[Any, np.ndarray[Any, Any], np.ndarray[Any, Any],
                                np.ndarray[Any, Any], dict[str, Any]]:
        return (arrays_of(reply["observations"], self.single_observation_space),
                np.asarray(reply["rewards"], dtype=np.float64),
                np.asarray(reply["terminations"], dtype=np.bool_),
                np.asarray(reply["truncations"], dtype=np.bool_), infos_of(reply["infos"]))

    def _begin(self, op: str, fields: dict[str, Any], deadline: float | None, *,
               tell_server: bool = True) -> _Call:
        """Claim the env for ``op`` (``BusyError`` if a call runs); ``_finish`` sends it."""
        self._raise_deferred()
        self._check_open(op)
        check_not_busy(op, self._running)
        if deadline is not None and tell_server:
            fields["timeout"] = deadline
        self._running = op
        return _Call(op, {"op": op, "id": next(self._ids), **fields}, deadline)

    async def _start(self, call: _Call) -> float:
        """Send ``call`` (after any queued ``send``) → when it went out. Cancelled meanwhile,
        the env is released and no answer is owed."""
        socket = self._check_open(call.op)
        try:
            await self._flush(socket)
            await self._send(socket, call.message)
        except BaseException:
            self._release(call)
            raise
        return time.monotonic()

    async def _finish(self, call: _Call, *, refusals: bool = True,
                      timeout: float | None = None, started: float | None = None
                      ) -> dict[str, Any]:
        """Send ``call`` unless ``started`` (``_start`` sent it), await its answer and release
        the env; a refusal is raised (``refusals``) or returned.

        The server answers by the call's deadline; past it and ``TRANSPORT_GRACE`` (or past
        ``timeout`` seconds from now, if given), or if the caller is cancelled, the call is
        abandoned: ``cancel`` is sent, its answer skipped when it comes (a ``recv``'s batch
        kept for the next ``recv``)."""
        if started is None:
            await self._start(call)
        socket = self._check_open(call.op)
        # From now: the server answers by the deadline from when the request reached it,
        # and an answer that came while the caller did other work is already here.
        limit = None if call.deadline is None else call.deadline + TRANSPORT_GRACE
        if timeout is not None:
            limit = timeout if limit is None else min(limit, timeout)
        answered = False
        try:
            with anyio.fail_after(max(limit, 0.0)) if limit is not None else nullcontext():
                reply = await self._reply_to(socket, call.message["id"])
            answered = True
        except TimeoutError:  # the server did not answer in time (stalled, or too slow)
            raise EnvTimeoutError(call.op, range(self.num_envs),
                                  call.deadline if timeout is None else timeout) from None
        finally:
            self._release(call)
            if not answered:
                if call.op == "recv":  # a batch in its answer must not be lost
                    self._abandoned_recvs.add(call.message["id"])
                await self._abandon(socket, call.message["id"])
        if refusals and not reply.get("ok"):
            raise refusal(reply, call.op, call.deadline)
        return reply

    async def _abandon_call(self, call: _Call) -> None:
        """Give up on a started ``call`` (a sync client closed with it pending)."""
        self._release(call)
        if self._socket is not None:
            await self._abandon(self._socket, call.message["id"])

    def _release(self, call: _Call) -> None:
        if self._running == call.op:
            self._running = None

    async def _flush_queued(self) -> None:
        """Send the queued ``send`` requests now (the sync client's ``send`` does)."""
        await self._flush(self._check_open("send"))

    # ------------------------------------------------------------------ the wire

    def _check_open(self, operation: str) -> WebSocket:
        broken = self._broken
        if broken is not None:  # a fresh error each time (a reused one grows its traceback)
            raise type(broken)(broken.code, broken.detail, broken.status, broken.env_ids)
        if self._closed:
            raise ClosedError(f"cannot {operation}: the remote vector env was closed")
        if self._socket is None:
            raise NotStartedError(f"cannot {operation}: start() the remote vector env first "
                                  "(or use async with)")
        return self._socket

    def _raise_deferred(self) -> None:
        """Raise the refusal of a ``send`` the server answered since the last call."""
        deferred, self._deferred = self._deferred, None
        if deferred is not None:
            raise deferred

    def _deadline(self, timeout: Timeout) -> float | None:
        """A call's deadline in seconds, checked as the local env checks it (``check_timeout``);
        ``None`` when it has none (``inf`` too: nothing to send the server)."""
        deadline = self.timeout if timeout is USE_DEFAULT else check_timeout(timeout, "timeout")
        return None if deadline is None or deadline == math.inf else deadline

    def _forget(self, env_ids: Iterable[int]) -> None:
        """Sub-envs that owe no result any more (received, or reset)."""
        for env_index in env_ids:
            self._owed.discard(env_index)
            self._due.pop(env_index, None)

    async def _flush(self, socket: WebSocket) -> None:
        """Send the queued requests (``send``, ``abort``, the cap); their answers are read
        with the next ones."""
        queued = self._queued
        while queued:
            message = queued[0]
            await self._send(socket, message)
            queued.pop(0)
            op, now = message["op"], time.monotonic()
            self._unacked[message["id"]] = (op, message["env_ids"] if op == "send" else [])
            if op == "send":  # the server's clock for it starts about now
                seconds = message.get("timeout")
                for env_index in message["env_ids"]:
                    self._due[env_index] = None if seconds is None else (now + seconds,
                                                                        seconds)
            elif op == "max_in_flight":  # a raised cap dispatches queued steps about now
                for env_index, due in self._due.items():
                    if due is not None:
                        self._due[env_index] = (max(due[0], now + due[1]), due[1])

    async def _send(self, socket: WebSocket, message: dict[str, Any]) -> None:
        try:
            if self.encoding == "binary":
                await socket.send_bytes(encode_frame(message))
            else:
                await socket.send_text(json.dumps(to_jsonable(message), allow_nan=True))
        except WebSocketClosed as closed:
            raise self._gone(closed) from None

    async def _reply_to(self, socket: WebSocket, request_id: int) -> dict[str, Any]:
        """The answer to ``request_id``, skipping late answers to abandoned requests."""
        while True:
            try:
                data = await socket.receive()
            except WebSocketClosed as closed:
                raise self._gone(closed) from None
            try:
                reply = decode_frame(data) if isinstance(data, bytes) else json.loads(data)
            except (ValueError, RecursionError) as error:
                raise RemoteError("bad_frame", f"the server sent an unreadable answer: "
                                  f"{error}") from None
            if not isinstance(reply, dict):
                raise RemoteError("bad_frame", "the server sent something that is not an "
                                  "answer")
            answered = reply.get("id")
            if answered == request_id or (answered is None and not reply.get("ok")):
                return reply  # (no id: the server could not read the request)
            if type(answered) is int:
                self._late_answer(answered, reply)
            # else: an answer to nothing this client asked

    def _late_answer(self, request_id: int, reply: dict[str, Any]) -> None:
        """An answer to an earlier request: a queued ``send``'s, ``abort``'s or cap's (a
        refusal is raised by the next call), an abandoned ``recv``'s (its batch waits for
        the next ``recv``; its error is raised by the next call), or another abandoned
        call's (skipped)."""
        ok = reply.get("ok")
        unacked = self._unacked.pop(request_id, None)
        if unacked is not None:
            if not ok:  # refused: a refused send's sub-envs owe nothing
                op, sent_to = unacked
                self._forget(sent_to)
                self._defer(refusal(reply, op))
            return
        if request_id in self._abandoned_recvs:
            self._abandoned_recvs.discard(request_id)
            if ok:
                self._stashed.append(self._batch(reply))
            elif reply.get("error") != "cancelled":  # (cancelled in time: nothing happened)
                self._forget(int(index) for index in reply.get("received", ()) or ())
                self._defer(refusal(reply, "recv"))

    def _defer(self, error: Exception) -> None:
        if self._deferred is None:
            self._deferred = error

    async def _abandon(self, socket: WebSocket, request_id: int) -> None:
        """Tell the server to cancel ``request_id`` (its answer is skipped when it comes)."""
        with (anyio.CancelScope(shield=True), anyio.move_on_after(_GOODBYE_SECONDS),
              contextlib.suppress(RemoteError)):  # gone: then there is nothing to cancel
            await self._send(socket, {"op": "cancel", "id": request_id})

    def _gone(self, closed: WebSocketClosed) -> RemoteError:
        """The error for a connection that ended; every later call raises it again."""
        self._socket = None
        self._closed = True
        if closed.code == 1009:
            error: RemoteError = RemoteError(
                "too_large", f"the server closed the connection: a message was over its "
                f"limit ({closed.reason or 'no reason given'}); the session is gone")
        else:
            error = ServerGoneError(
                "connection_closed", f"the server at {self.url} closed the session's "
                f"connection (code {closed.code}: {closed.reason or 'no reason given'}); the "
                "session and its sub-envs are gone")
        self._broken = error
        return error
