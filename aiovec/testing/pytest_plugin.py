"""pytest fixtures for code built on aiovec: vector envs closed at teardown, and a check that
nothing was left behind.

Enable it with one line in a ``conftest.py``::

    pytest_plugins = ["aiovec.testing.pytest_plugin"]

Then, under pytest-asyncio, anyio's plugin (asyncio or trio) or no async plugin at all (the
fixtures are synchronous, so they work with every one)::

    @pytest.mark.asyncio
    async def test_rollout(aiovec_vector_envs):
        envs = aiovec_vector_envs([lambda: gym.make("CartPole-v1")] * 4, backend="process")
        obs, infos = await envs.reset(seed=0)
        ...  # no close needed: done at teardown, then every leak check runs

``aiovec_no_leaks`` alone fails a test that leaves behind a process aiovec started (a worker,
a fork server, anything below them), one of its threads, or one of its descriptors (shared
memory, process descriptors). The processes aiovec keeps for the life of the test process
(the zygote its fork servers are forked from, the keeper of its sub-envs' cleanups) are not
leaks. Processes get
``AIOVEC_LEAK_TIMEOUT`` seconds (default 10) to exit after the test, threads 5.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from aiovec._backends._process import _zygote
from aiovec._core import _cleanups
from aiovec._core._vector_env import AsyncVectorEnv, EnvFactory
from aiovec._shim._vector_env import VectorEnv

__all__ = ["VectorEnvs", "aiovec_no_leaks", "aiovec_vector_envs"]

#: In the command line of aiovec's fork server and of each worker it forks, before the pid of
#: the process that started it.
_FORK_SERVER_MARKER = b"aiovec-forkserver"
#: What aiovec's own descriptors link to in ``/proc/self/fd`` (an event loop's are not).
_OWN_DESCRIPTORS = ("/memfd:aiovec-", "anon_inode:[pidfd]")


def _processes() -> dict[int, tuple[int, list[bytes]]]:
    """Every living process: pid → (parent pid, command line)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            arguments = (entry / "cmdline").read_bytes().split(b"\0")
        except (OSError, IndexError):
            continue
        if stat[0] not in "ZX":
            found[int(entry.name)] = (int(stat[1]), arguments)
    return found


def _started_here() -> set[int]:
    """Living processes this one started, directly or below, and workers forked for it by a
    fork server (even orphaned)."""
    processes = _processes()
    me, mine = os.getpid(), str(os.getpid()).encode()
    found = {pid for pid, (_, arguments) in processes.items()
             if _FORK_SERVER_MARKER in arguments
             and arguments[arguments.index(_FORK_SERVER_MARKER) + 1:][:1] == [mine]}
    frontier = {me}
    while frontier:
        frontier = {pid for pid, (parent, _) in processes.items()
                    if parent in frontier and pid not in found}
        found |= frontier
    for helper in (_zygote.running(), _cleanups.keeper):  # live as long as this process
        if helper is not None:
            found.discard(helper[0])
    return found


def _own_descriptors() -> set[tuple[int, str]]:
    found = set()
    for entry in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{entry}")
        except OSError:  # the listing's own descriptor, closed by now
            continue
        if target.startswith(_OWN_DESCRIPTORS):
            found.add((int(entry), target))
    return found


def _own_threads() -> set[threading.Thread]:
    return {thread for thread in threading.enumerate() if thread.name.startswith("aiovec-")
            and not thread.name.startswith("aiovec-ray-starter")}  # lives with the process


@pytest.fixture
def aiovec_no_leaks() -> Iterator[None]:
    """Fail the test if it leaves behind a process, thread or descriptor of aiovec's."""
    processes, descriptors, threads = _started_here(), _own_descriptors(), _own_threads()
    yield
    deadline = time.monotonic() + float(os.environ.get("AIOVEC_LEAK_TIMEOUT", "10"))
    while (left := _started_here() - processes) and time.monotonic() < deadline:
        time.sleep(0.05)  # polled under a deadline: they are exiting, or leaked
    for thread in _own_threads() - threads:
        thread.join(timeout=5)
    problems = []
    if left:
        problems.append(f"processes still running: {sorted(left)}")
    if running := sorted(thread.name for thread in _own_threads() - threads):
        problems.append(f"threads still running: {running}")
    if opened := sorted(_own_descriptors() - descriptors):
        problems.append(f"descriptors left open: {opened}")
    if problems:
        pytest.fail("aiovec left things behind: " + "; ".join(problems), pytrace=False)


class VectorEnvs:
    """Makes vector envs for one test and closes whatever the test left open."""

    def __init__(self) -> None:
        self.made: list[AsyncVectorEnv | VectorEnv] = []

    def __call__(self, env_fns: Sequence[EnvFactory], **options: Any) -> AsyncVectorEnv:
        """An ``aiovec.AsyncVectorEnv`` (started by its first call, or ``async with``)."""
        envs = AsyncVectorEnv(env_fns, **options)
        self.made.append(envs)
        return envs

    def sync(self, env_fns: Sequence[EnvFactory], **options: Any) -> VectorEnv:
        """An ``aiovec.VectorEnv``, the synchronous shim."""
        envs = VectorEnv(env_fns, **options)
        self.made.append(envs)
        return envs

    def close_all(self) -> None:
        """Close each vector env still open: the shim with ``close``, an async one (whose
        event loop is gone by teardown) with ``close_nowait``, which kills its workers."""
        for envs in self.made:
            if isinstance(envs, VectorEnv):
                envs.close()
            elif not envs.closed:
                envs.close_nowait()


@pytest.fixture
def aiovec_vector_envs(aiovec_no_leaks: None) -> Iterator[VectorEnvs]:
    """Call it like ``aiovec.AsyncVectorEnv`` (``.sync(...)`` for ``aiovec.VectorEnv``); what
    the test leaves open is closed at teardown, then ``aiovec_no_leaks`` checks."""
    envs = VectorEnvs()
    try:
        yield envs
    finally:
        envs.close_all()
