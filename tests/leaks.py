"""What a test may not leave behind: worker processes, descriptors, shared memory."""

from __future__ import annotations

import os
import select
import time
from pathlib import Path


def child_pids() -> set[int]:
    """Processes whose parent is this test process."""
    me, found = str(os.getpid()), set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[1] == me:
                found.add(int(entry.name))
    return found


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def shm_entries() -> set[str]:
    return set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()


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
        while pidfds:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            ready, _, _ = select.select(list(pidfds), [], [], remaining)
            for fd in ready:
                os.close(fd)
                del pidfds[fd]
        return sorted(pidfds.values())
    finally:
        for fd in pidfds:
            os.close(fd)
