"""The fork server (the process backend's default start method on Linux): one per vector env,
it starts every worker (forked, or spawned with ``start_method="spawn"``), relays their exit
statuses, is replaced if killed, and goes at close.

Exit statuses, restarts and every failure mode also run through it in the rest of the suite
(it is the default); these tests pin down the server itself.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import aiovec
from aiovec._backends._children import STARTED, started_child
from aiovec._backends._process import _backend as _process
from tests.envs import PidEnv, worker_pids
from tests.leaks import (
    FORK_SERVER_MARKER,
    WORKER_MODULE,
    fork_servers_parent,
    parent_pid,
    wait_for_exit,
)

pytestmark = pytest.mark.anyio


def command_line(pid: int) -> list[bytes]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")


def test_it_is_the_default_on_linux() -> None:
    assert _process.DEFAULT_START_METHOD == "forkserver"


async def test_one_server_forks_every_worker_and_close_reaps_it(no_leaks: None) -> None:
    async with aiovec.AsyncVectorEnv([PidEnv] * 4, backend="process", num_workers=2) as envs:
        await envs.reset(seed=0)
        workers = sorted(set(await worker_pids(envs)))
        assert len(workers) == 2
        servers = {parent_pid(pid) for pid in workers}
        assert len(servers) == 1
        (server,) = servers
        assert parent_pid(server) == fork_servers_parent()
        marker = command_line(server).index(FORK_SERVER_MARKER)
        assert command_line(server)[marker + 1] == str(os.getpid()).encode()
        obs, *_ = await envs.step(np.ones(4, np.int64))
        assert obs.shape[0] == 4
    assert wait_for_exit([server, *workers], 10) == []


async def test_spawn_starts_fresh_interpreters_under_the_server(no_leaks: None) -> None:
    """Spawned workers are fresh interpreters, started (and supervised) by the server."""
    async with aiovec.AsyncVectorEnv([PidEnv] * 2, backend="process", num_workers=2,
                                     start_method="spawn") as envs:
        await envs.reset(seed=0)
        workers = await worker_pids(envs)
        servers = {parent_pid(pid) for pid in workers}
        assert len(servers) == 1 and parent_pid(servers.pop()) == fork_servers_parent()
        for pid in workers:
            arguments = command_line(pid)
            assert WORKER_MODULE in b" ".join(arguments)
            assert arguments[arguments.index(FORK_SERVER_MARKER) + 1] == str(
                os.getpid()).encode()


async def test_a_killed_server_takes_its_workers_and_is_replaced(no_leaks: None) -> None:
    """Killing the server makes its workers exit (after ending whatever their sub-envs
    started: nothing would be left to end it once they died); the next call reports them
    dead, their exit status unknown, and a reset restarts them through a new server."""
    async with aiovec.AsyncVectorEnv([PidEnv] * 2, backend="process", num_workers=2) as envs:
        await envs.reset(seed=0)
        workers = await worker_pids(envs)
        server = parent_pid(workers[0])
        os.kill(server, signal.SIGKILL)
        assert wait_for_exit([server, *workers], 10) == []
        with pytest.raises(aiovec.WorkerDiedError) as caught:
            await envs.step(np.ones(2, np.int64))
        cause: Any = caught.value.exceptions[0].__cause__
        assert caught.value.env_ids == (0, 1) and "exit status unknown" in str(cause)
        assert cause.exitcode is None  # unknown, as the message says
        await envs.reset(seed=1)  # restarts both workers, through a new server
        new_workers = await worker_pids(envs)
        assert not set(new_workers) & set(workers)
        new_server = parent_pid(new_workers[0])
        assert new_server != server and parent_pid(new_server) == fork_servers_parent()
        obs, *_ = await envs.step(np.ones(2, np.int64))
        assert obs[:, 0].tolist() == [1, 1]  # new instances
    assert wait_for_exit([new_server, *new_workers], 10) == []


async def test_a_fork_server_that_cannot_start_fails_the_start_cleanly(
        monkeypatch: pytest.MonkeyPatch, no_leaks: None) -> None:
    """A server that exits at once (here: a broken bootstrap) makes ``start`` raise, and
    leaves nothing behind."""
    from aiovec._backends._process import _forkserver

    monkeypatch.setenv("AIOVEC_ZYGOTE", "0")  # the server started as an interpreter
    monkeypatch.setattr(_forkserver, "python_command",
                        lambda *_: [sys.executable, "-c", "import sys; sys.exit(5)"])
    envs = aiovec.AsyncVectorEnv([PidEnv] * 2, backend="process", num_workers=2)
    with pytest.raises(ChildProcessError, match=r"fork server .* is gone: exit code 5"):
        await envs.start()
    await envs.aclose()


def test_a_released_handle_never_signals_the_pid_its_worker_had() -> None:
    """A fork server's worker is signalled through the pidfd the server passed along; once
    its handle is released (a restart or a close that did not see it exit), its pid may name
    another process. The handle then takes the worker as exited, status unknown, and signals
    nothing. (It used to fall back to ``os.kill(pid)``: a close SIGKILLed whatever had reused
    the pid, once another test's fork server.)"""
    # Stands in for the process that reused the pid: a child of this test's own.
    other = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                             stdin=subprocess.PIPE)
    status, relay = socket.socketpair()
    try:
        worker = started_child(STARTED.pack(other.pid), [os.pidfd_open(other.pid)], status,
                               "the fork server")
        assert worker.poll() is None  # no status relayed yet
        worker.close()
        worker.signal(signal.SIGKILL)
        with pytest.raises(subprocess.TimeoutExpired):  # a SIGKILL would end it in ms
            other.wait(1.0)
        assert worker.poll() is not None and worker.describe_exit() == "exit status unknown"
        assert worker.wait_blocking(None) is not None  # nothing to wait for either
    finally:
        relay.close()
        other.kill()
        other.communicate()  # reaps it, and closes its stdin
