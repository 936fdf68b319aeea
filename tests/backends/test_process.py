"""The process backend: real worker processes, their deaths, and what they leave behind."""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import numpy as np
import pytest

import aiovec
from aiovec._core._selection import resolve_backend_name
from aiovec.testing import CountingEnv
from tests.backends_matrix import EVENT_LOOPS
from tests.envs import (
    FifoStepEnv,
    GateFileEnv,
    MisshapenEnv,
    OverlapProbeEnv,
    PidEnv,
    StubbornEnv,
    TextEnv,
    UnpicklableInfoEnv,
    close_while_a_step_hangs,
    wait_for_fifo,
    worker_pids,
)
from tests.leaks import (
    child_pids,
    mapped_blocks,
    parent_pid,
    shared_mappings,
    wait_for_exit,
)
from tests.soak import soak_length

pytestmark = pytest.mark.anyio

#: A dead worker is noticed from its socket and exit descriptor, not by a timeout (there is
#: none here): seconds at most, even on a loaded machine.
PROMPTLY = 5.0


async def test_closures_and_lambdas_are_env_factories(no_leaks: None) -> None:
    def make_factory(length: int) -> Any:
        return lambda: CountingEnv(episode_length=length)  # a closure over `length`

    factories = [make_factory(length) for length in (1, 2, 3, 4)]
    async with aiovec.AsyncVectorEnv(factories, backend="process", num_workers=2) as envs:
        assert "process backend, 2/2 workers alive" in repr(envs)
        assert await envs.get_attr("episode_length") == (1, 2, 3, 4)
        await envs.reset(seed=0)
        _, _, _, truncations, _ = await envs.step(np.zeros(4, np.int64))
        assert truncations.tolist() == [True, False, False, False]


async def test_worker_killed_while_idle_names_its_envs(no_leaks: None) -> None:
    async with aiovec.AsyncVectorEnv([PidEnv] * 4, backend="process", num_workers=2) as envs:
        await envs.reset()
        pids = await worker_pids(envs)
        assert pids[0] == pids[1] != pids[2] == pids[3]
        os.kill(pids[2], signal.SIGKILL)
        assert wait_for_exit([pids[2]], 10) == []
        started = time.monotonic()
        with pytest.raises(aiovec.WorkerDiedError) as caught:
            await envs.step(np.zeros(4, np.int64))
        assert time.monotonic() - started < PROMPTLY
        group = caught.value
        assert isinstance(group, aiovec.SubEnvErrorGroup)
        assert group.env_ids == (2, 3)
        cause = group.exceptions[0].__cause__
        assert isinstance(cause, aiovec.WorkerDiedError)
        assert cause.exitcode == -signal.SIGKILL and cause.env_ids == (2, 3)
        assert f"pid {pids[2]}" in str(cause) and "killed by SIGKILL" in str(cause)
        assert "1/2 workers alive" in repr(envs)
        # The dead worker's sub-envs keep failing clearly, in every kind of call.
        with pytest.raises(aiovec.WorkerDiedError, match=r"sub-env\(s\) 2, 3 failed"):
            await envs.call("_observation")


@pytest.mark.parametrize("anyio_backend", [pytest.param(EVENT_LOOPS[name], id=name)
                                           for name in ("asyncio", "uvloop")])
async def test_a_first_worker_known_dead_before_a_step_does_not_cut_the_others_short(
        anyio_backend: str, no_leaks: None) -> None:
    """Worker 0 is known dead when the step is sent: the request must still wait for worker
    1, whose sub-envs' results come back (it once stopped waiting at once, and the step
    failed on their missing replies with a TypeError). On asyncio, where a readiness
    callback notices a death between calls (trio notices it during the next call)."""
    async with aiovec.AsyncVectorEnv([PidEnv] * 4, backend="process", num_workers=2) as envs:
        await envs.reset()
        pids = await worker_pids(envs)
        os.kill(pids[0], signal.SIGKILL)
        assert wait_for_exit([pids[0]], 10) == []
        # Let the event loop's readiness callback read the dead worker's EOF: nothing to
        # wait on but its outcome.
        with anyio.fail_after(PROMPTLY):
            while "1/2 workers alive" not in repr(envs):  # noqa: ASYNC110
                await anyio.sleep(0.01)
        with pytest.raises(aiovec.WorkerDiedError) as caught:
            await envs.step(np.zeros(4, np.int64))
        assert caught.value.env_ids == (0, 1)  # type: ignore[attr-defined]
        obs, *_ = caught.value.partial_result  # type: ignore[attr-defined]
        assert obs[2:].tolist() == [[1, 1], [1, 1]]  # [steps, resets]: worker 1 stepped


