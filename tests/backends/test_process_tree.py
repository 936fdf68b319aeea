"""Whatever a sub-env starts dies with it, on the process backend: after close, a restart, a
deadline, a crash, a kill from outside, the fork server's death, the trainer's SIGKILL and
Ctrl-C in the sync shim. The sub-envs are ``ProcessTreeEnv``s, which start a plain child, a
``setsid`` daemon, a double-forked daemon and a SIGTERM-ignoring child with its grandchild.
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import aiovec
from aiovec._backends import _process_tree
from aiovec.testing import Fault, ProcessTreeEnv, tagged_processes
from tests.leaks import parent_pid, wait_for_exit, wait_until

pytestmark = pytest.mark.anyio

#: Living processes one ``ProcessTreeEnv`` starts: one each for child, setsid and
#: double_fork, two (a shell and its grandchild) for ignores_sigterm.
HELPERS_PER_ENV = 5
#: Generous: the design ends a tree within the SIGTERM grace (1 s) plus a SIGKILL round.
GONE_WITHIN = 15.0
#: spawn (a fresh interpreter per worker) is the slower path: the quick tier keeps the default.
START_METHODS = ["forkserver", pytest.param("spawn", marks=pytest.mark.slow)]
REPO = Path(__file__).resolve().parents[2]


def tree_envs(tag: str, num_envs: int, *, faults: Any = (), first_faults: Any = (),
              **options: Any) -> list[Any]:
    """Factories of ``ProcessTreeEnv`` sub-envs, sub-env ``i`` tagged ``{tag}-{i}``;
    ``faults`` strike every sub-env, ``first_faults`` sub-env 0 only (every instance of it:
    there is no ledger)."""
    return [functools.partial(ProcessTreeEnv, index, tag=f"{tag}-{index}",
                              faults=[*faults, *(first_faults if index == 0 else ())],
                              **options)
            for index in range(num_envs)]


def helpers(tag: str, env_index: int) -> list[int]:
    return tagged_processes(f"{tag}-{env_index}")


def all_helpers(tag: str, num_envs: int) -> list[int]:
    return [pid for index in range(num_envs) for pid in helpers(tag, index)]


@pytest.fixture
def tag(request: pytest.FixtureRequest) -> str:
    """A tag unique to this test (and this run)."""
    return f"{os.getpid()}-{request.node.name}"


@pytest.mark.parametrize("start_method", START_METHODS)
async def test_close_ends_what_the_env_left_running(tag: str, start_method: str,
                                                    no_leaks: None) -> None:
    envs = aiovec.AsyncVectorEnv(tree_envs(tag, 3), backend="process", num_workers=2,
                                 start_method=start_method)
    async with envs:
        await envs.reset(seed=0)
        await envs.step(np.ones(3))
        started = all_helpers(tag, 3)
        assert len(started) == 3 * HELPERS_PER_ENV
    assert wait_for_exit(started, GONE_WITHIN) == []
    assert all_helpers(tag, 3) == []
    assert envs.statistics().descendants_reaped == 3 * HELPERS_PER_ENV


@pytest.mark.parametrize("start_method", START_METHODS)
async def test_a_careful_envs_close_leaves_nothing_to_end(tag: str, start_method: str,
                                                          no_leaks: None) -> None:
    """An env that stops its own helpers: only the orphaned daemons are left to aiovec."""
    envs = aiovec.AsyncVectorEnv(
        tree_envs(tag, 2, helpers=("child", "ignores_sigterm"), stop_helpers_on_close=True),
        backend="process", num_workers=1, start_method=start_method)
    async with envs:
        await envs.reset(seed=0)
        started = all_helpers(tag, 2)
        assert len(started) == 2 * 3
    # The env kills its shell; the grandchild below it is an orphan that aiovec ends.
    assert wait_for_exit(started, GONE_WITHIN) == []
    assert envs.statistics().descendants_reaped == 2


@pytest.mark.parametrize("start_method", START_METHODS)
async def test_a_restart_ends_the_old_instance_and_spares_its_neighbours(
        tag: str, start_method: str, no_leaks: None) -> None:
    """Two sub-envs share a worker; sub-env 0 raises and is made afresh in it: its old
    helpers end, sub-env 1's keep running."""
    envs = aiovec.AsyncVectorEnv(
        tree_envs(tag, 2, first_faults=[Fault("raise", "step", at=1)]),
        backend="process", num_workers=1, start_method=start_method, restart=True)
    async with envs:
        await envs.reset(seed=0)
        old, neighbour = helpers(tag, 0), helpers(tag, 1)
        assert len(old) == len(neighbour) == HELPERS_PER_ENV
        await envs.step(np.ones(2))
        _, _, _, truncated, infos = await envs.step(np.ones(2))  # sub-env 0 fails, restarts
        assert truncated.tolist() == [True, False] and infos["restart"][0]
        assert wait_for_exit(old, GONE_WITHIN) == []
        assert helpers(tag, 1) == neighbour
        assert len(helpers(tag, 0)) == HELPERS_PER_ENV  # the new instance's
        assert envs.statistics().descendants_reaped == HELPERS_PER_ENV
    assert all_helpers(tag, 2) == []


