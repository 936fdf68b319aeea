"""A sub-env that raises, or whose result cannot travel, reaches the caller as a typed error
naming every failed sub-env, keeping the original exception and the remote traceback; the
healthy sub-envs' results ride along on the error."""

from __future__ import annotations

import signal

import numpy as np
import pytest

import aiovec
from aiovec.testing import Fault, FaultLedger, InjectedFault
from tests.backends_matrix import ALL_BACKENDS, LOCAL_BACKENDS, WORKER_BACKENDS
from tests.faults.envs import faulty, one_per_worker

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("backend", ALL_BACKENDS)
async def test_step_error_names_every_failed_env_and_keeps_the_rest(
    backend: str, no_leaks: None
) -> None:
    faults = {1: [Fault("raise", "step", at=2)], 3: [Fault("raise", "step", at=2)]}
    async with aiovec.AsyncVectorEnv(faulty(4, faults=faults, backend=backend),
                                     backend=backend) as envs:
        await envs.reset(seed=0)
        for action in (1.0, 2.0):
            await envs.step(np.full(4, action))
        with pytest.raises(aiovec.SubEnvErrorGroup) as caught:
            await envs.step(np.full(4, 3.0))
        group = caught.value
        assert isinstance(group, InjectedFault)  # the original type, for plain `except`
        assert group.env_ids == (1, 3) and group.operation == "step"
        for error, env_index in zip(group.exceptions, (1, 3)):
            assert isinstance(error, aiovec.SubEnvError)
            assert (error.env_id, error.phase) == (env_index, "step")
            assert isinstance(error.__cause__, InjectedFault)
            assert "in _strike" in error.remote_traceback
            assert "InjectedFault: sub-env" in error.remote_traceback
        # The healthy sub-envs stepped; their results are on the error, nothing is dropped.
        obs, rewards, terminations, truncations, _ = group.partial_result
        assert obs[:, 0].tolist() == [3, 2, 3, 2] and obs[:, 1].tolist() == [3, 2, 3, 2]
        assert rewards.tolist() == [3, 0, 3, 0]
        assert not terminations.any() and not truncations.any()
        assert envs.unusable_envs == (1, 3)
        with pytest.raises(aiovec.ResetNeededError, match=r"sub-env\(s\) 1, 3 need a reset"):
            await envs.step(np.full(4, 4.0))
        await envs.reset(options={"reset_mask": np.array([False, True, False, True])})
        obs, *_ = await envs.step(np.full(4, 4.0))
        assert obs[:, 0].tolist() == [4, 1, 4, 1]
        statistics = envs.statistics()
        assert statistics.errors == 2
        # A step that raised counts as a step taken.
        assert [entry.count for entry in statistics.step_latency] == [4, 4, 4, 4]


async def test_except_star_picks_the_sub_env_errors() -> None:
    faults = {0: [Fault("raise", "reset")]}
    async with aiovec.AsyncVectorEnv(faulty(2, faults=faults), backend="inline") as envs:
        caught = []
        try:
            await envs.reset()
        except aiovec.SubEnvErrorGroup as group:  # `except*` is tested on 3.11+ elsewhere
            matched, rest = group.split(aiovec.SubEnvError)
            caught = list(matched.exceptions) if matched else []
            assert rest is None
        assert [error.phase for error in caught] == ["reset"]


@pytest.mark.parametrize("backend", ALL_BACKENDS)
@pytest.mark.parametrize("phase", ["init", "reset", "close"])
async def test_errors_in_every_phase(backend: str, phase: str, no_leaks: None) -> None:
    faults = {1: [Fault("raise", phase)]}
    envs = aiovec.AsyncVectorEnv(faulty(2, faults=faults, backend=backend), backend=backend)
    expected_phase = "make" if phase == "init" else phase
    async def reset_then_close() -> None:  # the phase decides which of the two raises
        await envs.reset(seed=1)
        await envs.aclose()

    with pytest.raises(aiovec.SubEnvErrorGroup) as caught:
        await reset_then_close()
    assert caught.value.env_ids == (1,)
    assert caught.value.exceptions[0].phase == expected_phase  # type: ignore[attr-defined]
    assert isinstance(caught.value, InjectedFault)
    await envs.aclose()  # idempotent, whatever happened before
    assert envs.closed


@pytest.mark.parametrize("backend", ALL_BACKENDS)
async def test_unpicklable_info(backend: str, no_leaks: None) -> None:
    faults = {0: [Fault("unpicklable_info", "step")]}
    async with aiovec.AsyncVectorEnv(faulty(2, faults=faults, backend=backend),
                                     backend=backend) as envs:
        await envs.reset()
        if backend in WORKER_BACKENDS:  # it must cross a process boundary: a clear error
            with pytest.raises(aiovec.SubEnvErrorGroup) as caught:
                await envs.step(np.ones(2))
            assert isinstance(caught.value, aiovec.SerializationError)
            error = caught.value.exceptions[0]
            assert "could not be pickled" in str(error) and "'handle': <unlocked" in str(error)
            assert "Traceback" in error.remote_traceback  # type: ignore[attr-defined]
        else:  # in-process backends never pickle: the info is delivered as is
            *_, infos = await envs.step(np.ones(2))
            assert infos["_handle"].tolist() == [True, False]


