"""The worker process: hosts a contiguous share of the sub-envs and serves the parent's frames.

The hot path is ``HostedEnvs.step``: read each sub-env's action from shared memory, step it
(autoreset included, in ``EnvSlot``), write its results back in place, and answer with one
small frame: empty when no sub-env has infos, a bare ``RECORDED`` header when their infos fit
the records in shared memory (``_info_records``), else the infos (and any failure) pickled.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import mmap
import os
import pickle
import signal
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import cloudpickle
from gymnasium.vector import AutoresetMode

from aiovec._backends._cleanup_channel import connect
from aiovec._backends._portable import picklable, portable
from aiovec._backends._process._info_records import InfoRecorder
from aiovec._backends._process._protocol import HEADER, Kind, dumps, encode, recv_exact, recv_frame
from aiovec._backends._process._shared_memory import (
    BlockLayout,
    BlockViews,
    map_block,
    row_reader,
    row_writer,
    write_row,
)
from aiovec._backends._process_tree import (
    OWNER_VARIABLE,
    NoProcessTracking,
    StartedProcesses,
    become_subreaper,
    end_tree,
)
from aiovec._backends._readable import readable
from aiovec._backends._registrations import install_registrations
from aiovec._backends._slot import EnvSlot
from aiovec._core._async_env import is_async_env, makes_async_envs
from aiovec._core._cleanups import CleanupTally, hosted
from aiovec._core._infos import PackedInfos, pack_infos
from aiovec._core._requests import Failure, Op
from aiovec._limits._take import bind, bind_process
from aiovec._limits._takers import SocketTaker

__all__ = ["HostedEnvs", "Revoked", "WriteGuard", "main", "serve", "worker_main"]

#: After answering, a worker polls for the next request up to this long (yielding the CPU
#: between polls) before blocking, while most requests come that soon (``PollWindow``). On
#: these 2-core VMs waking a blocked worker costs the parent's ``send`` ~100 µs (5 µs to a
#: polling one), and the parent's turn between two steps (its bookkeeping, the caller's
#: code) is 100-400 µs. With the 200 µs window used before, HalfCheetah x 32's workers
#: blocked before almost every step (the parent's sends cost 84-124 µs each, 6.5-11 with this
#: window).
#: While polling, a step may spin twice this long: waiting for peers, then for the next
#: request. ``AIOVEC_WORKER_SPIN_US`` overrides (0: never poll).
SPIN_SECONDS = float(os.environ.get("AIOVEC_WORKER_SPIN_US", "1000")) * 1e-6

#: The fewest sub-envs with infos whose infos a worker merges itself. Packed, each key costs
#: two arrays to pickle and unpickle: dearer than a few small dicts. Measured on 2 cores
#: (await, process, 2 workers): HalfCheetah-v5 x 8 (4 per worker) 14.5k steps/s packed
#: against 17.9k not, Pong x 8 3.5k against 3.9k; HalfCheetah x 32 (16 per worker) 27.2k
#: packed against 25.4k not, Pong x 32 even.
PACK_FROM = 16

_HEADER_SIZE = HEADER.size
#: Non-blocking reads, where the platform has them (else the worker never polls).
_POLL_FLAGS = getattr(socket, "MSG_DONTWAIT", 0)

#: True in a worker process (``aiovec.testing.FaultyEnv`` only ends processes where it is).
IN_WORKER = False


def _exit_with_parent(lifeline: int) -> None:
    """End this process's tree and exit the moment the trainer or the supervisor dies,
    whatever the main thread is doing.

    The trainer holds the only write end of the ``lifeline`` pipe and never writes to it: the
    read returns (EOF) exactly when its descriptors close, i.e. when it dies. The supervisor
    (the fork server, or the trainer itself) is this process's parent, watched through a pidfd
    opened before checking that it still is the parent (it may have died before we looked).
    """
    watched = [lifeline]
    parent = os.getppid()
    with contextlib.suppress(AttributeError, OSError):
        watched.append(os.pidfd_open(parent))
    orphaned = os.getppid() != parent

    def watch() -> None:
        try:
            if not orphaned:
                readable(watched, None)
        finally:
            end_tree()
            os._exit(70)

    threading.Thread(target=watch, name="aiovec-lifeline", daemon=True).start()


class Revoked(EOFError):
    """The backend let go of this parent worker (``WriteGuard.revoke``): it must stop."""


class WriteGuard:
    """Lets a parent worker's thread write results into shared memory only while the backend
    still owns it. A worker process that missed a deadline is killed; a thread cannot be, and
    once its hung call returns it must not write over the rows its replacement now serves:
    ``revoke`` waits for a write under way, and every later one raises ``Revoked``."""

    __slots__ = ("_lock", "on_revoke", "revoked")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.revoked = False
        #: Called once revoked: lets go of what the thread holds as a dead process would.
        self.on_revoke: Callable[[], object] | None = None

    def revoke(self) -> None:
        with self._lock:
            self.revoked = True
        if self.on_revoke is not None:
            self.on_revoke()

    def enter(self) -> None:
        """Before a write (then ``exit``); raises ``Revoked`` instead once revoked."""
        self._lock.acquire()
        if self.revoked:
            self._lock.release()
            raise Revoked("the backend let go of this parent worker")

    def exit(self) -> None:
        self._lock.release()


def _actions_come_in_frames(env_index: int) -> Any:
    raise RuntimeError("this action space is not in shared memory: actions come in the frame")


class HostedEnvs:
    """State of one worker: its slots and, once attached, the shared-memory views."""

    def __init__(self, first_env: int, env_fns: list[Callable[[], Any]],
                 autoreset_mode: AutoresetMode, *,
                 started: StartedProcesses | NoProcessTracking,
                 guard: WriteGuard | None = None,
                 episode_timeout: float | None = None) -> None:
        self.first_env = first_env
        #: A parent worker's: results are written only while the backend still reads them.
        self.guard = guard
        #: The sub-envs' cleanups run and failed here (reported in MAKE and CLOSE replies).
        self.cleanups = CleanupTally()
        self.slots = [EnvSlot(first_env + offset, autoreset_mode, cleanups=self.cleanups,
                              episode_timeout=episode_timeout)
                      for offset in range(len(env_fns))]
        self.env_fns = env_fns
        #: What the sub-envs started: ended on close and restarts, counted until reported.
        self.started = started
        self.block: mmap.mmap | None = None
        self.views: BlockViews | None = None
        self.read_action: Callable[[int], Any] = _actions_come_in_frames
        self.write_obs: Callable[[int, Any], None] | None = None
        #: Where workers mark the full steps they finished, and the other workers' rows.
        self.step_marks: Any = None
        self.peer_rows: tuple[int, ...] = ()
        #: Writes full steps' infos into the block's records (``_info_records``).
        self.recorder: InfoRecorder | None = None

    def make(self, handed: dict[int, Callable[[], Any]]) -> list[Any]:
        """Make every hosted sub-env; those in ``handed`` (by offset) with the factory that
        hands over what ``learn_kind`` made of them (the processes they started are noted
        there)."""
        replies = [self.slots[offset].run(Op.MAKE, handed[offset]) if offset in handed
                   else self._make(offset) for offset in range(len(self.slots))]
        return [portable(reply) if type(reply) is Failure else reply for reply in replies]

    def _make(self, offset: int) -> Any:
        """Make one hosted sub-env, noting the processes it started (see ``remake``)."""
        with self.started.making(offset):
            return self.slots[offset].run(Op.MAKE, self.env_fns[offset])

    def attach(self, fd: int, layout: BlockLayout, *, wait_for_peers: bool = True) -> None:
        try:
            self.block = map_block(fd, layout.size)
        finally:
            os.close(fd)
        self.views = views = layout.views(self.block)
        if views.actions is not None:
            self.read_action = row_reader(views.actions)
        self.write_obs = None if views.observations is None else row_writer(views.observations)
        for slot in self.slots:
            slot.step_timer = views.latencies.timer(slot.env_index)
        self.step_marks = views.step_marks
        if views.info_records is not None and self.write_obs is not None:
            self.recorder = InfoRecorder(
                views.info_records[self.first_env:self.first_env + len(self.slots)])
        # Waiting for the others only pays while each worker has a CPU of its own.
        if wait_for_peers and len(layout.hosts) <= _usable_cpus():
            self.peer_rows = tuple(row for row in layout.hosts if row != self.first_env)

    def finished(self, sequence: int, until: float | None) -> None:
        """Mark full step ``sequence`` done here; then, unless ``until`` is ``None``, wait
        (polling, yielding the CPU) until every other worker has marked it too, or until
        ``until``.

        The parent needs every reply before it can go on, so holding an early reply back
        delays nothing; replies that arrive together wake the parent once, where each reply
        on its own would wake it again (~20 µs on these VMs). The wait is bounded as a poll
        for the next request is (``SPIN_SECONDS``), and does not shorten that poll. A worker
        that does not wait still marks: its peers may be waiting for it.
        """
        marks = self.step_marks
        if marks is None:
            return
        marks[self.first_env] = sequence
        if until is None:
            return
        for row in self.peer_rows:
            while marks[row] != sequence:
                if time.perf_counter() >= until:
                    return
                os.sched_yield()

    def remake(self, env_indices: list[int]) -> list[Any]:
        """Make the given hosted sub-envs afresh (a restart requested by the parent).

        Each old sub-env is closed, then what it started is ended (``StartedProcesses.end``).
        """
        offsets = [env_index - self.first_env for env_index in env_indices]
        for offset in offsets:
            self.slots[offset].run(Op.CLOSE, None)  # a broken env's close may fail: go on
        self.started.end(offsets, len(self.slots))
        replies = []
        for offset in offsets:
            reply = self._make(offset)
            replies.append(portable(reply) if type(reply) is Failure else None)
        return replies

    def queue_options(self, requests: list[tuple[int, tuple[Any, ...]]]) -> list[Any]:
        """Queue reset options for later episodes, ``(env index, options queued)`` each."""
        return [self.slots[env_index - self.first_env].run(Op.OPTIONS, queued)
                for env_index, queued in requests]

    def reset(self, requests: list[tuple[int, int | None, dict[str, Any] | None]]) -> list[Any]:
        views = self.views
        assert views is not None
        replies: list[Any] = []
        for env_index, seed, options in requests:
            reply = self.slots[env_index - self.first_env].run(Op.RESET, (seed, options))
            if type(reply) is Failure:
                replies.append(portable(reply))
            elif views.observations is None:
                replies.append(reply)
            else:
                obs, info, seed = reply
                if self.guard is not None:
                    self.guard.enter()
                try:
                    write_row(views.observations, env_index, obs)
                except Exception as exc:  # an observation the batch cannot hold
                    replies.append(portable(Failure.capture(env_index, Op.RESET.value, exc)))
                    continue
                finally:
                    if self.guard is not None:
                        self.guard.exit()
                replies.append((info, seed))
        return replies

    def step(self, actions: list[Any] | None,
             env_indices: list[int] | None = None) -> list[tuple[int, Any]]:
        """Step every hosted sub-env (or those in ``env_indices``); returns what the parent
        must hear about, by env index."""
        views = self.views
        assert views is not None
        read_action, write_obs, guard = self.read_action, self.write_obs, self.guard
        rewards, terminations, truncations = views.rewards, views.terminations, views.truncations
        extras: list[tuple[int, Any]] = []
        slots = (self.slots if env_indices is None
                 else [self.slots[env_index - self.first_env] for env_index in env_indices])
        for offset, slot in enumerate(slots):
            env_index = slot.env_index
            action = actions[offset] if actions is not None else read_action(env_index)
            outcome = slot.step(action)
            if type(outcome) is Failure:
                extras.append((env_index, portable(outcome)))
            elif write_obs is None:  # observations that shared memory cannot hold
                extras.append((env_index, outcome))
            else:
                obs, reward, terminated, truncated, info, final = outcome
                if guard is not None:
                    guard.enter()
                try:
                    write_obs(env_index, obs)
                    rewards[env_index] = reward
                    terminations[env_index] = terminated
                    truncations[env_index] = truncated
                except Exception as exc:  # a result the batch cannot hold: the sub-env's fault
                    failure = Failure.capture(env_index, Op.STEP.value, exc)
                    extras.append((env_index, portable(failure)))
                    continue
                finally:
                    if guard is not None:
                        guard.exit()
                if info or final is not None:
                    extras.append((env_index, (info, final)))
        return extras

    def step_reply(self, sequence: int, extras: list[tuple[int, Any]]) -> bytes:
        """The REPLY to a full step: a bare header when nothing is to report, a bare
        ``RECORDED`` when the infos went into the records (their schema, the first time), else
        the infos pickled (packed, if ``pack`` can)."""
        if extras and self.recorder is not None and self._record(extras):
            if self.recorder.announced:
                return HEADER.pack(Kind.RECORDED, sequence, 0)
            self.recorder.announced = True
            return encode(Kind.REPLY, sequence, dumps(self.recorder.schema))
        return _step_reply(sequence, extras, self.pack(extras))

    def _record(self, extras: list[tuple[int, Any]]) -> bool:
        recorder, guard = self.recorder, self.guard
        assert recorder is not None
        if guard is None:
            return recorder.record(extras)
        guard.enter()
        try:
            return recorder.record(extras)
        finally:
            guard.exit()

    def pack(self, extras: list[tuple[int, Any]]) -> PackedInfos | None:
        """A full step's infos merged here (``_infos.pack_infos``), when this worker hosts
        ``PACK_FROM`` sub-envs or more, every entry is one (no failure, observations in shared
        memory) and merging them here is exact."""
        if len(extras) < PACK_FROM:
            return None
        first_env = self.first_env
        entries = []
        for env_index, entry in extras:
            if type(entry) is not tuple or len(entry) != 2:
                return None
            entries.append((env_index - first_env, entry[0], entry[1]))
        try:
            return pack_infos(entries, len(self.slots))
        except Exception:  # what cannot be merged here is the parent's to merge (or refuse)
            return None

    def run_each(self, op: Op, payloads: list[Any]) -> list[Any]:
        replies = [slot.run(op, payload) for slot, payload in zip(self.slots, payloads)]
        return [portable(reply) if type(reply) is Failure else reply for reply in replies]

    def close(self) -> list[Any]:
        replies = self.run_each(Op.CLOSE, [None] * len(self.slots))
        self.started.end_all()  # whatever the sub-envs' close left running
        if self.block is not None:
            # Drop every view first: the mapping cannot close while arrays point into it.
            if self.views is not None:
                self.views.latencies.release()
            self.views = None
            self.read_action = _actions_come_in_frames
            self.write_obs = None
            self.step_marks = None
            self.recorder = None
            for slot in self.slots:
                slot.step_timer = None
            with contextlib.suppress(BufferError):  # the process is about to exit anyway
                self.block.close()
        return replies


def _reply(sequence: int, phase: str, replies: list[Any], env_indices: list[int]) -> bytes:
    """The REPLY frame; a reply that cannot be pickled becomes that sub-env's failure."""
    if not replies:
        return encode(Kind.REPLY, sequence)
    try:
        return encode(Kind.REPLY, sequence, dumps(replies))
    except Exception:
        safe = [picklable(phase, env_index, reply)
                for env_index, reply in zip(env_indices, replies)]
        return encode(Kind.REPLY, sequence, dumps(safe))