async def test_worker_killed_mid_step(tmp_path: Path, no_leaks: None) -> None:
    fifo = tmp_path / "in-step"
    os.mkfifo(fifo)
    factories = [PidEnv, lambda: FifoStepEnv(str(fifo))]
    async with aiovec.AsyncVectorEnv(factories, backend="process", num_workers=2) as envs:
        await envs.reset()
        victim = (await worker_pids(envs))[1]
        failures: list[aiovec.WorkerDiedError] = []

        async def step() -> None:
            with pytest.raises(aiovec.WorkerDiedError) as caught:
                await envs.step(np.zeros(2, np.int64))
            failures.append(caught.value)

        with anyio.fail_after(60):
            async with anyio.create_task_group() as group:
                group.start_soon(step)
                # env 1 is inside step once it wrote to the FIFO
                assert await anyio.to_thread.run_sync(wait_for_fifo, str(fifo), 30)
                os.kill(victim, signal.SIGKILL)
                started = time.monotonic()
        assert time.monotonic() - started < PROMPTLY
        assert failures[0].env_ids == (1,)  # type: ignore[attr-defined]


PARENT_SCRIPT = """
import sys, anyio, numpy as np, aiovec
from tests.envs import PidEnv

async def main():
    envs = aiovec.AsyncVectorEnv([PidEnv] * 4, backend="process", num_workers=2)
    await envs.reset()
    print(*sorted(set(await envs.get_attr("pid"))), flush=True)
    await envs.step(np.zeros(4, np.int64))
    sys.stdin.read()  # wait to be killed

anyio.run(main)
"""


def test_workers_die_with_a_sigkilled_parent() -> None:
    """The workers and the fork server exit with their SIGKILLed parent, and the shared
    memory cannot outlive them: every process maps the same nameless memfd block and nothing
    under /dev/shm (the kernel frees the block with its last mapping; a named file would stay
    behind). Checked on these processes, not in /dev/shm, which other programs share."""
    parent = subprocess.Popen([sys.executable, "-c", PARENT_SCRIPT], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, cwd=Path(__file__).parents[2])
    try:
        assert parent.stdout is not None
        workers = [int(pid) for pid in parent.stdout.readline().split()]
        assert len(workers) == 2
        fork_servers = {parent_pid(pid) for pid in workers} - {parent.pid}
        assert len(fork_servers) == 1  # the default start method
        zygotes = {parent_pid(server) for server in fork_servers} - {parent.pid}
        assert len(zygotes) == 1  # forked from the zygote (on by default)
        blocks = [mapped_blocks(pid) for pid in [parent.pid, *workers]]
        assert len(blocks[0]) == 1 and blocks == [blocks[0]] * 3, blocks
        for pid in [parent.pid, *workers]:
            named = [path for _, path in shared_mappings(pid) if path.startswith("/dev/shm")]
            assert not named, named
        parent.kill()
        parent.wait(timeout=30)
        assert wait_for_exit(workers, 10.0) == [], "workers outlived their parent"
        assert wait_for_exit(sorted(fork_servers), 10.0) == [], "the fork server outlived it"
        assert wait_for_exit(sorted(zygotes), 10.0) == [], "the zygote outlived it"
    finally:
        parent.kill()
        parent.wait()
        assert parent.stdin is not None and parent.stdout is not None
        parent.stdin.close()
        parent.stdout.close()