@pytest.mark.parametrize("backend", ALL_BACKENDS)
async def test_unpicklable_observation(backend: str, no_leaks: None) -> None:
    faults = {0: [Fault("unpicklable_obs", "step")]}
    async with aiovec.AsyncVectorEnv(faulty(2, faults=faults, backend=backend),
                                     backend=backend) as envs:
        await envs.reset()
        # Copied into the batch (shared memory; on Ray, the actor's step block): fine.
        obs, *_ = await envs.step(np.ones(2))
        assert obs[:, 0].tolist() == [1, 1]


@pytest.mark.parametrize("backend", ALL_BACKENDS)
@pytest.mark.parametrize("phase", ["step", "reset"])
async def test_an_observation_that_does_not_fit_fails_its_sub_env_by_name(
        backend: str, phase: str, no_leaks: None) -> None:
    """An observation one element short of its space cannot join the batch: the sub-env
    fails by index with the shape in the message, keeps its previous observation, and the
    others' results ride along (before the fix, inline/thread/async raised a bare numpy
    ValueError for the whole call)."""
    faults = {2: [Fault("misshapen_obs", phase, at=1)]}
    async with aiovec.AsyncVectorEnv(faulty(4, faults=faults, backend=backend),
                                     backend=backend) as envs:
        await envs.reset(seed=0)
        before, *_ = await envs.step(np.full(4, 1.0))
        with pytest.raises(aiovec.SubEnvErrorGroup) as caught:
            await (envs.step(np.full(4, 2.0)) if phase == "step" else envs.reset(seed=1))
        group = caught.value
        assert group.env_ids == (2,) and group.operation == phase
        cause = group.exceptions[0].__cause__
        assert isinstance(cause, ValueError) and "shape (3,)" in str(cause), cause
        obs = group.partial_result[0]
        assert obs[2].tolist() == before[2].tolist()  # its previous observation, untouched
        if phase == "step":
            assert obs[[0, 1, 3], :2].tolist() == [[2, 2]] * 3
            assert group.partial_result[1].tolist() == [2, 2, 0, 2]
        else:
            assert obs[[0, 1, 3], :2].tolist() == [[0, 0]] * 3
        assert envs.unusable_envs == (2,)
        obs, _ = await envs.reset(seed=2)  # a reset mends it
        assert obs[:, :2].tolist() == [[0, 0]] * 4


@pytest.mark.parametrize("backend", LOCAL_BACKENDS)
async def test_an_observation_that_does_not_fit_keeps_its_row_of_out(
        backend: str, no_leaks: None) -> None:
    """The same through ``out=``, after steps into other buffers: the misfit's row of ``out``
    is its previous observation, whatever ``out`` held before."""
    faults = {1: [Fault("misshapen_obs", "step", at=2)]}
    async with aiovec.AsyncVectorEnv(faulty(3, faults=faults, backend=backend),
                                     backend=backend) as envs:
        await envs.reset(seed=0)
        await envs.step(np.full(3, 1.0), out=np.empty((3, 4)))
        before, *_ = await envs.step(np.full(3, 2.0), out=np.empty((3, 4)))
        out = np.full((3, 4), -1.0)
        with pytest.raises(aiovec.SubEnvErrorGroup) as caught:
            await envs.step(np.full(3, 3.0), out=out)
        assert caught.value.env_ids == (1,)
        assert caught.value.partial_result[0] is out
        assert out[1].tolist() == before[1].tolist()
        assert out[[0, 2], :2].tolist() == [[3, 3], [3, 3]]


@pytest.mark.parametrize("backend", LOCAL_BACKENDS)
async def test_a_first_ready_observation_that_does_not_fit_fails_its_sub_env(
        backend: str, no_leaks: None) -> None:
    """Through ``send``/``recv`` too: the misfit fails by index, its row keeps its previous
    observation, the batch's others ride along, and a reset of that sub-env mends it (before
    the fix, inline/thread/async raised numpy's error at every later ``recv``)."""
    faults = {1: [Fault("misshapen_obs", "step", at=1)]}
    async with aiovec.AsyncVectorEnv(faulty(3, faults=faults, backend=backend),
                                     backend=backend) as envs:
        await envs.reset(seed=0)
        before, *_ = await envs.step(np.full(3, 1.0))
        envs.send(np.full(3, 2.0))
        with pytest.raises(aiovec.SubEnvErrorGroup) as caught:
            await envs.recv(batch_size=3)
        assert caught.value.env_ids == (1,)
        cause = caught.value.exceptions[0].__cause__
        assert isinstance(cause, ValueError) and "shape (3,)" in str(cause), cause
        batch = caught.value.partial_result
        rows = {int(env_id): row for env_id, row in zip(batch.env_ids, batch.observations)}
        assert rows[1].tolist() == before[1].tolist()
        assert [rows[0][0], rows[2][0]] == [2, 2]
        assert envs.unusable_envs == (1,)
        await envs.reset(options={"reset_mask": np.array([False, True, False])})
        obs, *_ = await envs.step(np.full(3, 3.0))
        assert obs[:, 0].tolist() == [3, 1, 3]


