"""A worker process whose sub-envs are coroutine envs (``aiovec.AsyncEnv``).

They run on an event loop of the worker's own, hosted by the async backend itself
(``AsyncBackend``), so one worker steps many of them at once and every guarantee they have
in the trainer's process holds here too: a sub-env given up on (``DISCARD``) or a first-ready
step aborted (``ABORT``) has its coroutine cancelled, and only that sub-env is lost; episode
timeouts, async cleanups and autoreset are the async backend's own.

The wire is the process backend's frames, without shared memory: each request is a list of
``(env index, payload)``; replies go back as each sub-env's lands, those that land together in
one ``REPLY`` frame (sequence 0) holding ``(request's sequence, env index, reply)`` entries and
the cleanups run since the last frame. A request is never waited for as a whole, so a slow
sub-env holds back no other (first-ready keeps its meaning).
"""

from __future__ import annotations

import asyncio
import contextlib
import mmap
import os
import pickle
import socket
from collections.abc import Callable, Sequence
from typing import Any

from gymnasium.vector import AutoresetMode

from aiovec._backends._async import AsyncBackend
from aiovec._backends._portable import picklable, portable
from aiovec._backends._process._protocol import HEADER, Kind, dumps, encode, recv_exact
from aiovec._backends._process._shared_memory import BlockLayout, map_block
from aiovec._backends._process_tree import NoProcessTracking, StartedProcesses
from aiovec._core._backend import Arrivals, Pending
from aiovec._core._requests import NO_REPLY, Failure, Op
from aiovec._core._statistics import LatencyLog

__all__ = ["serve_coroutines"]

#: Seconds the sub-envs get to close once the parent is gone (it asks with its own bound).
_CLOSE_TIMEOUT = 10.0

_OP_OF_KIND = {Kind.RESET: Op.RESET, Kind.STEP: Op.STEP, Kind.CALL: Op.CALL,
               Kind.SET_ATTR: Op.SET_ATTR, Kind.MAKE: Op.MAKE, Kind.OPTIONS: Op.OPTIONS}


class _Requests(Arrivals):
    """What this worker owes the parent, by request: each sub-env's reply is queued for the
    parent the moment it lands (``land``), and the replies that land together go in one
    frame once the event loop gets round to it."""

    def __init__(self, host: _CoroutineHost) -> None:
        super().__init__()
        self._host = host
        #: Per request in progress: its sequence, its op and the positions still owed.
        self.sequence_of: dict[Pending, tuple[int, Op, set[int]]] = {}
        self.by_sequence: dict[int, Pending] = {}

    def track(self, sequence: int, op: Op, pending: Pending) -> None:
        owed = {position for position, reply in enumerate(pending.replies)
                if reply is NO_REPLY}
        if owed:
            self.sequence_of[pending] = (sequence, op, owed)
            self.by_sequence[sequence] = pending
        for position in sorted(set(range(len(pending.replies))) - owed):  # answered at once
            self._queue(sequence, op, pending, position)

    def land(self, pending: Pending, position: int) -> None:
        entry = self.sequence_of.get(pending)
        if entry is None:
            return  # answered before ``track`` saw it (queued there), or not the parent's
        sequence, op, owed = entry
        if position not in owed:
            return  # dropped: given up on or aborted
        self._forget(pending, sequence, owed, position)
        self._queue(sequence, op, pending, position)

    def drop(self, sequence: int, local_index: int) -> None:
        """The parent will not read this sub-env's reply to ``sequence``: never send it."""
        pending = self.by_sequence.get(sequence)
        if pending is None:
            return
        sequence, _, owed = self.sequence_of[pending]
        for position, env_index in enumerate(pending.env_indices):
            if env_index == local_index and position in owed:
                self._forget(pending, sequence, owed, position)

    def drop_env(self, local_index: int) -> None:
        """Sub-env ``local_index`` was given up on: none of its replies is read any more."""
        for sequence in list(self.by_sequence):
            self.drop(sequence, local_index)

    def _forget(self, pending: Pending, sequence: int, owed: set[int], position: int) -> None:
        owed.discard(position)
        if not owed:
            del self.sequence_of[pending]
            del self.by_sequence[sequence]

    def _queue(self, sequence: int, op: Op, pending: Pending, position: int) -> None:
        reply = pending.replies[position]
        env_index = self._host.first_env + pending.env_indices[position]
        if type(reply) is Failure:
            reply = portable(reply)
        self._host.send_soon((sequence, env_index, reply), op)