def test_scripts_need_no_main_guard(tmp_path: Path) -> None:
    script = tmp_path / "unguarded.py"  # no `if __name__ == "__main__":` on purpose
    script.write_text(textwrap.dedent("""
        import anyio, gymnasium as gym, numpy as np, aiovec
        async def main():
            async with aiovec.AsyncVectorEnv([lambda: gym.make("CartPole-v1")] * 2,
                                             backend="process") as envs:
                obs, _ = await envs.reset(seed=0)
                print("ran", obs.shape)
        anyio.run(main)
    """))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("ran (2, 4)") == 1


# ~20 s on a quiet machine at full length (make soak; a quarter of the cycles in the suite:
# tests/soak.py): one loop (worker start and shutdown do not depend on it; the leak checks of
# the other tests run on every loop).
@pytest.mark.slow
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_fifty_cycles_and_a_crash_leak_nothing(anyio_backend: str,
                                                     no_leaks: None) -> None:
    for _ in range(soak_length(50)):
        async with aiovec.AsyncVectorEnv([CountingEnv] * 2, backend="process",
                                         num_workers=1) as envs:
            await envs.reset()
            await envs.step(np.zeros(2, np.int64))
    async with aiovec.AsyncVectorEnv([PidEnv] * 2, backend="process", num_workers=2) as envs:
        await envs.reset()
        os.kill((await worker_pids(envs))[0], signal.SIGKILL)
        with pytest.raises(aiovec.WorkerDiedError):
            await envs.step(np.zeros(2, np.int64))


async def test_unpicklable_results_and_exceptions_are_clear_errors(no_leaks: None) -> None:
    factories = [CountingEnv, UnpicklableInfoEnv, StubbornEnv]
    async with aiovec.AsyncVectorEnv(factories, backend="process", num_workers=1) as envs:
        await envs.reset()
        with pytest.raises(aiovec.SubEnvErrorGroup) as caught:
            await envs.step(np.zeros(3, np.int64))
        unpicklable, stubborn = caught.value.exceptions
        assert unpicklable.env_id == 1
        assert "SerializationError" in str(unpicklable) and "lock" in str(unpicklable)
        assert stubborn.env_id == 2 and "7: simulator refused" in str(stubborn)
        assert "could not be pickled" in str(stubborn)  # its class does not survive the trip
        # The worker's traceback reaches into the env's own frame, where it raised.
        assert 'raise StubbornError(7, "simulator refused")' in stubborn.remote_traceback


async def test_an_observation_that_does_not_fit_its_space_fails_only_its_sub_env(
        anyio_backend: str, no_leaks: None) -> None:
    """numpy would broadcast the short observation into its row of shared memory; the
    worker refuses it instead, and the sub-env fails by name, the others' results kept."""
    async with aiovec.AsyncVectorEnv([MisshapenEnv] * 4, backend="process",
                                     num_workers=2) as envs:
        await envs.reset(seed=0)
        with pytest.raises(aiovec.SubEnvErrorGroup) as caught:
            await envs.step(np.array([0, 1, 0, 0]))
        assert caught.value.env_ids == (1,)
        cause = caught.value.exceptions[0].__cause__
        assert isinstance(cause, ValueError) and "shape (1,)" in str(cause)
        obs, rewards, *_ = caught.value.partial_result
        assert obs.tolist() == [[1, 1], [0, 1], [1, 1], [1, 1]]
        assert rewards.tolist() == [0, 0, 0, 0]
        assert envs.unusable_envs == (1,)


async def test_spaces_shared_memory_cannot_hold_travel_pickled(no_leaks: None) -> None:
    async with aiovec.AsyncVectorEnv([TextEnv] * 3, backend="process", num_workers=2) as envs:
        obs, _ = await envs.reset(seed=0)
        assert obs == ("start",) * 3
        obs, rewards, *_ = await envs.step(("a", "bb", "ccc"))
        assert obs == ("astart", "bbstart", "cccstart") and rewards.tolist() == [1, 2, 3]


async def test_fork_start_method(no_leaks: None) -> None:
    async with aiovec.AsyncVectorEnv([PidEnv] * 2, backend="process",
                                     start_method="fork") as envs:
        obs, _ = await envs.reset()
        assert obs.tolist() == [[0, 1], [0, 1]]
        assert os.getpid() not in await worker_pids(envs)


