"""Whatever a sub-env starts dies with it on the Ray backend too: after close, a restart in a
live actor, a deadline that kills the actor, an actor crash, a kill from outside, the driver's
SIGKILL and Ctrl-C in the sync shim. While the actor lives it ends its own tree; once it is
dead, its keeper (``aiovec._backends._keeper``) does, and runs the cleanups it left.
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import aiovec
from aiovec._backends._keeper import ENDS_TREE
from aiovec.testing import Fault
from tests.backends.test_process_tree import (
    GONE_WITHIN,
    HELPERS_PER_ENV,
    REPO,
    all_helpers,
    helpers,
    tree_envs,
)
from tests.core.test_cleanups import DirectoryEnv, directories, wait_for_records
from tests.leaks import wait_for_exit
from tests.ray_runtime import ensure_ray

pytestmark = [pytest.mark.anyio, pytest.mark.ray]

KEEPER_MODULE = b"aiovec._backends._keeper"


def keepers() -> list[int]:
    """Every Ray actor's keeper on this machine (a process's cleanup keeper, which lives as
    long as its process, say another pytest-xdist worker, is not one of them)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                arguments = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if (any(KEEPER_MODULE in argument for argument in arguments)
                    and ENDS_TREE.encode() in arguments):
                found.append(int(entry.name))
    return found


@pytest.fixture
def tag(request: pytest.FixtureRequest) -> str:
    return f"{os.getpid()}-{request.node.name}"


@pytest.fixture
def no_keepers_left() -> object:
    """Each keeper exits once its actor is gone and its work is done."""
    before = set(keepers())
    yield
    assert wait_for_exit(sorted(set(keepers()) - before), GONE_WITHIN) == []


async def test_close_ends_what_the_env_left_running(tag: str, no_leaks: None,
                                                    no_keepers_left: None) -> None:
    envs = aiovec.AsyncVectorEnv(tree_envs(tag, 2), backend="ray", num_workers=2)
    async with envs:
        await envs.reset(seed=0)
        started = all_helpers(tag, 2)
        assert len(started) == 2 * HELPERS_PER_ENV
    assert all_helpers(tag, 2) == []
    assert envs.statistics().descendants_reaped == 2 * HELPERS_PER_ENV


async def test_a_restart_in_a_live_actor_spares_its_neighbours(tag: str, no_leaks: None,
                                                               no_keepers_left: None) -> None:
    envs = aiovec.AsyncVectorEnv(tree_envs(tag, 2, first_faults=[Fault("raise", "step", at=1)]),
                                 backend="ray", num_workers=1, restart=True)
    async with envs:
        await envs.reset(seed=0)
        old, neighbour = helpers(tag, 0), helpers(tag, 1)
        await envs.step(np.ones(2))
        _, _, _, truncated, _ = await envs.step(np.ones(2))
        assert truncated.tolist() == [True, False]
        assert wait_for_exit(old, GONE_WITHIN) == []
        assert helpers(tag, 1) == neighbour and len(helpers(tag, 0)) == HELPERS_PER_ENV
        assert envs.statistics().descendants_reaped == HELPERS_PER_ENV
    assert all_helpers(tag, 2) == []


async def test_a_deadline_kills_the_actor_and_its_keeper_ends_the_tree(
        tag: str, no_leaks: None, no_keepers_left: None) -> None:
    envs = aiovec.AsyncVectorEnv(tree_envs(tag, 2, first_faults=[Fault("hang", "step", at=1)]),
                                 backend="ray", num_workers=2, restart=True)
    async with envs:
        await envs.reset(seed=0)
        await envs.step(np.ones(2))
        old = helpers(tag, 0)
        _, _, _, truncated, _ = await envs.step(np.ones(2), timeout=3.0)
        assert truncated.tolist() == [True, False]
        assert wait_for_exit(old, GONE_WITHIN) == []
        assert len(helpers(tag, 0)) == HELPERS_PER_ENV
    assert all_helpers(tag, 2) == []


