"""``ProcessTreeEnv``: a ``FaultyEnv`` that starts helper processes of every awkward kind, as
simulators, browsers and sandboxes do, so a test can prove they end with their sub-env.

Each helper carries ``AIOVEC_TEST_TAG=<tag>`` in its environment (inherited through fork and
exec, kept by daemons), so ``tagged_processes`` finds every one still alive on the machine,
whoever its parent is by then.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterable
from typing import Any

from aiovec._backends._process_tree import marked
from aiovec.testing._faults import FaultyEnv

__all__ = ["HELPER_KINDS", "TAG_VARIABLE", "ProcessTreeEnv", "tagged_processes"]

#: The environment variable that marks a ``ProcessTreeEnv``'s helpers.
TAG_VARIABLE = "AIOVEC_TEST_TAG"

#: What a ``ProcessTreeEnv`` starts: a plain child; a daemon in its own session
#: (``setsid``); a daemon whose parent exited at once (double fork: it is an orphan from the
#: start); a child that ignores SIGTERM, with a grandchild that ignores it too.
HELPER_KINDS = ("child", "setsid", "double_fork", "ignores_sigterm")

_SLEEP = "sleep 3600"
#: Each kind's command, whether it gets a session of its own, and whether it prints the pid
#: of a background job it started (which the env then waits to see running ``sleep``).
_COMMANDS: dict[str, tuple[list[str], bool, bool]] = {
    "child": (["sleep", "3600"], False, False),
    "setsid": (["sleep", "3600"], True, False),
    "double_fork": (["sh", "-c", f"{_SLEEP} >/dev/null 2>&1 & echo $!"], False, True),
    "ignores_sigterm": (["sh", "-c", f"trap '' TERM; {_SLEEP} & echo $!; wait"], False, True),
}
#: Seconds a background job gets to start running ``sleep``.
_START_TIMEOUT = 10.0


def _wait_until_sleeping(pid: int) -> None:
    """Until the forked shell ``pid`` has exec'd ``sleep``: from then on it is what a test
    sees (before, for a moment, it may be a shell between fork and exec)."""
    deadline = time.monotonic() + _START_TIMEOUT
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                if cmdline.read().startswith(b"sleep\0"):
                    return
        except OSError:
            return  # gone already: nothing to wait for
        time.sleep(0.001)
    raise TimeoutError(f"helper {pid} did not start sleeping within {_START_TIMEOUT} s")


class ProcessTreeEnv(FaultyEnv):
    """A ``FaultyEnv`` (same observations, faults and ledger) that starts ``helpers`` when made.

    ``tag`` marks every helper (see ``tagged_processes``). With ``stop_helpers_on_close``,
    ``close()`` stops the helpers it started directly, as a careful env would; by default it
    leaves them running, as a careless (or crashed) one does, and aiovec must end them.
    POSIX only: the helpers are ``sh`` and ``sleep``.
    """

    def __init__(self, env_id: int = 0, *, tag: str, helpers: Iterable[str] = HELPER_KINDS,
                 stop_helpers_on_close: bool = False, **faulty: Any) -> None:
        super().__init__(env_id, **faulty)
        self.tag = tag
        self.stop_helpers_on_close = stop_helpers_on_close
        environment = {**os.environ, TAG_VARIABLE: tag}
        self.helpers: list[subprocess.Popen[bytes]] = []
        for kind in helpers:
            if kind not in _COMMANDS:
                raise ValueError(f"unknown helper kind {kind!r}; choose from {HELPER_KINDS}")
            command, new_session, prints_pid = _COMMANDS[kind]
            helper = subprocess.Popen(command, env=environment, start_new_session=new_session,
                                      stdin=subprocess.DEVNULL,
                                      stdout=subprocess.PIPE if prints_pid else None)
            if helper.stdout is not None:
                with helper.stdout:
                    _wait_until_sleeping(int(helper.stdout.readline()))
            if kind == "double_fork":
                helper.wait()  # its shell exits at once, leaving the orphaned sleep behind
            self.helpers.append(helper)

    @property
    def host_pid(self) -> int:
        """The process this env runs in (a worker process, on the process backend)."""
        return os.getpid()

    def close(self) -> None:
        if self.stop_helpers_on_close:
            for helper in self.helpers:
                helper.kill()
                helper.wait()
        super().close()


def tagged_processes(tag: str) -> list[int]:
    """The pids of every living process on this machine whose environment carries ``tag``
    (Linux: reads ``/proc``; processes of other users are not visible unless root)."""
    if not sys.platform.startswith("linux"):
        raise NotImplementedError("tagged_processes reads /proc: Linux only")
    return marked(TAG_VARIABLE, tag)
