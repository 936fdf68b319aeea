"""The zygote: one pre-loaded interpreter per process that forks every fork server.

Each server it forks must be what a started one is (the caller's environment, working
directory and standard streams of the moment); it is replaced when the caller's context
changes or it dies, its servers do not depend on it, and without it (``AIOVEC_ZYGOTE=0``, or
a zygote that cannot start) each server is started as a fresh interpreter, as before.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np
import pytest

import aiovec
from aiovec._backends._process import _zygote
from tests.envs import PidEnv, SurroundingsEnv, worker_pids
from tests.leaks import ZYGOTE_MODULE, command_line, parent_pid, wait_for_exit

pytestmark = pytest.mark.anyio

REPO = Path(__file__).resolve().parents[2]


def running_zygote() -> int:
    running = _zygote.running()
    assert running is not None, "no zygote runs"
    return running[0]


async def server_of(envs: aiovec.AsyncVectorEnv) -> int:
    servers = {parent_pid(pid) for pid in await worker_pids(envs)}
    assert len(servers) == 1
    return servers.pop()


async def test_every_fork_server_is_forked_from_one_zygote(no_leaks: None) -> None:
    """Two vector envs, one open while the other starts: both servers are children of the
    same zygote, a child of this process that outlives them both."""
    async with aiovec.AsyncVectorEnv([PidEnv] * 2, backend="process") as first:
        await first.reset(seed=0)
        async with aiovec.AsyncVectorEnv([PidEnv] * 2, backend="process") as second:
            await second.reset(seed=0)
            servers = [await server_of(first), await server_of(second)]
            assert servers[0] != servers[1]
            zygote = running_zygote()
            assert [parent_pid(server) for server in servers] == [zygote, zygote]
            assert parent_pid(zygote) == os.getpid()
            assert ZYGOTE_MODULE in command_line(zygote)
    assert wait_for_exit(servers, 10) == []
    assert running_zygote() == zygote


async def test_a_forked_server_runs_in_the_callers_surroundings(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str],
        no_leaks: None) -> None:
    """A zygote started before the caller changed directory, its environment or its
    standard error: the server forked now has the new ones, as a server started now would.
    A changed environment gets a new zygote; a changed directory does not need one."""
    async with aiovec.AsyncVectorEnv([PidEnv], backend="process") as envs:
        await envs.reset(seed=0)  # a zygote runs
    before = running_zygote()
    monkeypatch.chdir(tmp_path)
    async with aiovec.AsyncVectorEnv([SurroundingsEnv], backend="process") as envs:
        assert await envs.get_attr("cwd") == (str(tmp_path),)
        assert running_zygote() == before
        assert await envs.call("variable", "PYTEST_CURRENT_TEST") == (
            os.environ["PYTEST_CURRENT_TEST"],)
        text = f"said in the worker {uuid.uuid4()}\n"
        await envs.call("complain", text)
        assert text in capfd.readouterr().err  # this test's stderr, not the zygote's
    value = str(uuid.uuid4())
    monkeypatch.setenv("AIOVEC_ZYGOTE_TEST_VALUE", value)
    async with aiovec.AsyncVectorEnv([SurroundingsEnv], backend="process") as envs:
        assert await envs.call("variable", "AIOVEC_ZYGOTE_TEST_VALUE") == (value,)
        assert running_zygote() != before
        assert parent_pid(await server_of(envs)) == running_zygote()
    assert wait_for_exit([before], 10) == []  # the one it replaced was reaped


async def test_a_killed_zygote_leaves_its_servers_and_is_replaced(no_leaks: None) -> None:
    async with aiovec.AsyncVectorEnv([PidEnv] * 2, backend="process") as envs:
        await envs.reset(seed=0)
        zygote = running_zygote()
        os.kill(zygote, signal.SIGKILL)
        assert wait_for_exit([zygote], 10) == []
        obs, *_ = await envs.step(np.ones(2, np.int64))  # its server and workers live on
        assert obs[:, 0].tolist() == [1, 1]
        async with aiovec.AsyncVectorEnv([PidEnv] * 2, backend="process") as later:
            await later.reset(seed=0)
            assert parent_pid(await server_of(later)) == running_zygote() != zygote


async def test_a_zygote_that_cannot_start_leaves_servers_to_start_themselves(
        monkeypatch: pytest.MonkeyPatch, no_leaks: None) -> None:
    """A zygote that exits at once (a broken bootstrap): the server is started as a fresh
    interpreter, and the vector env works as ever."""
    monkeypatch.setattr(_zygote, "python_command",
                        lambda *_: ["/bin/sh", "-c", "exit 5"])
    monkeypatch.setenv("AIOVEC_ZYGOTE_TEST_VALUE", "a new context: a new zygote")
    async with aiovec.AsyncVectorEnv([PidEnv] * 2, backend="process") as envs:
        await envs.reset(seed=0)
        assert parent_pid(await server_of(envs)) == os.getpid()
        assert _zygote.running() is None
        obs, *_ = await envs.step(np.ones(2, np.int64))
        assert obs[:, 0].tolist() == [1, 1]


async def test_with_the_zygote_off_each_server_is_started(
        monkeypatch: pytest.MonkeyPatch, no_leaks: None) -> None:
    monkeypatch.setenv("AIOVEC_ZYGOTE", "0")
    async with aiovec.AsyncVectorEnv([PidEnv] * 2, backend="process") as envs:
        await envs.reset(seed=0)
        assert parent_pid(await server_of(envs)) == os.getpid()


async def test_forked_workers_do_not_share_numpys_global_random_state(no_leaks: None) -> None:
    """Forked from one zygote, through two servers, four workers draw four different numbers
    from NumPy's legacy global generator, as fresh interpreters would."""
    async with aiovec.AsyncVectorEnv([SurroundingsEnv] * 2, backend="process",
                                     num_workers=2) as first, \
            aiovec.AsyncVectorEnv([SurroundingsEnv] * 2, backend="process",
                                  num_workers=2) as second:
        draws = [*await first.call("global_random"), *await second.call("global_random")]
    assert len(set(draws)) == 4, draws