@pytest.mark.parametrize("start_method", START_METHODS)
async def test_a_deadline_ends_the_tree_with_the_worker(tag: str, start_method: str,
                                                       no_leaks: None) -> None:
    envs = aiovec.AsyncVectorEnv(
        tree_envs(tag, 2, first_faults=[Fault("hang", "step", at=1)]),
        backend="process", num_workers=2, start_method=start_method, restart=True)
    async with envs:
        await envs.reset(seed=0)
        await envs.step(np.ones(2))
        old = helpers(tag, 0)
        _, _, _, truncated, infos = await envs.step(np.ones(2), timeout=2.0)
        assert truncated.tolist() == [True, False] and infos["restart"][0]
        assert envs.statistics().timeouts == 1
        assert wait_for_exit(old, GONE_WITHIN) == []
        assert len(helpers(tag, 0)) == HELPERS_PER_ENV  # the restarted instance's
        assert envs.statistics().descendants_reaped == HELPERS_PER_ENV
    assert all_helpers(tag, 2) == []


@pytest.mark.parametrize("start_method", START_METHODS)
@pytest.mark.parametrize("crash", ["exit", "kill"])
async def test_a_crashed_worker_takes_its_tree_with_it(tag: str, start_method: str, crash: str,
                                                      no_leaks: None) -> None:
    envs = aiovec.AsyncVectorEnv(tree_envs(tag, 2, faults=[Fault(crash, "step", at=1)]),
                                 backend="process", num_workers=2, start_method=start_method)
    async with envs:
        await envs.reset(seed=0)
        await envs.step(np.ones(2))
        started = all_helpers(tag, 2)
        with pytest.raises(aiovec.WorkerDiedError) as caught:
            await envs.step(np.ones(2))
        assert wait_for_exit(started, GONE_WITHIN) == []
        causes = [error.__cause__ for error in caught.value.exceptions]
        assert all(isinstance(cause, aiovec.WorkerDiedError) for cause in causes)
        assert [cause.descendants_ended for cause in causes] == [HELPERS_PER_ENV] * 2
        assert f"{HELPERS_PER_ENV} processes its sub-envs had started ended" in str(causes[0])


@pytest.mark.parametrize("start_method", START_METHODS)
async def test_a_worker_killed_from_outside_takes_its_tree_at_once(
        tag: str, start_method: str, no_leaks: None) -> None:
    """Nobody is stepping: the fork server notices the death and ends the tree by itself."""
    envs = aiovec.AsyncVectorEnv(tree_envs(tag, 2), backend="process", num_workers=2,
                                 start_method=start_method, restart=True)
    async with envs:
        await envs.reset(seed=0)
        workers = list(await envs.get_attr("host_pid"))
        old = helpers(tag, 1)
        os.kill(workers[1], signal.SIGKILL)
        assert wait_for_exit(old, GONE_WITHIN) == []
        _, _, _, truncated, infos = await envs.step(np.ones(2))  # sub-env 1 is restarted
        assert truncated.tolist() == [False, True] and infos["restart"][1]
        assert len(helpers(tag, 1)) == HELPERS_PER_ENV
    assert all_helpers(tag, 2) == []


@pytest.mark.parametrize("start_method", START_METHODS)
async def test_a_killed_fork_server_takes_every_tree_with_it(
        tag: str, start_method: str, no_leaks: None) -> None:
    """Its workers end their own trees and exit; the next call restarts them."""
    envs = aiovec.AsyncVectorEnv(tree_envs(tag, 2), backend="process", num_workers=2,
                                 start_method=start_method, restart=True)
    async with envs:
        await envs.reset(seed=0)
        workers = list(await envs.get_attr("host_pid"))
        server = parent_pid(workers[0])
        started = all_helpers(tag, 2)
        os.kill(server, signal.SIGKILL)
        assert wait_for_exit([server, *workers, *started], GONE_WITHIN) == []
        _, _, _, truncated, _ = await envs.step(np.ones(2))
        assert truncated.tolist() == [True, True]
        assert len(all_helpers(tag, 2)) == 2 * HELPERS_PER_ENV
    assert all_helpers(tag, 2) == []