class _CoroutineHost:
    """One worker's coroutine sub-envs and its end of the socket."""

    def __init__(self, first_env: int, env_fns: list[Callable[[], Any]],
                 autoreset_mode: AutoresetMode, episode_timeout: float | None,
                 started: StartedProcesses | NoProcessTracking,
                 max_concurrency: int | None) -> None:
        self.first_env = first_env
        self.backend = AsyncBackend(env_fns, autoreset_mode, episode_timeout=episode_timeout,
                                    first_env=first_env, max_concurrency=max_concurrency)
        self.requests = _Requests(self)
        #: What the sub-envs started, ended once they are closed (remakes leave it: the
        #: sub-envs are made concurrently, so what each started cannot be told apart).
        self.started = started
        self._outbox: list[tuple[int, int, Any]] = []
        self._phases: list[str] = []
        self._flush_due = False
        self._writer: asyncio.StreamWriter | None = None
        #: The shared memory block, mapped for the step latencies' rows.
        self._block: mmap.mmap | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    # ------------------------------------------------------------------ replies

    def send_soon(self, entry: tuple[int, int, Any], op: Op) -> None:
        self._outbox.append(entry)
        self._phases.append(op.value)
        if not self._flush_due:
            self._flush_due = True
            assert self._loop is not None
            self._loop.call_soon(self.flush)

    def flush(self) -> None:
        """Send every reply queued, with the cleanups run meanwhile, in one frame."""
        self._flush_due = False
        if self._writer is None or self._writer.is_closing():
            return
        entries, self._outbox = self._outbox, []
        phases, self._phases = self._phases, []
        self._writer.write(encode(Kind.REPLY, 0, self._reply_payload(entries, phases)))

    def _take_tally(self) -> tuple[int, int, int]:
        """What the parent counts since the last frame: processes ended, cleanups run and
        cleanups failed."""
        cleanups = self.backend.cleanups
        tally = (self.started.take_ended(), cleanups.run, cleanups.failed)
        cleanups.run = cleanups.failed = 0
        return tally

    def _closed(self, pending: Pending | None) -> list[Any]:
        """The close's replies, one per sub-env (none to close: ``None`` each)."""
        return ([None] * self.backend.num_envs if pending is None
                else _portable(pending.replies))

    def _reply_payload(self, entries: list[tuple[int, int, Any]], phases: list[str]) -> bytes:
        tally = self._take_tally()
        try:
            return dumps((entries, tally))
        except Exception:  # a reply that cannot be pickled fails its own sub-env only
            safe = [(sequence, env_index, picklable(phase, env_index, reply))
                    for (sequence, env_index, reply), phase in zip(entries, phases)]
            return dumps((safe, tally))

    # ------------------------------------------------------------------ requests

    def handle(self, kind: Kind, sequence: int, payload: bytes) -> None:
        """Start serving one request (never waits: its replies go back as they land)."""
        backend, first_env = self.backend, self.first_env
        if kind is Kind.DISCARD:
            local = [env_index - first_env for env_index in pickle.loads(payload)]
            for local_index in local:
                self.requests.drop_env(local_index)
            backend.discard(local)
            self.send_soon((sequence, -1, None), Op.CLOSE)  # the acknowledgement
            return
        if kind is Kind.ABORT:
            steps = []
            for step_sequence, env_index in pickle.loads(payload):
                local_index = env_index - first_env
                pending = self.requests.by_sequence.get(step_sequence)
                self.requests.drop(step_sequence, local_index)
                if pending is not None:
                    steps.append((pending, pending.env_indices.index(local_index)))
            backend.abort_steps(steps)
            return
        op = _OP_OF_KIND[kind]
        requests: Sequence[tuple[int, Any]] = pickle.loads(payload)
        local = [env_index - first_env for env_index, _ in requests]
        if op is Op.MAKE:
            pending = backend.submit_remake(local, self.requests)
        else:
            pending = backend.submit(op, local, [request for _, request in requests],
                                     self.requests)
        self.requests.track(sequence, op, pending)

    async def close_now(self, sequence: int, sock: socket.socket) -> None:
        """The CLOSE of a vector env whose start failed, before it ever attached: the
        parent never learnt this worker's kind, so it is answered as a plain worker's is
        (``_worker._ending_reply``), replies then tally."""
        pending = await self.backend.aclose(_CLOSE_TIMEOUT)
        self.started.end_all()
        replies, tally = self._closed(pending), self._take_tally()
        try:
            frame = encode(Kind.REPLY, sequence, dumps((replies, tally)))
        except Exception:
            frame = encode(Kind.REPLY, sequence, dumps(([None] * len(replies), tally)))
        sock.sendall(frame)

    async def close(self, sequence: int, payload: bytes) -> None:
        """Close every sub-env (their async cleanups included) within the parent's bound,
        as the async backend does: what still runs then is cancelled. Answer, then end
        what they started."""
        assert self._writer is not None
        pending = await self.backend.aclose(pickle.loads(payload))
        self.started.end_all()
        replies = self._closed(pending)
        self.flush()
        entries = [(sequence, self.first_env + offset, reply)
                   for offset, reply in enumerate(replies)]
        self._writer.write(encode(Kind.REPLY, 0, self._reply_payload(
            entries, ["close"] * len(entries))))
        await self._writer.drain()

    def _attach(self, sock: socket.socket, sequence: int, payload: bytes, fd: int) -> None:
        """Map the shared memory block ATTACH carries (``fd``, closed here): this worker's
        rows of its step latencies are its sub-envs' log."""
        try:
            layout: BlockLayout = pickle.loads(payload)
            self._block = map_block(fd, layout.size)
        finally:
            os.close(fd)
        log = layout.views(self._block).latencies
        share = slice(self.first_env, self.first_env + self.backend.num_envs)
        self.backend.log_latencies(LatencyLog(log.durations[share], log.samples[share]))
        sock.sendall(encode(Kind.REPLY, sequence))

    async def serve(self, sock: socket.socket, handed: dict[int, Callable[[], Any]]) -> None:
        self._loop = asyncio.get_running_loop()
        backend = self.backend
        env_fns = backend.env_fns
        backend.env_fns = [handed.get(offset, env_fn) for offset, env_fn in enumerate(env_fns)]
        try:
            made = await backend.start()  # what ``learn_kind`` made is handed over
        finally:
            backend.env_fns = env_fns
        await made.wait()
        replies, tally = _portable(made.replies), self._take_tally()
        try:
            hello = dumps((replies, tally, True))
        except Exception:
            safe = [picklable("make", self.first_env + offset, reply)
                    for offset, reply in enumerate(replies)]
            hello = dumps((safe, tally, True))
        sock.sendall(encode(Kind.HELLO, 0, hello))
        try:
            # Read in a thread: the sub-envs' own tasks run on meanwhile (the parent sends
            # ATTACH once every worker said hello).
            kind, sequence, payload, fd = await self._loop.run_in_executor(
                None, _first_request, sock)
            if kind is Kind.ATTACH and fd is not None:
                self._attach(sock, sequence, payload, fd)
            elif kind is Kind.CLOSE and not payload:  # a failed start's, as a plain worker's
                await self.close_now(sequence, sock)
                return
            elif kind is not Kind.CLOSE:
                raise RuntimeError(f"expected ATTACH, got {kind.name}")
            reader, self._writer = await asyncio.open_connection(sock=sock)
            if kind is Kind.CLOSE:  # a close that came before ATTACH (it raced a restart)
                await self.close(sequence, payload)
                return
            while True:
                try:
                    header = await reader.readexactly(HEADER.size)
                    number, sequence, length = HEADER.unpack(header)
                    payload = await reader.readexactly(length) if length else b""
                except (asyncio.IncompleteReadError, ConnectionError) as error:
                    raise EOFError("the parent closed the connection") from error
                kind = Kind(number)
                if kind is Kind.CLOSE:
                    await self.close(sequence, payload)
                    return
                self.handle(kind, sequence, payload)
        finally:
            if not backend.closing_began():  # the parent is gone: close what is left
                with contextlib.suppress(Exception):
                    await backend.aclose(_CLOSE_TIMEOUT)
            if self._writer is not None:
                self._writer.close()
            self._unmap()

    def _unmap(self) -> None:
        """Let go of the shared memory (a parent worker's thread must: its process lives
        on)."""
        if self.backend.latencies is not None:
            self.backend.latencies.release()
        if self._block is not None:
            with contextlib.suppress(BufferError):  # (a process about to exit anyway)
                self._block.close()
            self._block = None