def _step_reply(sequence: int, extras: list[tuple[int, Any]],
                packed: PackedInfos | None = None) -> bytes:
    """The REPLY to a step: a bare header unless a sub-env has something to report; the
    ``packed`` infos in place of ``extras`` when they pickle."""
    if not extras:
        return HEADER.pack(Kind.REPLY, sequence, 0)
    if packed is not None:
        with contextlib.suppress(Exception):  # the extras tell which sub-env's info failed
            return encode(Kind.REPLY, sequence, dumps(packed))
    try:
        return encode(Kind.REPLY, sequence, dumps(extras))
    except Exception:
        safe = [(env_index, picklable("step", env_index, entry)) for env_index, entry in extras]
        return encode(Kind.REPLY, sequence, dumps(safe))


def _ending_reply(worker: HostedEnvs, sequence: int, phase: str, replies: list[Any],
                  env_indices: list[int]) -> bytes:
    """The REPLY to a request that may end sub-envs (MAKE, CLOSE): the replies, then how many
    processes the sub-envs had started were ended, and cleanups run and failed, meanwhile."""
    tally = (worker.started.take_ended(), worker.cleanups.run, worker.cleanups.failed)
    worker.cleanups.run = worker.cleanups.failed = 0
    try:
        return encode(Kind.REPLY, sequence, dumps((replies, tally)))
    except Exception:
        safe = [picklable(phase, env_index, reply)
                for env_index, reply in zip(env_indices, replies)]
        return encode(Kind.REPLY, sequence, dumps((safe, tally)))