# ---------------------------------------------------------------------- the trainer dies

_TRAINER = """
import functools, signal, sys
import numpy as np
import aiovec
from aiovec.testing import ProcessTreeEnv

tag, start_method, loop = sys.argv[1:4]
factories = [functools.partial(ProcessTreeEnv, index, tag=f"{tag}-{index}") for index in range(2)]

async def train():
    async with aiovec.AsyncVectorEnv(factories, backend="process", num_workers=2,
                                     start_method=start_method) as envs:
        await envs.reset(seed=0)
        print("ready", flush=True)
        while True:
            await envs.step(np.ones(2))

def shim():
    # Started by a runner that may ignore SIGINT (a background job): Ctrl-C as in a terminal.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    envs = aiovec.VectorEnv(factories, context=start_method, backend="process",
                            num_workers=2)
    envs.reset(seed=0)
    print("ready", flush=True)
    while True:
        envs.step(np.ones(2))

if loop == "shim":
    shim()
elif loop == "trio":
    import trio
    trio.run(train)
else:
    import asyncio
    if loop == "uvloop":
        import uvloop
        uvloop.install()
    asyncio.run(train())
"""


def run_trainer(tag: str, start_method: str, loop: str) -> subprocess.Popen[str]:
    """A training script in its own process, stepping until stopped; returns once it has
    made its sub-envs (their helpers are running)."""
    trainer = subprocess.Popen([sys.executable, "-c", _TRAINER, tag, start_method, loop],
                               cwd=REPO, stdout=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONPATH": str(REPO)})
    assert trainer.stdout is not None
    assert trainer.stdout.readline() == "ready\n"
    return trainer


@pytest.mark.parametrize("start_method", START_METHODS)
@pytest.mark.parametrize("loop", ["asyncio", "uvloop", "trio"])
def test_a_sigkilled_trainer_takes_every_tree_with_it(tag: str, start_method: str,
                                                      loop: str) -> None:
    with run_trainer(tag, start_method, loop) as trainer:
        started = all_helpers(tag, 2)
        assert len(started) == 2 * HELPERS_PER_ENV
        trainer.kill()
        assert trainer.wait(GONE_WITHIN) == -signal.SIGKILL
    assert wait_for_exit(started, GONE_WITHIN) == []


@pytest.mark.parametrize("start_method", START_METHODS)
def test_ctrl_c_in_the_sync_shim_takes_every_tree_with_it(tag: str, start_method: str) -> None:
    with run_trainer(tag, start_method, "shim") as trainer:
        started = all_helpers(tag, 2)
        assert len(started) == 2 * HELPERS_PER_ENV
        trainer.send_signal(signal.SIGINT)
        assert trainer.wait(GONE_WITHIN) != 0  # KeyboardInterrupt
    assert wait_for_exit(started, GONE_WITHIN) == []


# ---------------------------------------------------------------------- end_tree itself

_HALF_EXITED = """
import ctypes, platform, subprocess, threading

def hold():
    helper = subprocess.Popen(["sleep", "3600"])  # a child of this thread, not of the leader
    print(helper.pid, flush=True)
    threading.Event().wait()

threading.Thread(target=hold).start()
input()  # the test has read the helper's pid
# exit(2), not exit_group(2): the main thread (the leader) ends, the other lives on.
ctypes.CDLL(None).syscall({"x86_64": 60, "aarch64": 93}[platform.machine()], 0)
"""


def test_end_tree_ends_a_zombie_leader_whose_threads_live_on_and_their_children() -> None:
    """A process whose main thread has exited is a zombie to ``/proc`` while its other
    threads run and hold their children: a worker whose main thread exits while its
    lifeline's watcher ends its tree looks so for a moment. Both are found and ended."""
    with subprocess.Popen([sys.executable, "-c", _HALF_EXITED], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True) as process:
        assert process.stdin is not None and process.stdout is not None
        try:
            helper = int(process.stdout.readline())
            process.stdin.write("\n")
            process.stdin.flush()
            wait_until(lambda: _state_letter(process.pid) == "Z", GONE_WITHIN,
                       "its main thread to exit")
            assert _process_tree.end_tree([process.pid]) == 2
            assert wait_for_exit([helper, process.pid], GONE_WITHIN) == []
        finally:
            process.kill()


def _state_letter(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0]
