"""What a test may not leave behind: worker processes, descriptors, shared memory."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from aiovec._backends._process import _zygote
from aiovec._backends._readable import readable
from aiovec._core import _cleanups

#: In the command line of aiovec's fork server, and so of every worker it forks, followed by
#: the pid of the process that started the server (``aiovec._backends._process._forkserver``).
FORK_SERVER_MARKER = b"aiovec-forkserver"
#: In the command line of every spawned worker.
WORKER_MODULE = b"aiovec._backends._process._worker"
#: In the command line of a zygote, and so of every fork server and worker forked below it.
ZYGOTE_MODULE = b"aiovec._backends._process._zygote"


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``condition`` until it holds (a deadline, not a sleep standing in for a signal)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


def parent_pid(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def fork_servers_parent() -> int:
    """The process this one's fork servers are children of: its zygote, or itself (zygote
    off)."""
    zygote = _zygote.running()
    return os.getpid() if zygote is None else zygote[0]


def command_line(pid: int) -> bytes:
    return Path(f"/proc/{pid}/cmdline").read_bytes()


def _processes() -> Iterator[tuple[int, int, list[bytes]]]:
    """Every living process on this machine (not zombies: exited, waiting to be reaped):
    pid, parent pid, command line."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                state, parent = (entry / "stat").read_text().rsplit(")", 1)[1].split()[:2]
                arguments = (entry / "cmdline").read_bytes().split(b"\0")
            except (OSError, ValueError, IndexError):
                continue
            if state not in "ZX":
                yield int(entry.name), int(parent), arguments


def _forked_for(arguments: list[bytes]) -> int | None:
    """The pid that started the fork server this process is (or was forked by), if any."""
    if FORK_SERVER_MARKER in arguments:
        position = arguments.index(FORK_SERVER_MARKER) + 1
        if position < len(arguments) and arguments[position].isdigit():
            return int(arguments[position])
    return None


def helper_pids() -> set[int]:
    """The helpers that live as long as this process: its zygote, its cleanup keeper."""
    zygote, kept = _zygote.running(), _cleanups.keeper
    return {helper[0] for helper in (zygote, kept) if helper is not None}


def child_pids() -> set[int]:
    """Processes this test process started: its children, and the fork servers and workers
    forked for it (even once orphaned); not its zygote or cleanup keeper, which live as long
    as it does."""
    me = os.getpid()
    helpers = helper_pids()
    return {pid for pid, ppid, arguments in _processes()
            if (ppid == me or _forked_for(arguments) == me) and pid not in helpers}


def worker_processes_of(parent: int) -> set[int]:
    """aiovec's worker processes started for ``parent``: spawned, or forked by its fork
    servers (which are not workers themselves, nor is the zygote that forks them, nor are
    the servers it forked)."""
    processes = list(_processes())
    zygotes = {pid for pid, ppid, arguments in processes
               if ppid == parent and _forked_for(arguments) == parent
               and any(ZYGOTE_MODULE in argument for argument in arguments)}
    return {pid for pid, ppid, arguments in processes
            if (ppid == parent and any(WORKER_MODULE in argument for argument in arguments))
            or (_forked_for(arguments) == parent and ppid != parent and ppid not in zygotes)}




def descendants(pid: int) -> set[int]:
    """Every living process below ``pid``."""
    parents = {child: parent for child, parent, _ in _processes()}
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier}
        found |= frontier
    return found


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def helper_fds() -> set[str]:
    """The descriptors this process holds for the helpers that live as long as it does (its
    zygote, its cleanup keeper): not leaks (a test that replaced the zygote may see the old
    one's number reused)."""
    zygote = _zygote.running()
    kept = _cleanups.keeper
    return ({str(zygote[1])} if zygote is not None else set()) | (
        {str(kept[1])} if kept is not None else set())


#: The name aiovec gives each batch's anonymous shared memory file
#: (``aiovec._backends._process._shared_memory.open_block``); ``/proc/<pid>/maps`` shows it as
#: ``/memfd:aiovec-batch (deleted)``.
BATCH_MEMFD = "/memfd:aiovec-batch"


def shared_mappings(pid: int | str = "self") -> set[tuple[str, str]]:
    """The files ``pid`` maps shared (``MAP_SHARED``): (inode, path) pairs."""
    found = set()
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and fields[1][3] == "s":
            found.add((fields[4], fields[5]))
    return found