@pytest.mark.parametrize(("kind", "exit_status", "description"),
                         [("exit", 3, "exit code 3"),
                          ("kill", -signal.SIGKILL, "killed by SIGKILL")])
async def test_worker_that_dies_mid_step(kind: str, exit_status: int, description: str,
                                         ledger: FaultLedger, no_leaks: None) -> None:
    faults = {2: [Fault(kind, "step", at=1)]}
    async with aiovec.AsyncVectorEnv(faulty(4, ledger, faults), backend="process",
                                     **one_per_worker("process", 4)) as envs:
        await envs.reset()
        await envs.step(np.ones(4))
        with pytest.raises(aiovec.WorkerDiedError) as caught:
            await envs.step(np.ones(4))
        assert caught.value.env_ids == (2,)  # type: ignore[attr-defined]
        cause = caught.value.exceptions[0].__cause__  # type: ignore[attr-defined]
        assert isinstance(cause, aiovec.WorkerDiedError) and cause.exitcode == exit_status
        assert description in str(cause)
        assert ledger.events(2)[-1] == f"fault {kind} step"
        obs = caught.value.partial_result[0]  # type: ignore[attr-defined]
        assert obs[:, 0].tolist() == [2, 2, 1, 2]
        # reset starts a new worker for sub-env 2 and makes it afresh
        obs, _ = await envs.reset(options={"reset_mask": np.array([False, False, True, False])})
        assert obs[2, 3] == 1  # instance 1 of sub-env 2
        assert "4/4 workers alive" in repr(envs)
        obs, *_ = await envs.step(np.ones(4))
        assert obs[:, 0].tolist() == [3, 3, 1, 3]
        assert envs.statistics().restarts == 1


@pytest.mark.parametrize("backend", WORKER_BACKENDS)
@pytest.mark.hangs_on_purpose(
    "a sub-env hangs for good: with a parent worker (AIOVEC_PARENT_WORKER=1), its thread "
    "is abandoned at the deadline")
async def test_a_death_beside_a_timeout_is_reported_as_a_death(
        backend: str, ledger: FaultLedger, no_leaks: None) -> None:
    """One worker dies and another sub-env hangs in the same step: the dead one's error is its
    death, and only the hung one missed the deadline (the death had been reported as a
    timeout: its failure waited for the worker's exit status until the deadline struck)."""
    faults = {0: [Fault("exit", "step", at=1)], 2: [Fault("hang", "step", at=1)]}
    async with aiovec.AsyncVectorEnv(faulty(3, ledger, faults, backend=backend), backend=backend,
                                     timeout=2.0, **one_per_worker(backend, 3)) as envs:
        await envs.reset(seed=0)
        await envs.step(np.ones(3))
        with pytest.raises(aiovec.SubEnvErrorGroup) as caught:
            await envs.step(np.ones(3))
        assert caught.value.env_ids == (0, 2)
        died, late = caught.value.exceptions
        assert isinstance(died.__cause__, aiovec.WorkerDiedError), died
        assert "timed out" not in str(died)
        assert isinstance(late.__cause__, aiovec.EnvTimeoutError), late
        assert ledger.events(0)[-1] == "fault exit step"
        obs = caught.value.partial_result[0]
        assert obs[1, 0] == 2  # the healthy sub-env's step is kept
        assert envs.unusable_envs == (0, 2)
        statistics = envs.statistics()
        assert (statistics.timeouts, statistics.errors) == (1, 1)
        obs, _ = await envs.reset(options={"reset_mask": np.array([True, False, True])})
        obs, *_ = await envs.step(np.ones(3))
        assert obs[:, 0].tolist() == [1, 3, 1]
        # Neither the step its worker died in nor the one past the deadline is counted.
        assert [entry.count for entry in envs.statistics().step_latency] == [2, 3, 2]


@pytest.mark.parametrize("backend", ALL_BACKENDS)
async def test_call_errors_keep_the_healthy_results(backend: str, no_leaks: None) -> None:
    faults = {0: [Fault("unpicklable_obs", "close")], 1: [Fault("raise", "close")]}
    async with aiovec.AsyncVectorEnv(faulty(3, faults=faults, backend=backend),
                                     backend=backend) as envs:
        with pytest.raises(aiovec.SubEnvErrorGroup) as caught:
            await envs.call("_strike", "close")  # returns the fault kind due, if any
        assert isinstance(caught.value, InjectedFault)
        assert caught.value.env_ids == (1,) and caught.value.operation == "call"
        assert caught.value.partial_result == ("unpicklable_obs", None, None)
        assert envs.unusable_envs == (0, 1, 2)  # never reset; a failed call changes nothing