async def test_cancelled_step_needs_a_reset_and_late_replies_are_dropped(
    tmp_path: Path, no_leaks: None,
) -> None:
    gate = tmp_path / "gate"
    factories = [functools.partial(GateFileEnv, str(gate))] * 4
    async with aiovec.AsyncVectorEnv(factories, backend="process", num_workers=2) as envs:
        await envs.reset(seed=3)
        actions = np.zeros((4, 2), np.float32)
        with anyio.CancelScope() as scope:
            scope.cancel()  # the replies wait for the gate: they come late
            await envs.step(actions)
        gate.touch()
        # The sub-envs stepped, but the caller never saw it: they are not stepped blindly.
        assert envs.unusable_envs == (0, 1, 2, 3)
        with pytest.raises(aiovec.ResetNeededError, match="0, 1, 2, 3 need a reset"):
            await envs.step(actions)
        _, infos = await envs.reset(seed=3)
        assert "elapsed" not in infos
        _, _, _, _, infos = await envs.step(actions)
        assert infos["elapsed"].tolist() == [1, 1, 1, 1]  # the late replies were not taken


async def test_max_concurrency_caps_the_sub_envs_executing_at_once(tmp_path: Path,
                                                                     no_leaks: None) -> None:
    """Gymnasium's meaning: at most ``max_concurrency`` sub-envs in ``step`` at any moment;
    a worker steps its sub-envs one at a time, so aiovec starts that many workers."""
    factories = [functools.partial(OverlapProbeEnv, str(tmp_path))] * 6
    async with aiovec.AsyncVectorEnv(factories, backend="process", max_concurrency=2) as envs:
        assert len(set(await envs.get_attr("pid"))) == 2
        await envs.reset(seed=0)
        for _ in range(20):
            await envs.step(np.zeros(6, dtype=np.int64))
        assert 1 <= max(await envs.get_attr("most")) <= 2
    with pytest.raises(ValueError, match="num_workers=3 exceeds max_concurrency=2"):
        aiovec.AsyncVectorEnv(factories, backend="process", num_workers=3, max_concurrency=2)


def test_gymnasium_and_sb3_keywords_reach_the_process_backend() -> None:
    """``max_concurrency`` (Gymnasium 1.4) picks the process backend as Gymnasium's own
    AsyncVectorEnv would run, ``start_method`` (SB3's SubprocVecEnv) is ``context``."""
    before = child_pids()
    envs = aiovec.VectorEnv([PidEnv] * 4, max_concurrency=2, start_method="spawn")
    try:
        assert envs.backend_name == "process"
        assert len(set(envs.get_attr("pid"))) == 2
        assert "start method 'spawn'" in repr(envs.async_env)
    finally:
        envs.close()
    assert wait_for_exit(sorted(child_pids() - before), PROMPTLY) == []
    with pytest.raises(ValueError, match="two names for the process backend's start method"):
        aiovec.VectorEnv([PidEnv] * 2, context="fork", start_method="spawn")


def test_process_options_are_checked() -> None:
    with pytest.raises(ValueError, match="num_workers applies to the process and ray backends"):
        aiovec.AsyncVectorEnv([CountingEnv], backend="thread", num_workers=2)
    with pytest.raises(ValueError, match="num_workers must be between 1 and 2"):
        aiovec.AsyncVectorEnv([CountingEnv] * 2, backend="process", num_workers=3)
    with pytest.raises(ValueError, match="unknown start method 'teleport'"):
        aiovec.AsyncVectorEnv([CountingEnv], backend="process", start_method="teleport")
    assert resolve_backend_name("auto", [CountingEnv] * 4, {"num_workers": 2}) == "process"
    expected = "process" if len(os.sched_getaffinity(0)) >= 2 else "thread"
    assert resolve_backend_name("auto", [CountingEnv] * 4, {}) == expected
    assert resolve_backend_name("auto", [CountingEnv], {}) == "thread"


