"""Registered cleanups (``aiovec.register_cleanup``) run exactly once: after the sub-env's
``close()`` (vector close, restart), or in the fork server when its worker dies without
closing it; bounded, and a failure is counted and logged, never blocking close.

The resource is real: each sub-env creates a directory, and its cleanup removes it and appends
one line to a record file (one ``O_APPEND`` write), so a second run would show.
"""

from __future__ import annotations

import functools
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import gymnasium as gym
import numpy as np
import pytest

import aiovec
from aiovec._backends._readable import readable
from aiovec.testing import Fault, FaultyEnv, release_hangs
from tests.backends_matrix import LOCAL_BACKENDS, for_backend
from tests.leaks import wait_for_exit

pytestmark = pytest.mark.anyio

REPO = Path(__file__).resolve().parents[2]
#: Seconds a hanging cleanup hangs at most: far beyond its 0.5 s bound.
HANG = 6.0


def remove_directory(directory: str, record: str) -> None:
    """The cleanup: remove the sub-env's directory, then say so in ``record`` (a line per run:
    a second run would show). In that order: a test that waits for the record then finds the
    directory gone (the other order failed one on a busy machine)."""
    shutil.rmtree(directory, ignore_errors=True)
    fd = os.open(record, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{os.path.basename(directory)}\n".encode())
    finally:
        os.close(fd)
    print(f"removed {os.path.basename(directory)}", flush=True)  # where its output goes


def remove_directory_after(seconds: float, directory: str, record: str) -> None:
    time.sleep(seconds)  # a slow delete (a sandbox's, say)
    remove_directory(directory, record)


def remove_directory_padded(directory: str, record: str, padding: bytes) -> None:
    """``remove_directory``, with ``padding`` to make the pickled cleanup big."""
    remove_directory(directory, record)


async def remove_directory_later(directory: str, record: str) -> None:
    """An async cleanup (a sandbox's delete): yields to its event loop first."""
    await anyio.lowlevel.checkpoint()
    remove_directory(directory, record)


async def remove_directory_slowly(directory: str, record: str) -> None:
    await anyio.sleep(1.0)  # a slow delete: longer than the close waits for the host
    remove_directory(directory, record)

async def hang_async() -> None:
    await anyio.sleep(HANG)


def fail(message: str) -> None:
    raise RuntimeError(message)


#: Ends ``hang`` in this process (a worker's copy is never set: it dies with its worker).
RELEASE = threading.Event()


def hang() -> None:
    """A cleanup that overruns its bound by far (until released, or ``HANG`` seconds)."""
    RELEASE.wait(HANG)


class DirectoryEnv(FaultyEnv):
    """Makes a directory ``<root>/<env_id>-<pid>-<n>`` and registers its removal (or
    ``cleanup``; ``"unpicklable"``: a bound method of a lock)."""

    made = 0

    def __init__(self, env_id: int = 0, *, root: str, cleanup: Any = None,
                 cleanup_timeout: float = 10.0, **faulty: Any) -> None:
        super().__init__(env_id, **faulty)
        DirectoryEnv.made += 1
        self.directory = f"{root}/{env_id}-{os.getpid()}-{DirectoryEnv.made}"
        os.mkdir(self.directory)
        if cleanup == "unpicklable":
            cleanup = threading.Lock().acquire
        elif cleanup == "slow":  # a slow delete: still running when the interpreter exits
            cleanup = functools.partial(remove_directory_after, 0.5, self.directory,
                                        f"{root}/record")
        elif cleanup == "padded":  # 3 MB pickled: far more than a socket's buffer
            cleanup = functools.partial(remove_directory_padded, self.directory,
                                        f"{root}/record", bytes(3_000_000))
        elif cleanup in ("async", "slow-async"):
            cleanup = functools.partial(
                remove_directory_later if cleanup == "async" else remove_directory_slowly,
                self.directory, f"{root}/record")
        aiovec.register_cleanup(
            self, cleanup or functools.partial(remove_directory, self.directory,
                                               f"{root}/record"),
            timeout=cleanup_timeout)


class LeaseEnv(FaultyEnv):
    """A lease per episode (a directory ``<root>/lease-<env_id>-<pid>-<n>``): its removal is
    registered before it is made, and discarded once the env removes it at the episode's end,
    as a sandbox per episode is (episodes of 2 steps)."""

    def __init__(self, env_id: int = 0, *, root: str, cleanup: Any = None) -> None:
        super().__init__(env_id, episode_length=2)
        self.root, self.asynchronous = root, cleanup == "async"
        self.lease: tuple[str, aiovec.CleanupHandle] | None = None
        self.leases = 0

    def reset(self, **kwargs: Any) -> Any:
        self.leases += 1
        directory = f"{self.root}/lease-{self.env_id}-{os.getpid()}-{self.leases}"
        removal = functools.partial(
            remove_directory_later if self.asynchronous else remove_directory, directory,
            f"{self.root}/record")
        self.lease = (directory, aiovec.register_cleanup(self, removal))
        os.mkdir(directory)
        return super().reset(**kwargs)

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = super().step(action)
        if terminated and self.lease is not None:
            directory, handle = self.lease
            remove_directory(directory, f"{self.root}/record")  # the episode's own delete
            assert handle.discard() and not handle.discard()
            self.lease = None
        return obs, reward, terminated, truncated, info


def directory_envs(root: Path, num_envs: int, **options: Any) -> list[Any]:
    return [functools.partial(DirectoryEnv, index, root=str(root), **options)
            for index in range(num_envs)]


def record(root: Path) -> list[str]:
    path = root / "record"
    return sorted(path.read_text().split()) if path.exists() else []


def directories(root: Path) -> list[str]:
    return sorted(entry.name for entry in root.iterdir() if entry.is_dir())


def wait_for_records(root: Path, count: int, timeout: float = 15.0) -> list[str]:
    """The record once it has ``count`` lines (cleanups run in another process): polled, as
    nothing else signals a write to a file."""
    deadline = time.monotonic() + timeout
    while len(record(root)) < count and time.monotonic() < deadline:
        time.sleep(0.05)
    return record(root)


@pytest.mark.parametrize("backend", LOCAL_BACKENDS)
async def test_cleanups_run_once_at_close(backend: str, tmp_path: Path,
                                          no_leaks: None) -> None:
    envs = aiovec.AsyncVectorEnv(for_backend(backend, directory_envs(tmp_path, 3)),
                                 backend=backend)
    async with envs:
        await envs.reset(seed=0)
        await envs.step(np.ones(3))
        made = directories(tmp_path)
        assert len(made) == 3 and record(tmp_path) == []
    assert directories(tmp_path) == [] and record(tmp_path) == made
    assert envs.statistics().cleanups_run == 3 and envs.statistics().cleanups_failed == 0
    await envs.aclose()  # a second close runs nothing again
    assert record(tmp_path) == made


@pytest.mark.parametrize("cleanup", [None, "async"])
@pytest.mark.parametrize("backend", LOCAL_BACKENDS)
async def test_a_restart_runs_the_old_instances_cleanup_once(backend: str, cleanup: str | None,
                                                             tmp_path: Path,
                                                             no_leaks: None) -> None:
    """Sync cleanups, and ``async def`` ones: awaited on the loop (async backend), in a loop
    of their own elsewhere."""
    factories = directory_envs(tmp_path, 2, cleanup=cleanup)
    factories[0] = functools.partial(DirectoryEnv, 0, root=str(tmp_path), cleanup=cleanup,
                                     faults=[Fault("raise", "step", at=1)])
    async with aiovec.AsyncVectorEnv(for_backend(backend, factories), backend=backend,
                                     restart=True) as envs:
        await envs.reset(seed=0)
        old = directories(tmp_path)
        await envs.step(np.ones(2))
        _, _, _, truncated, _ = await envs.step(np.ones(2))
        assert truncated.tolist() == [True, False]
        (removed,) = set(old) - set(directories(tmp_path))
        assert removed.startswith("0-") and record(tmp_path) == [removed]
        assert envs.statistics().cleanups_run == 1
    assert directories(tmp_path) == [] and len(record(tmp_path)) == 3
    assert len(set(record(tmp_path))) == 3  # never twice


@pytest.mark.parametrize("start_method", ["forkserver", "spawn"])
async def test_the_fork_server_runs_a_dead_workers_cleanups_once(
        start_method: str, tmp_path: Path, no_leaks: None) -> None:
    """SIGKILL gives the worker no chance: its fork server runs the cleanup, with nobody
    calling; the restart's new instance has its own, run at close."""
    async with aiovec.AsyncVectorEnv(directory_envs(tmp_path, 2), backend="process",
                                     num_workers=2, start_method=start_method,
                                     restart=True) as envs:
        await envs.reset(seed=0)
        (first, second) = directories(tmp_path)
        worker = int(second.split("-")[1])
        os.kill(worker, signal.SIGKILL)
        assert wait_for_records(tmp_path, 1) == [second]
        assert directories(tmp_path) == [first]
        _, _, _, truncated, _ = await envs.step(np.ones(2))  # sub-env 1 is restarted
        assert truncated.tolist() == [False, True]
        assert envs.statistics().cleanups_run == 1
    assert directories(tmp_path) == [] and len(set(record(tmp_path))) == 3
    assert envs.statistics().cleanups_run == 3


@pytest.mark.parametrize("backend", LOCAL_BACKENDS)
async def test_a_failing_or_hanging_cleanup_is_counted_and_never_blocks_close(
        backend: str, tmp_path: Path, capfd: pytest.CaptureFixture[str],
        caplog: pytest.LogCaptureFixture, no_leaks: None) -> None:
    factories = [
        functools.partial(DirectoryEnv, 0, root=str(tmp_path),
                          cleanup=functools.partial(fail, "the licence server is down")),
        functools.partial(DirectoryEnv, 1, root=str(tmp_path), cleanup_timeout=0.5,
                          cleanup=hang),
        functools.partial(DirectoryEnv, 2, root=str(tmp_path)),
    ]
    RELEASE.clear()
    envs = aiovec.AsyncVectorEnv(for_backend(backend, factories), backend=backend)
    async with envs:
        await envs.reset(seed=0)
        started = time.monotonic()
    assert time.monotonic() - started < HANG - 1  # given up after 0.5 s, not waited for
    statistics = envs.statistics()
    assert (statistics.cleanups_run, statistics.cleanups_failed) == (1, 2)
    errors = capfd.readouterr().err + caplog.text  # a worker's log, or this process's
    assert "the licence server is down" in errors and "did not finish within 0.5 s" in errors
    RELEASE.set()  # the abandoned cleanup, if it ran in this process, ends now
    for thread in threading.enumerate():
        if thread.name == "aiovec-cleanup":
            thread.join(HANG)


async def test_a_cleanup_that_cannot_be_pickled_fails_the_make(tmp_path: Path,
                                                               no_leaks: None) -> None:
    """On the process backend the fork server needs it: refused when registered."""
    envs = aiovec.AsyncVectorEnv(
        [functools.partial(DirectoryEnv, 0, root=str(tmp_path), cleanup="unpicklable")],
        backend="process")
    with pytest.raises(aiovec.SubEnvErrorGroup, match="cleanup must pickle"):
        await envs.start()
    await envs.aclose()


@pytest.mark.parametrize("backend", LOCAL_BACKENDS)
async def test_a_discarded_cleanup_runs_nowhere(backend: str, tmp_path: Path,
                                                no_leaks: None) -> None:
    """Leases deleted by their episodes are discarded: at close only the live ones run."""
    envs = aiovec.AsyncVectorEnv(
        for_backend(backend, [functools.partial(LeaseEnv, index, root=str(tmp_path))
                              for index in range(3)]), backend=backend)
    async with envs:
        await envs.reset(seed=0)
        for _ in range(7):  # two episodes each end (steps 2, 5), the third began at step 6
            await envs.step(np.ones(3))
        live = directories(tmp_path)
        assert len(live) == 3 and len(record(tmp_path)) == 6
    assert directories(tmp_path) == []
    assert sorted(set(record(tmp_path))) == record(tmp_path)  # each lease removed once
    assert set(live) <= set(record(tmp_path)) and len(record(tmp_path)) == 9
    assert envs.statistics().cleanups_run == 3


class SlowStepLeaseEnv(aiovec.AsyncEnv[Any, Any]):
    """A coroutine env holding a directory, whose steps take ``STEP`` seconds."""

    STEP = 1.0  # long beside the close: a step may not end before the close begins
    stepping = 0
    all_stepping: anyio.Event | None = None  # set once ``expected`` steps have begun
    expected = 0

    def __init__(self, env_id: int, root: str) -> None:
        self.observation_space = gym.spaces.Box(0, 1, (1,), np.float64)
        self.action_space = gym.spaces.Discrete(2)
        directory = f"{root}/{env_id}"
        os.mkdir(directory)
        aiovec.register_cleanup(self, functools.partial(remove_directory_later, directory,
                                                        f"{root}/record"))

    async def reset(self, *, seed: int | None = None,
                    options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        return np.zeros(1), {}

    async def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        SlowStepLeaseEnv.stepping += 1
        if SlowStepLeaseEnv.stepping == self.expected and self.all_stepping is not None:
            self.all_stepping.set()
        await anyio.sleep(self.STEP)
        return np.zeros(1), 0.0, False, False, {}


@pytest.mark.parametrize("max_concurrency", [None, 2])
@pytest.mark.parametrize("cancelled", [False, True])
async def test_sub_envs_stepping_when_the_close_begins_close_once_their_step_ends(
        cancelled: bool, max_concurrency: int | None, tmp_path: Path, no_leaks: None) -> None:
    """Async backend: a close (or a cancelled ``async with``) while steps run closes each
    sub-env when its step is over, its cleanups included, not at ``close_timeout``; a step
    still waiting for a permit (``max_concurrency``) is given up, not run first."""
    SlowStepLeaseEnv.stepping = 0
    SlowStepLeaseEnv.expected = max_concurrency or 8
    SlowStepLeaseEnv.all_stepping = all_stepping = anyio.Event()
    envs = aiovec.AsyncVectorEnv(
        [functools.partial(SlowStepLeaseEnv, index, str(tmp_path)) for index in range(8)],
        backend="async", close_timeout=60.0, max_concurrency=max_concurrency)

    async def rollout() -> None:
        async with envs:
            await envs.reset(seed=0)
            envs.send(np.zeros(8, dtype=np.int64))
            if cancelled:
                await envs.recv()  # cancelled while the steps run
            else:
                await envs.aclose()

    with anyio.fail_after(30.0):  # the close takes a step's time (1 s), not 60 s
        async with anyio.create_task_group() as group:
            group.start_soon(rollout)
            if cancelled:
                await all_stepping.wait()
                group.cancel_scope.cancel()
    assert directories(tmp_path) == [] and len(record(tmp_path)) == 8
    assert envs.statistics().cleanups_run == 8
    if cancelled:  # (closed at once, none may have begun)
        assert SlowStepLeaseEnv.stepping == SlowStepLeaseEnv.expected  # the waiting never ran


def test_register_cleanup_checks_its_arguments() -> None:
    with pytest.raises(TypeError, match="callable"):
        aiovec.register_cleanup(object(), "rm -rf /tmp/x")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="timeout"):
        aiovec.register_cleanup(object(), print, timeout=0)


_TRAINER = """
import functools, sys
import numpy as np
import aiovec
from tests.backends_matrix import for_backend
from tests.core.test_cleanups import DirectoryEnv, LeaseEnv

root, backend, start_method, kind = sys.argv[1:5]
factories = [functools.partial(LeaseEnv if kind == "leases" else DirectoryEnv, index, root=root,
                               cleanup="async" if backend == "async" else None)
             for index in range(2)]
where = ({"num_workers": 2, "context": start_method} if backend == "process" else {})
envs = aiovec.VectorEnv(for_backend(backend, factories), backend=backend, **where)
envs.reset(seed=0)
for _ in range(3 if kind == "leases" else 0):  # a lease discarded, the next one live
    envs.step(np.ones(2))
print("ready", flush=True)
if kind == "leases":  # killed between steps: a lease deleted and not yet discarded would be
    sys.stdin.read()  # deleted again (harmless for an idempotent delete, but not "once")
while True:
    envs.step(np.ones(2))
"""


@pytest.mark.parametrize("kind", ["directories", "leases"])
@pytest.mark.parametrize(("backend", "start_method"), [
    ("process", "forkserver"), ("process", "spawn"), ("inline", ""), ("thread", ""),
    ("async", "")])
def test_a_sigkilled_trainers_cleanups_run_in_a_process_of_aiovecs(
        backend: str, start_method: str, kind: str, tmp_path: Path) -> None:
    """SIGKILL gives the trainer no chance: its workers' fork server runs their cleanups;
    for sub-envs it hosts itself (inline, thread, async: ``async def`` ones there), its
    cleanup keeper does. Leases deleted and discarded by their episodes are not run again."""
    with subprocess.Popen([sys.executable, "-c", _TRAINER, str(tmp_path), backend,
                           start_method, kind], cwd=REPO, stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, bufsize=0,  # unbuffered: read on below
                          env={**os.environ, "PYTHONPATH": str(REPO)}) as trainer:
        assert trainer.stdout is not None
        while (line := trainer.stdout.readline()) != b"ready\n":  # after its episodes' own
            assert line, "the trainer ended before it was ready"  # deletes' lines
        made = directories(tmp_path)
        assert len(made) == 2
        deleted = record(tmp_path)  # by the episodes themselves
        assert len(deleted) == (2 if kind == "leases" else 0)
        trainer.kill()
        assert trainer.wait(15) == -signal.SIGKILL
        assert wait_for_records(tmp_path, len(deleted) + 2) == sorted(deleted + made)
        assert directories(tmp_path) == []
        if backend != "process":  # the keeper ran them, printing to the trainer's output
            printed = read_to_end(trainer.stdout, timeout=30).splitlines()
            assert sorted(printed) == [f"removed {name}" for name in made]


def read_to_end(stream: Any, timeout: float) -> str:
    """What is left in ``stream`` (a pipe) once every writer closed it, within ``timeout``."""
    fd, chunks = stream.fileno(), []
    deadline = time.monotonic() + timeout
    while readable([fd], max(0.0, deadline - time.monotonic())):
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return b"".join(chunks).decode()
        chunks.append(chunk)
    raise AssertionError(f"the pipe was still open {timeout} s on")


async def test_an_abandoned_thread_envs_cleanup_runs_at_close(tmp_path: Path,
                                                             no_leaks: None) -> None:
    """A thread cannot be killed: a sub-env hung past its deadline is abandoned; if it is
    still hung when the vector env closes, its cleanup runs then (and not again if its call
    ever returns and it closes itself)."""
    factories = [functools.partial(DirectoryEnv, 0, root=str(tmp_path),
                                   faults=[Fault("hang", "step", at=1)])]
    async with aiovec.AsyncVectorEnv(factories, backend="thread", restart=True) as envs:
        await envs.reset(seed=0)
        (hung,) = directories(tmp_path)
        await envs.step(np.ones(1))
        await envs.step(np.ones(1), timeout=0.5)  # abandoned, and a fresh one made
        assert envs.statistics().abandoned_threads == 1
        assert record(tmp_path) == []
    assert hung in record(tmp_path) and directories(tmp_path) == []
    release_hangs()  # its call returns now, and it closes itself: no second run
    for thread in threading.enumerate():
        if thread.name.startswith("aiovec-"):
            thread.join(10)
    assert len(record(tmp_path)) == 2


class LeasingEnv(aiovec.AsyncEnv[np.ndarray, int]):
    """A coroutine env holding a lease (a directory) from its making; action 1 hangs."""

    observation_space = gym.spaces.Box(0.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, root: str, removed: anyio.Event) -> None:
        self.directory = f"{root}/lease-{os.getpid()}-{id(self)}"
        os.mkdir(self.directory)
        aiovec.register_cleanup(self, functools.partial(self.remove, self.directory,
                                                        f"{root}/record", removed))

    @staticmethod
    async def remove(directory: str, record: str, removed: anyio.Event) -> None:
        await remove_directory_later(directory, record)
        removed.set()

    async def reset(self, *, seed: int | None = None,
                    options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        return np.zeros(1, np.float32), {}

    async def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if action == 1:
            await anyio.sleep(HANG * 10)
        return np.zeros(1, np.float32), 0.0, False, False, {}


async def test_an_async_cleanup_runs_after_a_deadline_on_the_async_backend(
        tmp_path: Path, no_leaks: None) -> None:
    """A hung coroutine sub-env is cancelled at its deadline and restarted: its lease's
    async cleanup runs then, on the loop."""
    removed = anyio.Event()
    async with aiovec.AsyncVectorEnv([functools.partial(LeasingEnv, str(tmp_path), removed)],
                                     backend="async", restart=True, timeout=1.0) as envs:
        await envs.reset(seed=0)
        (first,) = directories(tmp_path)
        _, _, _, truncated, infos = await envs.step(np.ones(1, np.int64))
        assert truncated.tolist() == [True] and "1 s" in infos["restart"][0]
        # The given-up instance closes on a host task of its own, its cleanup then.
        with anyio.fail_after(15):
            await removed.wait()
        assert record(tmp_path) == [first]
    assert len(set(record(tmp_path))) == 2


async def test_the_fork_server_runs_a_dead_workers_async_cleanup(tmp_path: Path,
                                                                 no_leaks: None) -> None:
    async with aiovec.AsyncVectorEnv(directory_envs(tmp_path, 2, cleanup="async"),
                                     backend="process", num_workers=2, restart=True) as envs:
        await envs.reset(seed=0)
        (_, second) = directories(tmp_path)
        os.kill(int(second.split("-")[1]), signal.SIGKILL)
        assert wait_for_records(tmp_path, 1) == [second]
    assert directories(tmp_path) == [] and len(set(record(tmp_path))) == 2


async def test_an_async_cleanup_past_its_bound_is_cancelled_and_counted(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, no_leaks: None) -> None:
    factories = [functools.partial(DirectoryEnv, 0, root=str(tmp_path), cleanup_timeout=0.5,
                                   cleanup=hang_async)]
    envs = aiovec.AsyncVectorEnv(for_backend("async", factories), backend="async")
    async with envs:
        await envs.reset(seed=0)
        started = time.monotonic()
    assert time.monotonic() - started < HANG - 1
    assert (envs.statistics().cleanups_run, envs.statistics().cleanups_failed) == (0, 1)
    assert "did not finish within 0.5 s" in caplog.text



async def test_an_async_cleanup_outlives_its_cancelled_host(tmp_path: Path,
                                                            no_leaks: None) -> None:
    """Closing waits ``close_timeout`` for the sub-envs, then cancels their hosts: a cleanup
    under way runs on to its end (asyncio cancels a task through any shield of anyio's, so
    it runs in a task of its own), and close returns once it did."""
    factories = [functools.partial(DirectoryEnv, 0, root=str(tmp_path), cleanup_timeout=10,
                                   cleanup="slow-async")]
    envs = aiovec.AsyncVectorEnv(for_backend("async", factories), backend="async",
                                 close_timeout=0.2)
    async with envs:
        await envs.reset(seed=0)
        (made,) = directories(tmp_path)
    assert record(tmp_path) == [made] and directories(tmp_path) == []
    assert (envs.statistics().cleanups_run, envs.statistics().cleanups_failed) == (1, 0)


_EXITS = """
import asyncio, functools, sys
import aiovec
from aiovec._core import _cleanups
from tests.backends_matrix import for_backend
from tests.core.test_cleanups import DirectoryEnv

root, backend, close = sys.argv[1:4]
cleanup = "slow" if close == "collected" else None
factories = [functools.partial(DirectoryEnv, index, root=root, cleanup=cleanup)
             for index in range(2)]
if close == "collected":  # left open, collected before exit: closed without a loop
    async def main():
        envs = aiovec.AsyncVectorEnv(for_backend(backend, factories), backend=backend)
        await envs.reset(seed=0)
    asyncio.run(main())
else:
    envs = aiovec.VectorEnv(for_backend(backend, factories), backend=backend)
    envs.reset(seed=0)
    if close == "close":
        envs.close()
with open(f"{root}/keeper", "w") as file:  # not printed: the cleanups print beside it
    file.write(str(_cleanups.keeper[0]))
"""


@pytest.mark.parametrize("close", ["close", "no close", "collected"])
@pytest.mark.parametrize("backend", ["thread", "inline", "parent worker"])
def test_a_process_hosting_sub_envs_exits_quietly_and_every_cleanup_runs_once(
        backend: str, close: str, tmp_path: Path) -> None:
    """A process hosting sub-envs in its own threads (thread backend, a parent worker) or
    inline exits, its vector env closed, left open, or collected unclosed before exit (its
    slow cleanups still running): every cleanup runs once, none cut short by the
    interpreter stopping a thread mid-cleanup (exit waits for those threads). The cleanup
    keeper outlives its owner by design, yet the exit warns of no process still running and
    no socket left open (``-X dev`` shows every ResourceWarning; a vector env left open is
    the one warned about), and the keeper ends."""
    environment = {**os.environ, "PYTHONPATH": str(REPO)}
    if backend == "parent worker":  # one sub-env in a worker process, one in a thread here
        backend, environment["AIOVEC_PARENT_WORKER"] = "process", "1"
    trainer = subprocess.run([sys.executable, "-X", "dev", "-c", _EXITS, str(tmp_path), backend,
                              close], cwd=REPO, capture_output=True, text=True, timeout=120,
                             env=environment)
    assert trainer.returncode == 0, trainer.stderr
    warned = [line for line in trainer.stderr.splitlines() if ": ResourceWarning: " in line]
    assert len(warned) == (close != "close"), trainer.stderr
    assert all("unclosed <AsyncVectorEnv" in line for line in warned), trainer.stderr
    keeper = int((tmp_path / "keeper").read_text())
    assert wait_for_exit([keeper], timeout=30) == []
    records = wait_for_records(tmp_path, 2)
    assert len(records) == len(set(records)) == 2 and directories(tmp_path) == []


_PADDED = """
import functools, socket, sys
socket.setdefaulttimeout(1.0)  # before aiovec makes its channel to the keeper
import aiovec
from tests.core.test_cleanups import DirectoryEnv

factories = [functools.partial(DirectoryEnv, index, root=sys.argv[1], cleanup="padded")
             for index in range(3)]
envs = aiovec.VectorEnv(factories, backend="thread")
envs.reset(seed=0)
print("ready", flush=True)
sys.stdin.read()
"""


def test_big_cleanups_reach_the_keeper_under_a_default_socket_timeout(tmp_path: Path) -> None:
    """A program that set ``socket.setdefaulttimeout`` (its sockets are then non-blocking
    underneath) still hands every cleanup whole to the keeper, however big: after a SIGKILL
    the three run."""
    with subprocess.Popen([sys.executable, "-c", _PADDED, str(tmp_path)], cwd=REPO,
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)}) as trainer:
        assert trainer.stdout is not None
        assert trainer.stdout.readline() == "ready\n"
        made = directories(tmp_path)
        assert len(made) == 3
        trainer.kill()
        assert trainer.wait(15) == -signal.SIGKILL
    assert wait_for_records(tmp_path, 3) == made
    assert directories(tmp_path) == []
