"""The keeper: a small process that outlives a Ray actor to end what its sub-envs started.

On the process backend the fork server supervises each worker from above. A Ray actor's parent
is Ray's own raylet, so each actor starts a keeper instead: a process in its own session that
waits for the actor to die, through a pidfd the actor opened on itself. While the actor
lives, the actor itself (a child subreaper) ends what its sub-envs start on close and
restarts, and the keeper only notes the actor's descendants twice a second and takes in the
cleanups registered there (``_cleanup_channel``). Once the actor is dead, by any means
(``ray.kill``, a crash, the driver's death), its orphans were handed to init; the keeper finds
them by the owner mark in their environment (``_process_tree.OWNER_VARIABLE``) or among the
descendants it had noted (same pid, same start time), ends them, runs the cleanups left
unclaimed, and exits.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess

from aiovec._backends._children import python_command
from aiovec._backends._cleanup_channel import CleanupLedger, connect, run_orphaned
from aiovec._backends._process_tree import (
    SUPPORTED,
    end_tree,
    living_descendants,
    owned_by,
    start_time,
)
from aiovec._backends._readable import readable

__all__ = ["CLEANUPS_ONLY", "ENDS_TREE", "main", "start_cleanup_keeper", "start_keeper"]

#: Seconds between two looks at the actor's descendants.
_SNAPSHOT_INTERVAL = 0.5
#: Rounds of ending what the dead actor left before giving up on a tree that keeps forking.
_MAX_ROUNDS = 10


#: Run by the process ``start_keeper`` starts, before any import (a fork then is of one
#: thread, and quick): fork the keeper, write its pid to the descriptor given first, exit.
_FORK_THE_KEEPER = """import os, sys
reply = int(sys.argv.pop(2))
keeper = os.fork()
if keeper:
    os.write(reply, str(keeper).encode())
    os._exit(0)
os.close(reply)
"""


def start_keeper(*, ends_tree: bool = True) -> tuple[int, int] | None:
    """Start this process's keeper and forward cleanups to it → its pid and the channel's
    descriptor here (None: unsupported). ``ends_tree=False``: it runs the cleanups left and
    ends nothing (the keeper of the vector env's own process, whose other children are not
    aiovec's to end).

    The process started here forks the keeper and exits at once, reaped before this returns:
    the keeper outlives this process by design, so it must not be a child this process is
    expected to wait for (a ``Popen`` still running at exit is warned about). It watches this
    process through a pidfd opened here, which names this process whatever its parentage.
    """
    if not SUPPORTED:
        return None
    try:
        owner_fd = os.pidfd_open(os.getpid())
    except OSError:  # refused (a seccomp profile, say): no keeper, as where unsupported
        return None
    channel, keeper_end = socket.socketpair()
    reply, reply_end = os.pipe()
    ours = [reply, reply_end, owner_fd]  # closed on every way out
    try:
        command = python_command(__name__, str(reply_end), str(os.getpid()),
                                 str(keeper_end.fileno()),
                                 ENDS_TREE if ends_tree else CLEANUPS_ONLY, str(owner_fd),
                                 prelude=_FORK_THE_KEEPER)
        with keeper_end, subprocess.Popen(  # leaving waits for the starter, quick to exit
                command, pass_fds=(reply_end, keeper_end.fileno(), owner_fd),
                start_new_session=True, stdin=subprocess.DEVNULL):
            os.close(reply_end)  # read until the starter's and the keeper's copies close
            ours.remove(reply_end)
            written = b""
            while chunk := os.read(reply, 64):
                written += chunk
        if not written.isdigit():
            raise RuntimeError("aiovec's cleanup keeper did not start")
        fd = channel.detach()
    except BaseException:
        channel.close()
        raise
    finally:
        for each in ours:
            os.close(each)
    connect(fd)
    return int(written), fd


def start_cleanup_keeper() -> tuple[int, int] | None:
    """The keeper of a process hosting sub-envs itself (``_cleanups.set_keeper_starter``)."""
    return start_keeper(ends_tree=False)


#: A keeper's mode, its last argument: it ends its owner's tree (a Ray actor's), or only runs
#: the cleanups left (a process hosting sub-envs itself).
ENDS_TREE, CLEANUPS_ONLY = "tree", "cleanups"


def main(argv: list[str]) -> None:
    """The keeper's life (forked by the owner's child, ``start_keeper``): ``argv`` is
    ``[OWNER_PID, CHANNEL_FD, MODE, OWNER_PIDFD]``."""
    owner, owner_fd = int(argv[0]), int(argv[3])
    ends_tree = argv[2] == ENDS_TREE
    me = os.getpid()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the driver's to handle
    ledger = CleanupLedger(socket.socket(fileno=int(argv[1])))
    noted: dict[int, int] = {}  # pid -> start time, of the owner's descendants
    watched = [ledger.channel.fileno(), owner_fd]
    while True:
        ready = readable(watched, _SNAPSHOT_INTERVAL if ends_tree else None)
        if owner_fd in ready:
            break
        if ledger.channel.fileno() in ready and not ledger.read():
            watched.remove(ledger.channel.fileno())
        if not ends_tree:
            continue
        for pid in living_descendants(owner):
            if pid != me and pid not in noted:
                started = start_time(pid)
                if started is not None:
                    noted[pid] = started
    ledger.read()
    for _ in range(_MAX_ROUNDS if ends_tree else 0):
        left = {pid for pid in owned_by(owner) if pid != me}
        left |= {pid for pid, started in noted.items() if start_time(pid) == started}
        if not left:
            break
        end_tree(left)
    run_orphaned(list(ledger.pending.values()))
    os._exit(0)