def _recv_attach(sock: socket.socket) -> tuple[int, int, BlockLayout]:
    """The ATTACH frame, whose first bytes carry the shared memory descriptor."""
    head, fds, _, _ = socket.recv_fds(sock, HEADER.size, 1)
    if not head or not fds:
        raise EOFError("the parent closed the connection during attach")
    head += recv_exact(sock, HEADER.size - len(head))
    kind, sequence, length = HEADER.unpack(head)
    if kind != Kind.ATTACH:
        raise RuntimeError(f"expected ATTACH, got {Kind(kind).name}")
    layout: BlockLayout = pickle.loads(recv_exact(sock, length))
    return sequence, fds[0], layout


def worker_main(sock: socket.socket, lifeline: int, channel: int | None = None) -> None:
    """A worker's whole life: receive its sub-envs, make them, serve until CLOSE or EOF.
    ``channel`` leads to the fork server, which runs the sub-envs' cleanups if this dies."""
    global IN_WORKER
    IN_WORKER = True
    # Whatever the sub-envs start stays below this process, even once orphaned: see
    # _process_tree. Before anything else, so nothing they start can slip past it.
    become_subreaper()
    os.environ[OWNER_VARIABLE] = str(os.getpid())
    _exit_with_parent(lifeline)
    if channel is not None:
        connect(channel)
    # Ctrl-C is the parent's to handle: it cancels, then closes or kills the workers.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        serve(sock)
    except (EOFError, ConnectionError):  # the parent is gone: nothing left to serve
        # As the lifeline's watcher does: exiting now would cut its end_tree short.
        end_tree()
    finally:
        sock.close()