def _portable(replies: list[Any]) -> list[Any]:
    """Replies whose failures survive pickling (``_portable.portable``)."""
    return [portable(reply) if type(reply) is Failure else reply for reply in replies]


def _first_request(sock: socket.socket) -> tuple[Kind, int, bytes, int | None]:
    """The parent's first request after HELLO (blocking) → its kind, sequence, payload and
    the descriptor an ATTACH carries (any other's is closed)."""
    head, fds, _, _ = socket.recv_fds(sock, HEADER.size, 1)
    try:
        if not head:
            raise EOFError("the parent closed the connection")
        head += recv_exact(sock, HEADER.size - len(head))
        number, sequence, length = HEADER.unpack(head)
        kind, payload = Kind(number), recv_exact(sock, length)
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    if kind is Kind.ATTACH and fds:
        return kind, sequence, payload, fds[0]
    for fd in fds:
        os.close(fd)
    return kind, sequence, payload, None


def serve_coroutines(sock: socket.socket, first_env: int, env_fns: list[Callable[[], Any]],
                     handed: dict[int, Callable[[], Any]], autoreset_mode: AutoresetMode,
                     episode_timeout: float | None,
                     started: StartedProcesses | NoProcessTracking,
                     max_concurrency: int | None = None) -> None:
    """A coroutine worker's whole service, on an event loop of its own: make the sub-envs
    (those in ``handed`` with its factories, by offset), say hello, serve requests until
    CLOSE, or ``EOFError`` once the parent is gone. At most ``max_concurrency`` of its
    sub-envs run at once (its part of the vector env's cap)."""
    host = _CoroutineHost(first_env, env_fns, autoreset_mode, episode_timeout, started,
                          max_concurrency)
    asyncio.run(host.serve(sock, handed))