@pytest.mark.parametrize("crash", ["exit", "kill"])
async def test_a_crashed_actor_takes_its_tree_with_it(tag: str, crash: str, no_leaks: None,
                                                     no_keepers_left: None) -> None:
    envs = aiovec.AsyncVectorEnv(tree_envs(tag, 2, faults=[Fault(crash, "step", at=1)]),
                                 backend="ray", num_workers=2)
    async with envs:
        await envs.reset(seed=0)
        await envs.step(np.ones(2))
        started = all_helpers(tag, 2)
        with pytest.raises(aiovec.WorkerDiedError):
            await envs.step(np.ones(2))
        assert wait_for_exit(started, GONE_WITHIN) == []


async def test_an_actor_killed_from_outside_takes_its_tree_at_once(
        tag: str, no_leaks: None, no_keepers_left: None) -> None:
    envs = aiovec.AsyncVectorEnv(tree_envs(tag, 2), backend="ray", num_workers=2, restart=True)
    async with envs:
        await envs.reset(seed=0)
        actors = list(await envs.get_attr("host_pid"))
        old = helpers(tag, 1)
        os.kill(actors[1], signal.SIGKILL)
        assert wait_for_exit(old, GONE_WITHIN) == []
        _, _, _, truncated, _ = await envs.step(np.ones(2))
        assert truncated.tolist() == [False, True]
        assert len(helpers(tag, 1)) == HELPERS_PER_ENV
    assert all_helpers(tag, 2) == []


async def test_a_killed_actors_cleanups_run_in_its_keeper(tmp_path: Path, no_leaks: None,
                                                         no_keepers_left: None) -> None:
    factories = [functools.partial(DirectoryEnv, index, root=str(tmp_path))
                 for index in range(2)]
    async with aiovec.AsyncVectorEnv(factories, backend="ray", num_workers=2) as envs:
        await envs.reset(seed=0)
        first, second = directories(tmp_path)
        os.kill(int(second.split("-")[1]), signal.SIGKILL)
        assert wait_for_records(tmp_path, 1) == [second]
        assert directories(tmp_path) == [first]
    assert directories(tmp_path) == []
    assert envs.statistics().cleanups_run == 1  # the keeper's run is not reported back


_DRIVER = """
import functools, os, signal, sys
import numpy as np
import aiovec
from aiovec.testing import ProcessTreeEnv

tag, shim = sys.argv[1], sys.argv[2] == "shim"
factories = [functools.partial(ProcessTreeEnv, index, tag=f"{tag}-{index}") for index in range(2)]
address = os.environ["AIOVEC_TEST_RAY_ADDRESS"]
signal.signal(signal.SIGINT, signal.default_int_handler)
envs = aiovec.VectorEnv(factories, backend="ray", num_workers=2, address=address)
envs.reset(seed=0)
print("ready", flush=True)
while True:
    envs.step(np.ones(2))
"""


@pytest.mark.parametrize("how", ["sigkill", "ctrl_c"])
def test_the_drivers_death_takes_every_tree_with_it(tag: str, how: str,
                                                    no_keepers_left: None) -> None:
    """A driver connected to a running cluster dies: Ray kills its actors, and their
    keepers end what the sub-envs started."""
    ray = ensure_ray()
    address = ray.get_runtime_context().gcs_address
    with subprocess.Popen([sys.executable, "-c", _DRIVER, tag, how], cwd=REPO,
                          stdout=subprocess.PIPE, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO),
                               "AIOVEC_TEST_RAY_ADDRESS": address}) as driver:
        assert driver.stdout is not None
        assert driver.stdout.readline() == "ready\n"
        started = all_helpers(tag, 2)
        assert len(started) == 2 * HELPERS_PER_ENV
        driver.send_signal(signal.SIGKILL if how == "sigkill" else signal.SIGINT)
        assert driver.wait(60) != 0
    assert wait_for_exit(started, 60) == []