def serve(sock: socket.socket, *, guard: WriteGuard | None = None) -> None:
    """Receive the sub-envs, make them, attach the shared memory, answer requests until CLOSE
    or EOF (``EOFError``, ``ConnectionError``).

    With a ``guard``, this worker is a thread of the parent process (``_parent_worker``): the
    parent's registrations are in place already, what the sub-envs start is not this
    worker's to end, it writes results only while the guard allows, and it never polls (a
    polling thread would hold the parent's GIL).
    """
    in_parent = guard is not None
    kind, _, payload = recv_frame(sock)
    if kind is not Kind.INIT:
        raise RuntimeError(f"expected INIT, got {kind.name}")
    (first_env, autoreset_mode, env_fns_blob, registrations, limits, episode_timeout,
     max_concurrency, kind) = pickle.loads(payload)
    if not in_parent:
        install_registrations(registrations)  # before the factories: they may gym.make them
    taker = None if limits is None else SocketTaker(*limits)
    if in_parent:  # this thread's sub-envs take the vector env's limits as a process's do
        bind(taker)
        hosted.set(True)  # and their cleanups outlive this process (its keeper's)
        if taker is not None and guard is not None:  # let go of at a deadline, as if killed
            guard.on_revoke = taker.abandon
    else:
        bind_process(taker)
    env_fns: list[Callable[[], Any]] = cloudpickle.loads(env_fns_blob)
    started = NoProcessTracking() if in_parent else StartedProcesses()
    handed: dict[int, Callable[[], Any]] = {}
    coroutines = kind == COROUTINES
    if kind == ANY_KIND:
        coroutines, handed = learn_kind(env_fns, started)
    if coroutines:  # the event-loop side loads here only
        from aiovec._backends._process._coroutine_worker import serve_coroutines

        try:
            serve_coroutines(sock, first_env, env_fns, handed, AutoresetMode(autoreset_mode),
                             episode_timeout, started, max_concurrency)
        finally:
            if in_parent and taker is not None:
                taker.close()
        return
    worker = HostedEnvs(first_env, env_fns, AutoresetMode(autoreset_mode), started=started,
                         guard=guard, episode_timeout=episode_timeout)
    try:
        sock.sendall(encode(Kind.HELLO, 0, dumps((worker.make(handed), (0, 0, 0), False))))
        sequence, descriptor, layout = _recv_attach(sock)
        worker.attach(descriptor, layout, wait_for_peers=not in_parent)
        sock.sendall(encode(Kind.REPLY, sequence))
        _answer_requests(worker, sock, poll=not in_parent)
    except BaseException:
        if in_parent:  # a worker process ends with its sub-envs; a thread closes them
            worker.close()
        raise
    finally:
        if in_parent and taker is not None:  # what it still held goes back
            taker.close()


