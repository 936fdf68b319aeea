"""Whatever a sub-env starts stays findable and dies with it (Linux; elsewhere these do nothing).

One mechanism, the child subreaper (``prctl(PR_SET_CHILD_SUBREAPER)``): a process whose parent
dies is handed to its nearest subreaper ancestor instead of to init. Every worker process is
one, so while it lives, everything its sub-envs start stays below it, daemons that ``setsid()``
and double-fork included, and it can end its whole tree on ``close``, on a restart, or when its
parent dies. The process that supervises the workers (the fork server) is one too, so what a
dead worker leaves behind lands there and is ended before its exit status is relayed.

Ending a tree is ``end_tree``: SIGTERM to every living process in it, ``grace`` seconds to
exit, SIGKILL to whatever is left (or appeared meanwhile), again until nothing is left.
Processes are signalled through pidfds, so a pid reused meanwhile is never hit.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import sys
import time
from collections.abc import Callable, Collection, Iterable, Iterator

from aiovec._backends._readable import readable

__all__ = ["GRACE", "OWNER_VARIABLE", "SUPPORTED", "NoProcessTracking", "StartedProcesses",
           "become_subreaper", "end_tree", "environment_value", "living_descendants", "marked",
           "owned_by", "owner_of", "start_time"]

#: Seconds a process gets to exit after SIGTERM before SIGKILL.
GRACE = float(os.environ.get("AIOVEC_TERMINATE_GRACE", "1.0"))
#: True where the whole guarantee holds: Linux, with subreapers and pidfds.
SUPPORTED = sys.platform.startswith("linux") and hasattr(os, "pidfd_open")

_PR_SET_CHILD_SUBREAPER = 36
#: Rounds of SIGKILL before ``end_tree`` gives up on a tree that keeps forking.
_MAX_KILL_ROUNDS = 50
#: Seconds to wait for SIGKILLed processes to be gone, per round.
_KILL_WAIT = 2.0
#: Set by each worker to its pid, and so inherited by whatever its sub-envs start: tells
#: whose orphans are whose when several workers die at once (processes started with a
#: cleared environment lack it).
OWNER_VARIABLE = "AIOVEC_WORKER_PID"


def become_subreaper() -> bool:
    """Make this process the one that adopts its orphaned descendants; False if unsupported."""
    if not SUPPORTED:
        return False
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    return bool(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)


def _children(pid: int) -> list[int]:
    """The children of ``pid`` (every thread's), living or zombie."""
    found: list[int] = []
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for thread in threads:
        try:
            with open(f"/proc/{pid}/task/{thread}/children", "rb") as listing:
                found += map(int, listing.read().split())
        except OSError:  # the thread ended meanwhile
            continue
    return found


def _state(pid: int) -> tuple[str, int] | None:
    """``(state letter, parent pid)`` of ``pid``, or ``None`` if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[0].decode(), int(fields[1])


def _tree(roots: Iterable[int]) -> tuple[list[int], list[int]]:
    """Every process below (and including) ``roots``: ``(living, zombies)``, parents first."""
    living: list[int] = []
    zombies: list[int] = []
    frontier = list(roots)
    seen: set[int] = set()
    while frontier:
        pid = frontier.pop(0)
        if pid in seen:
            continue
        seen.add(pid)
        state = _state(pid)
        if state is None:
            continue
        (zombies if state[0] in "ZX" else living).append(pid)
        # A zombie leader may have threads still exiting, holding children it has not yet
        # handed on (a worker whose main thread called exit while another ran end_tree).
        frontier += _children(pid)
    return living, zombies


def living_descendants(pid: int | None = None) -> list[int]:
    """Every living process below ``pid`` (default: this process), parents first."""
    if not SUPPORTED:
        return []
    living, _ = _tree(_children(os.getpid() if pid is None else pid))
    return living


def environment_value(pid: int, name: str) -> str | None:
    """The value of variable ``name`` in the environment ``pid`` started with, if set."""
    prefix = f"{name}=".encode()
    try:
        with open(f"/proc/{pid}/environ", "rb") as environ:
            variables = environ.read().split(b"\0")
    except OSError:
        return None
    for variable in variables:
        if variable.startswith(prefix):
            return variable[len(prefix):].decode(errors="replace")
    return None


def marked(name: str, value: str) -> list[int]:
    """Every living process on this machine whose environment sets ``name`` to ``value``,
    wherever it was reparented (processes of other users only if we are root)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and environment_value(int(entry), name) == value:
            state = _state(int(entry))
            if state is not None and state[0] not in "ZX":
                found.append(int(entry))
    return sorted(found)


def owner_of(pid: int) -> int | None:
    """The worker whose sub-envs started ``pid`` (see ``OWNER_VARIABLE``), if it says."""
    value = environment_value(pid, OWNER_VARIABLE)
    return int(value) if value is not None and value.isdigit() else None


def owned_by(owner: int) -> list[int]:
    """Every living process started in worker (or actor) ``owner``, wherever it is now."""
    return marked(OWNER_VARIABLE, str(owner))


def start_time(pid: int) -> int | None:
    """When ``pid`` started (clock ticks since boot): tells a process from a later one that
    reused its pid."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return int(stat.read().rsplit(b")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def _open(pid: int) -> int | None:
    with contextlib.suppress(OSError):
        return os.pidfd_open(pid)
    return None


def _signal(pidfd: int, signum: int) -> None:
    with contextlib.suppress(OSError):  # exited meanwhile
        signal.pidfd_send_signal(pidfd, signum)


def _wait(pidfds: Collection[int], seconds: float) -> None:
    """Wait until every process behind ``pidfds`` has exited, or ``seconds`` have passed."""
    waiting = set(pidfds)
    deadline = time.monotonic() + seconds
    while waiting:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return
        waiting.difference_update(readable(waiting, remaining))


def _reap(zombies: Iterable[int], spare: Collection[int]) -> None:
    """Collect the exit status of our own zombie children (others are their parents' to reap)."""
    me = os.getpid()
    for pid in zombies:
        state = _state(pid)
        if pid not in spare and state is not None and state[1] == me:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)


def _exited(pidfd: int) -> bool:
    """True once every thread of the process behind ``pidfd`` has exited."""
    return bool(readable([pidfd]))


def end_tree(roots: Iterable[int] | None = None, *, grace: float = GRACE,
             spare: Collection[int] = (), note: Callable[[int], None] | None = None) -> int:
    """End ``roots`` and every process below them (default: every descendant of this process).

    SIGTERM, up to ``grace`` seconds to exit, then SIGKILL, repeated while new processes
    appear; zombies that are our own children are reaped, except ``spare`` (processes whose
    exit status someone else collects) and their trees, which are left alone. ``note`` is
    called with each process before it is first signalled. Returns how many distinct processes
    were signalled; 0 where unsupported.
    """
    if not SUPPORTED:
        return 0
    me = os.getpid()
    # Orphans of the processes ended are handed to us (a subreaper): our children that were
    # not ours before belong to the tree being ended.
    baseline = set() if roots is None else set(_children(me))
    targets_roots = {pid for pid in (_children(me) if roots is None else roots)
                     if pid not in spare}
    ended: set[int] = set()
    signum = signal.SIGTERM
    for _ in range(_MAX_KILL_ROUNDS):
        living, zombies = _tree(targets_roots)
        _reap(zombies, spare)
        targets: dict[int, int] = {}
        for pid in [*living, *zombies]:
            if pid != me and pid not in spare:
                pidfd = _open(pid)
                if pidfd is None:
                    continue
                # A zombie leader with threads still running is alive: they hold its
                # children until they exit (say, a worker whose main thread exited while
                # another ran end_tree), and a leader that called exit(2) alone lives on.
                if pid in zombies and _exited(pidfd):
                    os.close(pidfd)
                    continue
                targets[pid] = pidfd
        if not targets:
            break
        try:
            for pid, pidfd in targets.items():
                if note is not None and pid not in ended:
                    note(pid)
                _signal(pidfd, signum)
            ended.update(targets)
            _wait(targets.values(), grace if signum == signal.SIGTERM else _KILL_WAIT)
        finally:
            for pidfd in targets.values():
                os.close(pidfd)
        signum = signal.SIGKILL
        targets_roots.update(pid for pid in _children(me)
                             if pid not in baseline and pid not in spare)
    _reap(_tree(targets_roots)[1], spare)
    return len(ended)


class StartedProcesses:
    """The processes each sub-env hosted here was seen to start while it was being made, so a
    restart of one sub-env among several ends its processes only (processes it starts later
    can be told apart only by ending everything, which waits for its host's own end).

    ``spare`` are this process's own helpers, never counted or ended.
    """

    def __init__(self, spare: Collection[int] = ()) -> None:
        self.spare = set(spare)
        #: Processes ended since ``take_ended`` last read it.
        self.ended = 0
        self._by_env: dict[int, set[int]] = {}

    def _living(self) -> set[int]:
        return set(living_descendants()) - self.spare

    @contextlib.contextmanager
    def making(self, env_index: int) -> Iterator[None]:
        """Note what sub-env ``env_index`` starts while this block makes it."""
        before = self._living()
        try:
            yield
        finally:
            self._by_env[env_index] = self._living() - before

    def end(self, env_indices: Collection[int], hosted: int) -> None:
        """End what the given sub-envs started (call after closing them): everything below
        this process when they are all of the ``hosted`` sub-envs."""
        if len(env_indices) >= hosted:
            self.end_all()
            return
        living = self._living()
        self.ended += end_tree([pid for env_index in env_indices
                                for pid in self._by_env.pop(env_index, set()) & living])

    def end_all(self) -> None:
        """End everything below this process (its sub-envs are closed, or it is exiting)."""
        self._by_env.clear()
        self.ended += end_tree(spare=self.spare)

    def take_ended(self) -> int:
        ended, self.ended = self.ended, 0
        return ended


class NoProcessTracking:
    """``StartedProcesses`` for sub-envs hosted in the trainer's own process (the process
    backend's parent worker): what they start is not told apart from the trainer's other
    children, so nothing is ended on their behalf (as on the thread backend)."""

    ended = 0

    @contextlib.contextmanager
    def making(self, env_index: int) -> Iterator[None]:
        yield

    def end(self, env_indices: Collection[int], hosted: int) -> None:
        return

    def end_all(self) -> None:
        return

    def take_ended(self) -> int:
        return 0
