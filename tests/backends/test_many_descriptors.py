"""The process backend in a trainer holding more than 1,024 open descriptors.

``select.select`` refuses descriptor numbers from 1024 (``FD_SETSIZE``) up; a trainer with
many sockets or data-set files hands its workers sockets numbered that high. Each check runs in
a fresh interpreter, so this test process's own descriptor table is left alone.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from aiovec._backends._readable import readable
from tests.backends_matrix import EVENT_LOOPS

SCRIPT = textwrap.dedent("""
    import functools, os, resource, signal, sys

    import anyio, numpy as np

    import aiovec
    from aiovec.testing import Fault, FaultyEnv
    from tests.envs import PidEnv, worker_pids
    from tests.leaks import parent_pid, wait_for_exit

    loop, start_method, ledger = sys.argv[1], sys.argv[2], sys.argv[3]
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 2048:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(2048, hard), hard))
    held = [os.open(os.devnull, os.O_RDONLY)]
    while held[-1] < 1023:  # every lower number taken: whatever opens next is 1024 or more
        held.append(os.open(os.devnull, os.O_RDONLY))

    def factories():
        # Sub-env 1's first instance exits its worker at its second step: a restart.
        return [functools.partial(FaultyEnv, index, ledger=ledger,
                                  faults=[Fault("exit", "step", at=1, instance=0)] * (index == 1))
                for index in range(4)]

    async def main():
        async with aiovec.AsyncVectorEnv(factories(), backend="process", num_workers=2,
                                         start_method=start_method, restart=True) as envs:
            await envs.reset(seed=0)
            await envs.step(np.ones(4, np.int64))
            envs.send(np.ones(4, np.int64))
            # Read while replies are owed and no task reads them: trio polls the sockets here.
            seen, restarted, stepping = [], [], [envs.num_stepping + envs.num_ready]
            while len(seen) < 4:
                batch = await envs.recv()
                stepping.append(envs.num_stepping + envs.num_ready)
                seen += batch.env_ids.tolist()
                notes = batch.infos.get("restart", [""] * len(batch.env_ids))
                restarted += [int(env_id) for env_id, note in zip(batch.env_ids, notes) if note]
            # Sub-env 0 shares the dead worker: it is made afresh too.
            assert sorted(seen) == [0, 1, 2, 3] and sorted(restarted) == [0, 1], (seen, restarted)
            # (Two readings: a result landing between them counts in both, never in neither.)
            assert stepping[0] >= 4 and stepping[-1] == 0, stepping
            await envs.step(np.ones(4, np.int64))
            assert envs.statistics().restarts == 2
        print("async", loop, start_method, "ok")

    async def fork_server_killed():
        # Its workers die with it; their exit is then read from their pidfds.
        async with aiovec.AsyncVectorEnv([PidEnv] * 2, backend="process",
                                         num_workers=2) as envs:
            await envs.reset(seed=0)
            workers = await worker_pids(envs)
            server = parent_pid(workers[0])
            os.kill(server, signal.SIGKILL)
            assert wait_for_exit([server, *workers], 10) == []
            try:
                await envs.step(np.ones(2, np.int64))
            except aiovec.WorkerDiedError as caught:
                assert "exit status unknown" in str(caught.exceptions[0].__cause__)
            else:
                raise AssertionError("the workers' deaths went unnoticed")
            await envs.reset(seed=1)
            await envs.step(np.ones(2, np.int64))
        print("server", loop, "ok")

    anyio.run(main, backend=loop)
    if start_method == "forkserver":
        anyio.run(fork_server_killed, backend=loop)
    with aiovec.VectorEnv(factories()[:2], backend="process", start_method=start_method) as envs:
        envs.reset(seed=0)
        envs.step(np.zeros(2, np.int64))
    print("sync", start_method, "ok")
""")


# asyncio and trio read the workers' sockets differently (asyncio from loop callbacks, trio by
# polling them between waits); uvloop reads them as asyncio does.
@pytest.mark.parametrize("start_method", ["forkserver", "spawn", "fork"])
@pytest.mark.parametrize("loop", sorted({name for name, _ in EVENT_LOOPS.values()}))
def test_descriptors_numbered_past_1024(loop: str, start_method: str, tmp_path: Path) -> None:
    """Stepping, first-ready results, ``num_stepping`` (which reads the sockets on trio), a
    worker's death and restart, a killed fork server, the sync shim and closing, all with every
    descriptor of the trainer's sockets, pipes and process handles numbered 1024 or more (and
    so those the workers inherit too)."""
    if resource.getrlimit(resource.RLIMIT_NOFILE)[1] < 1100:
        pytest.skip("this machine allows fewer than 1,100 open descriptors per process")
    done = subprocess.run([sys.executable, "-c", SCRIPT, loop, start_method, str(tmp_path)],
                          capture_output=True, text=True, timeout=120, check=False,
                          cwd=Path(__file__).parents[2])
    assert done.returncode == 0, done.stderr[-3000:]
    expected = [f"async {loop} {start_method} ok", f"sync {start_method} ok"]
    if start_method == "forkserver":
        expected.insert(1, f"server {loop} ok")
    assert done.stdout.splitlines() == expected, done.stdout


def test_readable_reports_data_and_hang_ups_and_waits_as_long_as_asked() -> None:
    """What ``select`` reported as readable: data waiting, or a writer gone (a read then
    returns b""); nothing before the timeout has passed."""
    read_end, write_end = os.pipe()
    try:
        assert readable([read_end]) == set()
        started = time.monotonic()
        assert readable([read_end], 0.05) == set()
        assert time.monotonic() - started >= 0.05
        os.write(write_end, b"x")
        assert readable([read_end, write_end], None) == {read_end}
        assert os.read(read_end, 1) == b"x"
        os.close(write_end)
        write_end = -1
        assert readable([read_end], None) == {read_end} and os.read(read_end, 1) == b""
    finally:
        os.close(read_end)
        if write_end >= 0:
            os.close(write_end)