#: What a worker is told it hosts (INIT): plain envs only (coroutine envs fail with
#: ``CoroutineEnvError``), coroutine envs (``_coroutine_worker``), or whichever its factories
#: make (``learn_kind``).
PLAIN, COROUTINES, ANY_KIND = "plain", "coroutines", "any"


def learn_kind(env_fns: list[Callable[[], Any]],
               started: StartedProcesses | NoProcessTracking
               ) -> tuple[bool, dict[int, Callable[[], Any]]]:
    """Whether a share's factories make coroutine envs → (coroutine envs?, factories that
    hand over what was made meanwhile, by offset).

    An ``AsyncEnv`` class (or a partial of one) says so itself: each is then made on the
    coroutine worker's event loop. Any other factory must be called, outside any event loop
    (a plain env's constructor may run one of its own): the first that makes something
    tells (an awaitable, from an async factory, or a coroutine env: coroutine envs); one that
    raises tells nothing, and raises the same error again when its sub-env is made.
    """
    if makes_async_envs(env_fns[0]):
        return True, {}
    handed: dict[int, Callable[[], Any]] = {}
    for offset, env_fn in enumerate(env_fns):
        with started.making(offset):
            try:
                made = env_fn()
            except Exception as error:
                handed[offset] = functools.partial(_raise, error)
                continue
        handed[offset] = functools.partial(_hand_over, made)
        return inspect.isawaitable(made) or is_async_env(made), handed
    return False, handed


