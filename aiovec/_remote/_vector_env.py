"""``AsyncRemoteVectorEnv``: a session of an ``aiovec.serve`` server as a vector env.

One WebSocket (``/ws``) carries the session: its first message opens it, and it is the
session's lease: closing the env closes the connection and the server releases the sub-envs.
Requests carry ids; a call that is cancelled or runs past its deadline sends ``cancel`` for
its id, so the server stops that step too, and its late answer is skipped when it comes.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from typing import Any, Literal

import anyio
import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import batch_space

from aiovec._core._actions import ActionChecker
from aiovec._core._in_flight import USE_DEFAULT, Timeout
from aiovec._core._seeding import per_env_seeds
from aiovec._exceptions import (
    BusyError,
    ClosedError,
    EnvTimeoutError,
    NotStartedError,
    RemoteError,
    ResetNeededError,
    ServerGoneError,
)
from aiovec._remote._websocket import WebSocket, WebSocketClosed, WebSocketRejected
from aiovec._wire._codec import decode_frame, encode_frame, to_jsonable
from aiovec._wire._codes import CODES
from aiovec._wire._schema import space_from_schema

__all__ = ["AsyncRemoteVectorEnv"]

Encoding = Literal["binary", "json"]
#: How long a cancelled call may take to tell the server, and closing to say goodbye.
_GOODBYE_SECONDS = 2.0


def _arrays(value: Any, space: spaces.Space[Any]) -> Any:
    """Decoded values as the arrays (dicts, tuples of arrays) of batched ``space``."""
    if isinstance(space, spaces.Dict):
        return {key: _arrays(value[key], sub) for key, sub in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(_arrays(item, sub) for item, sub in zip(value, space.spaces))
    return np.asarray(value, dtype=space.dtype)


def _infos(infos: Any) -> dict[str, Any]:
    """Infos from JSON: lists of numbers and booleans back as arrays, as the local env's."""
    if not isinstance(infos, dict):
        return {}
    restored: dict[str, Any] = {}
    for key, value in infos.items():
        if isinstance(value, list):
            try:
                array = np.asarray(value)
            except ValueError:  # ragged
                array = None
            if array is not None and array.dtype != object and array.dtype.kind != "U":
                value = array
        elif isinstance(value, dict):
            value = _infos(value)
        restored[key] = value
    return restored


def _rejection(rejected: WebSocketRejected) -> RemoteError:
    """A refused handshake (an HTTP answer, with the server's JSON error body)."""
    try:
        body = json.loads(rejected.body)
        code, detail = str(body["error"]), str(body["detail"])
    except (ValueError, KeyError, TypeError):
        code, detail = "rejected", rejected.body.decode(errors="replace")[:200]
    return RemoteError(code, detail, rejected.status)


def _refusal(reply: Mapping[str, Any], operation: str) -> Exception:
    """The error a refusal from the server stands for, as the local env would raise it."""
    code, detail = str(reply.get("error")), str(reply.get("detail", ""))
    env_ids = [int(index) for index in reply.get("env_ids", ()) or ()]
    status = CODES.get(code)
    if code == "timeout":
        return EnvTimeoutError(operation, env_ids, None)
    if code == "reset_needed":
        return ResetNeededError(detail)
    if code == "busy":
        return BusyError(detail)
    if code == "unknown_session":  # reaped, or closed by its owner elsewhere
        return ServerGoneError(code, detail, status, env_ids)
    return RemoteError(code, detail, status, env_ids)


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
        if timeout is not None and not timeout > 0:
            raise ValueError(f"timeout must be positive or None, got {timeout!r}")
        self.url = url.rstrip("/")
        self.env_id, self.num_envs = env_id, num_envs
        self.timeout, self.encoding = timeout, encoding
        self._headers = dict(headers or {})
        if token is not None:
            self._headers["Authorization"] = f"Bearer {token}"
        self._socket: WebSocket | None = None
        self._closed = False
        self._broken: RemoteError | None = None  # why the connection ended, if it did
        self._busy = False
        self._ids = itertools.count(1)
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
        with anyio.fail_after(timeout) if timeout is not None else nullcontext():
            try:
                socket = await WebSocket.connect(address, headers=list(self._headers.items()))
            except WebSocketRejected as rejected:
                raise _rejection(rejected) from None
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
                raise _refusal(reply, "open")
            self._describe(reply["session"])
            self._socket = socket

    def _describe(self, body: Mapping[str, Any]) -> None:
        self.session_id = str(body["session_id"])
        self.single_observation_space = space_from_schema(body["single_observation_space"])
        self.single_action_space = space_from_schema(body["single_action_space"])
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.metadata = {"autoreset_mode": gym.vector.AutoresetMode(body["autoreset_mode"])}
        self._actions = ActionChecker(self.single_action_space, self.num_envs, values=True)

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
                    options: dict[str, Any] | None = None,
                    timeout: Timeout = USE_DEFAULT) -> tuple[Any, dict[str, Any]]:
        """Reset the sub-envs → ``(obs, infos)``; ``seed`` as for ``AsyncVectorEnv``."""
        seeds = per_env_seeds(seed, self.num_envs)  # the caller's mistake, refused here
        if options is not None and not isinstance(options, dict):
            raise TypeError(f"options must be None or a dict, got {type(options).__name__}")
        fields: dict[str, Any] = {"seed": None if seed is None else seeds}
        if options is not None:
            fields["options"] = options
        reply = await self._request("reset", fields, timeout)
        return _arrays(reply["observations"], self.observation_space), _infos(reply["infos"])

    async def step(self, actions: Any, *, timeout: Timeout = USE_DEFAULT
                   ) -> tuple[Any, np.ndarray[Any, Any], np.ndarray[Any, Any],
                              np.ndarray[Any, Any], dict[str, Any]]:
        """Step every sub-env → ``(obs, rewards, terminations, truncations, infos)``; the
        actions are checked here first, as ``AsyncVectorEnv`` checks them."""
        self._check_open("step")
        checked = self._actions.check(actions, copy=False)
        reply = await self._request("step", {"actions": checked}, timeout)
        return (_arrays(reply["observations"], self.observation_space),
                np.asarray(reply["rewards"], dtype=np.float64),
                np.asarray(reply["terminations"], dtype=np.bool_),
                np.asarray(reply["truncations"], dtype=np.bool_), _infos(reply["infos"]))

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

    async def _request(self, op: str, fields: dict[str, Any], timeout: Timeout
                       ) -> dict[str, Any]:
        socket = self._check_open(op)
        if self._busy:
            raise BusyError(f"cannot {op}: another task is running a call on this env")
        deadline = self.timeout if timeout is USE_DEFAULT else timeout
        if isinstance(deadline, (int, float)) and not math.isfinite(deadline):
            deadline = None
        request_id = next(self._ids)
        self._busy = True
        answered = False
        try:
            with anyio.fail_after(deadline) if deadline is not None else nullcontext():
                await self._send(socket, {"op": op, "id": request_id, **fields})
                reply = await self._reply_to(socket, request_id)
            answered = True
        except TimeoutError:
            raise EnvTimeoutError(op, range(self.num_envs), deadline) from None
        finally:
            self._busy = False
            if not answered:
                await self._abandon(socket, request_id)
        if not reply.get("ok"):
            raise _refusal(reply, op)
        return reply

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
            # else: the late answer of a call abandoned earlier

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
