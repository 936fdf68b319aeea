"""Shutdown is idempotent, bounded in time, and safe during a step, after crashes, from
``__del__`` and on Ctrl-C: every worker reaped, nothing left behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import anyio
import numpy as np
import pytest
from anyio import wait_all_tasks_blocked

import aiovec
from aiovec.testing import Fault, FaultLedger
from tests.backends_matrix import DEADLINE_BACKENDS
from tests.faults.envs import faulty, one_per_worker
from tests.leaks import wait_for_exit

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("backend", DEADLINE_BACKENDS)
@pytest.mark.hangs_on_purpose(
    "a sub-env hangs for good: closing abandons its thread")
async def test_close_during_a_hung_step_is_bounded(backend: str, ledger: FaultLedger,
                                                   no_leaks: None) -> None:
    envs = aiovec.AsyncVectorEnv(faulty(2, ledger, {1: [Fault("hang", "step")]},
                                        backend=backend), backend=backend, close_timeout=0.5,
                                 **one_per_worker(backend, 2))
    await envs.reset()
    outcome: list[BaseException] = []

    async def step() -> None:
        try:
            await envs.step(np.ones(2))
        except aiovec.AiovecError as error:
            outcome.append(error)

    started = time.monotonic()
    async with anyio.create_task_group() as group:
        group.start_soon(step)
        await wait_all_tasks_blocked()  # the step is sent and awaits its replies
        await envs.aclose()
        await envs.aclose()  # idempotent
    assert time.monotonic() - started < 20  # close_timeout, then terminate, then kill
    assert isinstance(outcome[0], aiovec.ClosedError)
    assert envs.closed


async def test_close_after_every_worker_crashed(ledger: FaultLedger, no_leaks: None) -> None:
    faults = {index: [Fault("kill", "step")] for index in range(2)}
    async with aiovec.AsyncVectorEnv(faulty(2, ledger, faults), backend="process",
                                     num_workers=2) as envs:
        await envs.reset()
        with pytest.raises(aiovec.WorkerDiedError):
            await envs.step(np.ones(2))
    assert envs.closed and "0/2 workers alive" in repr(envs)


@pytest.mark.worker_processes
def test_unclosed_process_env_is_torn_down_by_del() -> None:
    leaked: list[aiovec.AsyncVectorEnv] = []
    pids: list[int] = []

    async def leak() -> None:
        envs = aiovec.AsyncVectorEnv(faulty(2), backend="process", num_workers=2)
        await envs.reset()
        pids.extend(worker.process.pid for worker in envs._engine.backend._workers)  # type: ignore[attr-defined]
        leaked.append(envs)

    anyio.run(leak)
    leaked_env = leaked.pop()
    with pytest.warns(ResourceWarning, match="unclosed"):
        del leaked_env  # the last reference: __del__ runs right here
    assert wait_for_exit(pids, 10) == []


CTRL_C_SCRIPT = """
import os, signal, sys, numpy as np, aiovec
# Ctrl-C raises KeyboardInterrupt as in a terminal, even if this test runs in the background.
signal.signal(signal.SIGINT, signal.default_int_handler)
from aiovec.testing import Fault, FaultyEnv
import functools

envs = aiovec.VectorEnv([functools.partial(FaultyEnv, 0),
                         functools.partial(FaultyEnv, 1, faults=[Fault("hang", "step")])],
                        backend="process", num_workers=2)
envs.reset()
envs.step_async(np.ones(2))  # sub-env 1 hangs in this step
print(*[worker.process.pid for worker in envs.async_env._engine.backend._workers], flush=True)
envs.step_wait()  # until Ctrl-C
"""


def test_ctrl_c_in_the_shim_reaps_every_worker() -> None:
    script = textwrap.dedent(CTRL_C_SCRIPT)
    # (A context manager: on a failure too, the pipes are closed here, not by a later GC.)
    with subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True,
                          cwd=Path(__file__).parents[2]) as parent:
        try:
            assert parent.stdout is not None and parent.stderr is not None
            workers = [int(pid) for pid in parent.stdout.readline().split()]
            assert len(workers) == 2, parent.stderr.read() if parent.poll() is not None else ""
            os.kill(parent.pid, signal.SIGINT)
            _, errors = parent.communicate(timeout=60)
        finally:
            parent.kill()
    assert errors.count("Traceback") == 1, errors  # the parent's, nothing from the workers
    assert errors.rstrip().endswith("KeyboardInterrupt"), errors
    assert wait_for_exit(workers, 5) == []