def mapped_blocks(pid: int | str = "self") -> set[str]:
    """The inodes of aiovec's shared memory blocks that ``pid`` maps: only its own (or
    inherited) ones, whatever other processes on the machine do."""
    return {inode for inode, path in shared_mappings(pid) if path.startswith(BATCH_MEMFD)}


def wait_for_exit(pids: list[int], timeout: float) -> list[int]:
    """The pids still running after ``timeout`` seconds (waits on pidfds, no polling)."""
    pidfds = {}
    for pid in pids:
        try:
            pidfds[os.pidfd_open(pid)] = pid
        except ProcessLookupError:
            continue  # already gone
    deadline = time.monotonic() + timeout
    try:
        while pidfds:  # at least one look, even with no time left: a pid may be gone
            remaining = max(0.0, deadline - time.monotonic())
            for fd in readable(pidfds, remaining):
                os.close(fd)
                del pidfds[fd]
            if not remaining:
                break
        return sorted(pidfds.values())
    finally:
        for fd in pidfds:
            os.close(fd)


#: The name of every parent worker's thread (``aiovec._backends._process._parent_worker``).
PARENT_WORKER_THREAD = "aiovec-parent-worker-"
#: The thread backend's sub-env threads (``_backends/_thread.py``).
SUB_ENV_THREAD = "aiovec-env-"


#: The marker of a test that leaves a ``hang`` fault blocking a call on purpose (a sub-env
#: abandoned at its deadline, say), with the reason: ``@pytest.mark.hangs_on_purpose("...")``.
#: Only such a test has its hangs released before its leaks are counted.
HANGS_ON_PURPOSE = "hangs_on_purpose"
#: How long an unmarked test's hangs get to end by themselves (``hang_seconds``).
HANG_GRACE = 5.0


def hangs_on_purpose(node: pytest.Item) -> bool:
    """Whether the test ``node`` is marked ``hangs_on_purpose``, with a reason."""
    marker = node.get_closest_marker(HANGS_ON_PURPOSE)
    if marker is None:
        return False
    reason = marker.args[0] if marker.args else marker.kwargs.get("reason")
    if not isinstance(reason, str) or not reason.strip():
        pytest.fail(f"@pytest.mark.{HANGS_ON_PURPOSE} needs the reason the test hangs",
                    pytrace=False)
    return True


def settle_hangs(node: pytest.Item) -> int:
    """Release the ``hang`` faults of a test marked ``hangs_on_purpose``; in any other test,
    a hang that has not ended by itself within ``HANG_GRACE`` seconds is a thread left
    running, and fails it (released then, so that the next test starts clean). Returns
    how many hangs there were when the test ended."""
    from aiovec.testing import hangs_in_progress, release_hangs

    try:
        on_purpose = hangs_on_purpose(node)
    except BaseException:  # a mark without a reason fails the test, its hangs ended
        release_hangs()
        raise
    if on_purpose:
        return release_hangs()
    hangs = hangs_in_progress()
    deadline = time.monotonic() + HANG_GRACE
    while hangs_in_progress() and time.monotonic() < deadline:
        time.sleep(0.05)  # polled under a deadline: a short hang_seconds ends by itself
    if hung := release_hangs():
        raise AssertionError(
            f"{hung} hang fault(s) still block a thread {HANG_GRACE} s after the test: a "
            f"thread that hangs for good is a leak (a test that hangs on purpose says so with "
            f"@pytest.mark.{HANGS_ON_PURPOSE}(reason))")
    return hangs


def end_abandoned_parent_workers(node: pytest.Item, timeout: float = 20.0) -> None:
    """Settle the test's hung sub-env calls (``settle_hangs``), then join every parent worker
    thread still running (and, when some call was hung, every thread-backend sub-env
    thread).

    A parent worker abandoned at a deadline keeps its socket and its view of the shared
    memory until the call it is stuck in returns, then closes both (as a thread-backend
    sub-env thread runs on until then): what a test leaves is counted after that.
    """
    import threading

    hung = settle_hangs(node)
    deadline = time.monotonic() + timeout
    for thread in threading.enumerate():
        if thread.name.startswith(PARENT_WORKER_THREAD):
            thread.join(max(0.0, deadline - time.monotonic()))
            assert not thread.is_alive(), f"{thread.name} still runs {timeout} s on"
        elif hung and thread.name.startswith(SUB_ENV_THREAD):
            # A thread-backend sub-env abandoned at a deadline, whose call has just ended,
            # closes its env as it ends, and a fault ledger's file with it: counted once it has.
            thread.join(max(0.0, deadline - time.monotonic()))