async def test_what_a_started_server_inherits_gets_a_zygote_of_its_own(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_leaks: None) -> None:
    """A umask set, an environment too large for one message, a working directory renamed
    after the caller entered it: each server gets what a started one would have, still
    forked from a zygote (not started as an interpreter)."""
    async with aiovec.AsyncVectorEnv([PidEnv], backend="process") as envs:
        await envs.reset(seed=0)
    before = running_zygote()
    previous = os.umask(0o027)
    try:
        async with aiovec.AsyncVectorEnv([SurroundingsEnv], backend="process") as envs:
            assert await envs.get_attr("umask") == ("0027",)
            assert parent_pid(await server_of(envs)) == running_zygote() != before
    finally:
        os.umask(previous)
    large = "x" * 100_000  # three of them: more than one datagram of the zygote's socket
    for name in ("AIOVEC_ZYGOTE_TEST_VALUE", "AIOVEC_ZYGOTE_TEST_1", "AIOVEC_ZYGOTE_TEST_2"):
        monkeypatch.setenv(name, large)  # (each under the kernel's limit for one variable)
    (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    (tmp_path / "here").rename(tmp_path / "there")
    async with aiovec.AsyncVectorEnv([SurroundingsEnv], backend="process") as envs:
        assert await envs.call("variable", "AIOVEC_ZYGOTE_TEST_VALUE") == (large,)
        assert await envs.get_attr("cwd") == (str(tmp_path / "there"),)
        assert parent_pid(await server_of(envs)) == running_zygote()


async def test_a_replaced_zygote_serves_its_servers_to_the_end(
        monkeypatch: pytest.MonkeyPatch, no_leaks: None) -> None:
    """Replaced while a vector env of its own is open, a zygote still relays that env's
    server's exit status, and exits with it."""
    envs = aiovec.AsyncVectorEnv([PidEnv] * 2, backend="process", num_workers=2)
    async with envs:
        await envs.reset(seed=0)
        old = running_zygote()
        monkeypatch.setenv("AIOVEC_ZYGOTE_TEST_VALUE", str(uuid.uuid4()))
        async with aiovec.AsyncVectorEnv([PidEnv], backend="process") as later:
            await later.reset(seed=0)
            assert running_zygote() != old
        assert wait_for_exit([old], 0.5) == [old]  # its server still runs
        workers = await worker_pids(envs)
        server = await server_of(envs)
        os.kill(server, signal.SIGKILL)  # workers whose server dies exit with it
        assert wait_for_exit([server, *workers], 10) == []
        with pytest.raises(aiovec.WorkerDiedError):
            await envs.step(np.ones(2, np.int64))
        handle = envs._engine.backend._fork_server.process  # the old zygote relays its status:
        assert await handle.wait(10) == -signal.SIGKILL and handle.describe_exit() == (
            "killed by SIGKILL")
    assert wait_for_exit([server, old], 10) == []


_EXITING_SCRIPT = """
import asyncio, atexit, sys
import aiovec
from aiovec._backends._process import _zygote
from tests.envs import PidEnv

how = sys.argv[1]

@atexit.register  # registered before any vector env: it still finds the shim open
def close_at_exit():
    if how == "closed by an exit handler":
        assert not shim.closed
        shim.close()

async def main():
    global left
    async with aiovec.AsyncVectorEnv([PidEnv] * 2, backend="process") as envs:
        await envs.reset(seed=0)
    # Another, so that one zygote has served two servers.
    left = aiovec.AsyncVectorEnv([PidEnv] * 2, backend="process")
    await left.reset(seed=0)
    if how != "left open":
        await left.aclose()

asyncio.run(main())
shim = aiovec.VectorEnv([PidEnv] * 2, backend="process")
shim.reset(seed=0)
if how == "closed":
    shim.close()
print("zygote", _zygote.running()[0], flush=True)
"""


@pytest.mark.parametrize("how", ["closed", "closed by an exit handler", "left open"])
def test_a_script_exits_with_its_zygote_reaped_and_no_other_warning(how: str) -> None:
    """At exit the zygote exits and is reaped once every vector env is closed (by the
    script, or at exit): no child left running unawaited, no event loop or socket left open
    (Python's ResourceWarnings said so, in every pytest-xdist worker's last words too). A
    vector env left open is warned about, saying how to close it (a sync shim its own way).
    A program's own exit handler still finds its vector env open, and closes it."""
    done = subprocess.run([sys.executable, "-W", "default", "-c", _EXITING_SCRIPT, how],
                          cwd=REPO, capture_output=True, text=True, timeout=120, check=True)
    warnings = sorted(line.split("ResourceWarning: ", 1)[1]
                      for line in done.stderr.splitlines() if "ResourceWarning: " in line)
    if how != "left open":
        assert warnings == [], done.stderr
        assert "Traceback" not in done.stderr, done.stderr
    else:
        assert [warning.split(">: ")[1] for warning in warnings] == [
            "use `async with` or `await envs.aclose()`", "use `with` or call `envs.close()`"]
        assert all(warning.startswith("unclosed <AsyncVectorEnv 2 envs")
                   for warning in warnings), done.stderr
    zygote = int(done.stdout.split()[-1])
    assert wait_for_exit([zygote], 10) == []