def _exit_abruptly() -> CountingEnv:
    os._exit(3)


async def test_factory_that_kills_its_worker(no_leaks: None) -> None:
    envs = aiovec.AsyncVectorEnv([CountingEnv, _exit_abruptly], backend="process",
                                 num_workers=2)
    with pytest.raises(aiovec.WorkerDiedError) as caught:
        await envs.start()
    assert caught.value.env_ids == (1,)
    assert "exit code 3" in str(caught.value)
    assert envs.closed


async def test_factory_that_hangs_hits_the_start_deadline(tmp_path: Path, no_leaks: None) -> None:
    envs = aiovec.AsyncVectorEnv([CountingEnv, _hang_forever], backend="process",
                                 num_workers=2, close_timeout=0.5)
    with pytest.raises(aiovec.EnvTimeoutError) as caught:
        await envs.start(timeout=2)
    assert caught.value.env_ids == (1,)
    assert envs.closed


def _hang_forever() -> CountingEnv:
    import threading

    threading.Event().wait()
    raise AssertionError("unreachable")


async def test_unpicklable_factory_is_refused_clearly(no_leaks: None) -> None:
    import threading

    lock = threading.Lock()
    envs = aiovec.AsyncVectorEnv([lambda: CountingEnv() if lock else None], backend="process")
    with pytest.raises(TypeError, match="lock"):
        await envs.start()
    assert envs.closed


async def test_close_while_another_task_steps(tmp_path: Path, no_leaks: None) -> None:
    fifo = tmp_path / "in-step"
    os.mkfifo(fifo)
    envs = aiovec.AsyncVectorEnv([PidEnv, lambda: FifoStepEnv(str(fifo))], backend="process",
                                 num_workers=2, close_timeout=0.5)
    await envs.reset()
    await close_while_a_step_hangs(envs, str(fifo), np.zeros(2, np.int64))  # bounded


async def test_closing_when_every_worker_is_dead_is_prompt(no_leaks: None) -> None:
    envs = aiovec.AsyncVectorEnv([_exit_abruptly] * 2, backend="process", num_workers=2,
                                 close_timeout=60)
    with anyio.fail_after(20):  # far below close_timeout: nothing waits for dead workers
        with pytest.raises(aiovec.WorkerDiedError):
            await envs.start()
    async with aiovec.AsyncVectorEnv([PidEnv] * 2, backend="process", num_workers=2,
                                     close_timeout=60) as envs:
        await envs.reset()
        for pid in await worker_pids(envs):
            os.kill(pid, signal.SIGKILL)
        with anyio.fail_after(20), pytest.raises(aiovec.WorkerDiedError):
            await envs.step(np.zeros(2, np.int64))
    with anyio.fail_after(20):
        await envs.aclose()


@pytest.mark.parametrize("mode", ["NextStep", "SameStep"])
async def test_infos_merged_by_the_workers_equal_the_inline_backend(
        anyio_backend: Any, no_leaks: None, mode: str) -> None:
    """With 16 sub-envs per worker (``_worker.PACK_FROM``) each worker merges its sub-envs'
    infos and the parent splices them: the same rollout as the inline backend, bit for bit,
    infos (keys some sub-envs set and others not, final_info) included."""
    from aiovec._backends._process._worker import PACK_FROM
    from aiovec.testing import EpisodeEnv
    from tests.helpers import assert_identical

    num_envs = 2 * PACK_FROM
    records = []
    for options in ({"backend": "inline"}, {"backend": "process", "num_workers": 2}):
        async with aiovec.AsyncVectorEnv([functools.partial(EpisodeEnv, "box")] * num_envs,
                                         autoreset_mode=mode, **options) as envs:
            envs.action_space.seed(5)
            record: list[Any] = [await envs.reset(seed=11)]
            for _ in range(40):
                record.append(await envs.step(envs.action_space.sample()))
            records.append(record)
    assert any("final_info" in step[4] for step in records[0][1:]) or mode == "NextStep"
    assert any("_label" in step[4] and not step[4]["_label"].all() for step in records[0][1:])
    assert_identical(records[1], records[0])