def _raise(error: Exception) -> Any:
    raise error


def _hand_over(made: Any) -> Any:
    return made


def _usable_cpus() -> int:
    """``_core._selection.usable_cpus``, which a worker must not import: that module loads
    the event-loop side (anyio), which worker processes never need."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        return os.cpu_count() or 1


class PollWindow:
    """When a worker polls for its next request, and how long: ``longest`` seconds after each
    reply, while at least half the recent requests (a moving average) came within that long.

    Polling is worth its CPU only when the request comes during it: a caller that spends
    milliseconds between steps (a policy's forward pass, a training phase) would have its
    workers burn a core each for nothing, and slow the caller down on a machine with no core
    to spare. The gap of every request is measured, polled for or not, so a worker that
    stopped polling starts again once the caller's steps come quickly again. A worker that
    does not poll does not wait for its peers either (``HostedEnvs.finished``): that wait
    spins as well, and a caller this slow barely notices one more wake-up. It still marks
    its steps done, for peers that do wait."""

    __slots__ = ("_clock", "_longest", "_rate", "answered")

    #: The weight of the newest request in the moving average.
    _WEIGHT = 1 / 8

    def __init__(self, longest: float, clock: Callable[[], float] = time.perf_counter) -> None:
        self._longest = longest
        self._clock = clock
        self._rate = 1.0  # of requests that came within ``longest``: start by polling
        #: When the last reply went (``clock``); ``None``: no window is open.
        self.answered: float | None = None

    @property
    def polling(self) -> bool:
        """True while most recent requests came within the window."""
        return self._rate >= 0.5

    def open(self) -> float | None:
        """A reply just went: until when to poll for the next request (``None``: block;
        else a time of ``time.perf_counter``'s, which the clock given must be)."""
        now = self._clock()
        self.answered = now
        return now + self._longest if self.polling else None

    def arrived(self) -> None:
        """The next request came: note whether it did so within the window."""
        if self.answered is None:
            return
        soon = self._clock() - self.answered <= self._longest
        self._rate += (soon - self._rate) * self._WEIGHT
        self.answered = None


def _next_request(sock: socket.socket, header: bytearray,
                  until: float | None) -> tuple[int, int, bytes]:
    """The next request frame: polled until ``until`` (``time.perf_counter``; ``None``: no
    polling), with ``sched_yield`` between polls so that a parent sharing this CPU is not
    slowed, then waited for. The header is read straight into ``header``: a step's frame is
    one ``recv``."""
    received = -1
    if until is not None:
        while True:
            try:
                received = sock.recv_into(header, _HEADER_SIZE, _POLL_FLAGS)
                break
            except BlockingIOError:
                if time.perf_counter() >= until:
                    break
                os.sched_yield()
    if received < 0:
        received = sock.recv_into(header, _HEADER_SIZE)
    if received < _HEADER_SIZE:  # EOF, or a header split across reads
        if not received:
            raise EOFError("the peer closed the connection")
        header[received:] = recv_exact(sock, _HEADER_SIZE - received)
    kind, sequence, length = HEADER.unpack_from(header)
    return kind, sequence, recv_exact(sock, length)


def _answer_requests(worker: HostedEnvs, sock: socket.socket, *, poll: bool = True) -> None:
    """The request loop; returns after answering CLOSE. ``poll``: after answering, poll for
    the next request a while (``PollWindow``) before blocking."""
    hosted = [slot.env_index for slot in worker.slots]
    spin = SPIN_SECONDS if poll and _POLL_FLAGS and hasattr(os, "sched_yield") else 0
    window = PollWindow(spin) if spin else None
    header = bytearray(_HEADER_SIZE)
    until: float | None = None
    while True:
        number, sequence, payload = _next_request(sock, header, until)
        if window is not None:
            window.arrived()
        if number == Kind.STEP:  # the hot path first
            extras = worker.step(pickle.loads(payload) if payload else None)
            reply = worker.step_reply(sequence, extras)
            if window is not None:  # waiting for peers spins too: only while polling
                worker.finished(sequence,
                                time.perf_counter() + spin if window.polling else None)
            sock.sendall(reply)
            until = None if window is None else window.open()
            continue
        kind = Kind(number)
        if kind is Kind.STEP_SOME:
            env_indices, actions = pickle.loads(payload)
            sock.sendall(_step_reply(sequence, worker.step(actions, env_indices)))
        elif kind is Kind.RESET:
            requests = pickle.loads(payload)
            sock.sendall(_reply(sequence, "reset", worker.reset(requests),
                                [env_index for env_index, _, _ in requests]))
        elif kind is Kind.OPTIONS:
            requests = pickle.loads(payload)
            sock.sendall(_reply(sequence, "options", worker.queue_options(requests),
                                [env_index for env_index, _ in requests]))
        elif kind is Kind.CALL:
            replies = worker.run_each(Op.CALL, pickle.loads(payload))
            sock.sendall(_reply(sequence, "call", replies, hosted))
        elif kind is Kind.SET_ATTR:
            replies = worker.run_each(Op.SET_ATTR, pickle.loads(payload))
            sock.sendall(_reply(sequence, "set_attr", replies, hosted))
        elif kind is Kind.MAKE:
            requested = pickle.loads(payload)
            sock.sendall(_ending_reply(worker, sequence, "make", worker.remake(requested),
                                       requested))
        elif kind is Kind.CLOSE:
            sock.sendall(_ending_reply(worker, sequence, "close", worker.close(), hosted))
            return
        else:
            raise RuntimeError(f"unexpected frame {kind.name}")
        until = None if window is None else window.open()


def main(argv: list[str]) -> None:
    """Entry point of a spawned worker: ``argv`` ends with ``SOCKET_FD LIFELINE_FD CHANNEL_FD``
    (``-1``: no fork server; a fork server puts its marker first, so tests can tell whose
    worker it is)."""
    sock, lifeline, channel = (int(argument) for argument in argv[-3:])
    worker_main(socket.socket(fileno=sock), lifeline, None if channel < 0 else channel)
