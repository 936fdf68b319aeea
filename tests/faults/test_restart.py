"""The restart policy: a sub-env that raises, hangs or dies is recreated and comes back in the
same batch with its episode cut (``truncated``) and ``infos["restart"]`` saying why."""

from __future__ import annotations

import numpy as np
import pytest

import aiovec
from aiovec.testing import Fault, FaultLedger
from tests.backends_matrix import ALL_BACKENDS, DEADLINE_BACKENDS
from tests.faults.envs import faulty, one_per_worker

pytestmark = pytest.mark.anyio

FAST = aiovec.RestartPolicy(backoff=0.01)


@pytest.mark.parametrize("backend", ALL_BACKENDS)
@pytest.mark.parametrize("mode", ["NextStep", "SameStep", "Disabled"])
async def test_raising_env_comes_back_in_the_same_batch(
    backend: str, mode: str, ledger: FaultLedger, no_leaks: None
) -> None:
    faults = {1: [Fault("raise", "step", at=2, instance=0)]}
    async with aiovec.AsyncVectorEnv(faulty(3, ledger, faults, backend=backend),
                                     backend=backend, restart=FAST,
                                     autoreset_mode=mode) as envs:
        await envs.reset(seed=0)
        await envs.step(np.full(3, 1.0))
        previous, *_ = await envs.step(np.full(3, 2.0))
        obs, rewards, terminations, truncations, infos = await envs.step(np.full(3, 3.0))
        assert rewards.tolist() == [3, 0, 3]
        assert terminations.tolist() == [False] * 3
        assert truncations.tolist() == [False, True, False]  # the episode is cut
        assert infos["_restart"].tolist() == [False, True, False]
        assert "InjectedFault: sub-env 1 failed in step" in infos["restart"][1]
        assert obs[[0, 2], 0].tolist() == [3, 3]
        if mode == "SameStep":  # a new episode already; the old one's last obs in final_obs
            assert obs[1].tolist()[::3] == [0, 1]  # episode step 0 of instance 1
            assert infos["final_obs"][1].tolist() == previous[1].tolist()
        else:  # the last observation stands; the new episode starts on the next step
            assert obs[1].tolist() == previous[1].tolist()
        if mode == "Disabled":
            assert envs.unusable_envs == (1,)
            await envs.reset(options={"reset_mask": np.array([False, True, False])})
        obs, *_ = await envs.step(np.full(3, 4.0))
        expected = 1 if mode == "SameStep" or mode == "Disabled" else 0
        assert obs[1, 0] == expected and obs[1, 3] == 1
        statistics = envs.statistics()
        assert (statistics.restarts, statistics.errors, statistics.steps) == (1, 1, 4)
        assert ledger.count(1, "make") == 2 and ledger.faults([0, 1, 2]) == 1


# Hangs on every backend with deadlines (DEADLINE_BACKENDS) but Ray, whose hangs restart in
# tests/faults/test_first_ready.py; deaths where a sub-env has a process of its own to end.
@pytest.mark.parametrize(("backend", "kind"), [("thread", "hang"), ("process", "hang"),
                                               ("async", "hang"), ("process", "exit"),
                                               ("process", "kill")])
@pytest.mark.hangs_on_purpose(
    "a sub-env hangs for good: its thread is abandoned at the deadline and restarted")
async def test_hung_or_dead_env_is_restarted(backend: str, kind: str, ledger: FaultLedger,
                                             no_leaks: None) -> None:
    faults = {0: [Fault(kind, "step", at=1, instance=0)]}
    async with aiovec.AsyncVectorEnv(faulty(2, ledger, faults, backend=backend),
                                     backend=backend, restart=FAST,
                                     timeout=0.5, **one_per_worker(backend, 2)) as envs:
        await envs.reset()
        await envs.step(np.ones(2))
        obs, rewards, _, truncations, infos = await envs.step(np.full(2, 2.0))
        assert truncations.tolist() == [True, False] and rewards.tolist() == [0, 2]
        reason = infos["restart"][0]
        assert ("timed out" in reason) if kind == "hang" else ("died" in reason)
        obs, *_ = await envs.step(np.full(2, 3.0))
        assert obs.tolist()[0][::3] == [0, 1] and obs[1, 0] == 3  # reset step of instance 1
        statistics = envs.statistics()
        assert statistics.restarts == 1
        assert statistics.timeouts == (1 if kind == "hang" else 0)
        assert statistics.abandoned_threads == (1 if backend == "thread" else 0)


@pytest.mark.parametrize("backend", ALL_BACKENDS)
async def test_failed_restart_is_retried(backend: str, ledger: FaultLedger,
                                         no_leaks: None) -> None:
    faults = {0: [Fault("raise", "step", instance=0), Fault("raise", "init", instance=1)]}
    async with aiovec.AsyncVectorEnv(faulty(2, ledger, faults, backend=backend), backend=backend,
                                     restart=FAST) as envs:
        await envs.reset()
        obs, _, _, truncations, infos = await envs.step(np.ones(2))
        assert truncations.tolist() == [True, False]
        assert "failed in step" in infos["restart"][0]  # the original reason is reported
        assert envs.statistics().restarts == 2  # instance 1 failed to make, instance 2 is up
        assert ledger.count(0, "make") == 2 and ledger.faults([0]) == 2
        obs, *_ = await envs.step(np.ones(2))
        assert obs[0, 3] == 2


@pytest.mark.parametrize("backend", ALL_BACKENDS)
async def test_out_of_restarts_raises(backend: str, ledger: FaultLedger,
                                      no_leaks: None) -> None:
    faults = {1: [Fault("raise", "step")]}  # every instance fails its first step
    async with aiovec.AsyncVectorEnv(faulty(2, ledger, faults, backend=backend), backend=backend,
                                     restart=aiovec.RestartPolicy(max_restarts=1,
                                                                  backoff=0.01)) as envs:
        await envs.reset()
        *_, infos = await envs.step(np.ones(2))
        assert infos["_restart"].tolist() == [False, True]
        await envs.step(np.ones(2))  # the reset step of the new instance
        with pytest.raises(aiovec.SubEnvErrorGroup) as caught:
            await envs.step(np.ones(2))
        assert caught.value.env_ids == (1,)
        assert envs.unusable_envs == (1,)
        assert envs.statistics().restarts == 1


@pytest.mark.parametrize("backend", ALL_BACKENDS)
async def test_failed_reset_is_restarted_with_its_seed(backend: str, ledger: FaultLedger,
                                                       no_leaks: None) -> None:
    faults = {1: [Fault("raise", "reset", at=1, instance=0)]}
    async with aiovec.AsyncVectorEnv(faulty(2, ledger, faults, backend=backend), backend=backend,
                                     restart=FAST) as envs:
        first, _ = await envs.reset(seed=7)
        obs, infos = await envs.reset(seed=7)
        assert infos["_restart"].tolist() == [False, True]
        assert obs[:, 2].tolist() == first[:, 2].tolist()  # same seed, same draw
        assert obs[:, 3].tolist() == [0, 1]


@pytest.mark.parametrize("backend", ALL_BACKENDS)
@pytest.mark.parametrize("mode", ["NextStep", "SameStep"])
async def test_rare_faults_never_use_up_the_restarts(backend: str, mode: str,
                                                     ledger: FaultLedger,
                                                     no_leaks: None) -> None:
    """``max_restarts`` counts restarts in a row: every instance of sub-env 1 fails its second
    step, so it completes a step between any two restarts and is restarted past the cap."""
    faults = {1: [Fault("raise", "step", at=1)]}
    policy = aiovec.RestartPolicy(max_restarts=1, backoff=0.0)
    async with aiovec.AsyncVectorEnv(faulty(2, ledger, faults, backend=backend),
                                     backend=backend, restart=policy,
                                     autoreset_mode=mode) as envs:
        await envs.reset(seed=0)
        restarted = 0
        for _ in range(12):
            *_, infos = await envs.step(np.ones(2))
            restarted += int("restart" in infos and infos["_restart"][1])
        assert restarted == envs.statistics().restarts >= 3
        assert ledger.faults([1]) == restarted


@pytest.mark.parametrize("backend", ALL_BACKENDS)
@pytest.mark.parametrize("mode", ["NextStep", "SameStep"])
async def test_past_the_cap_the_error_names_it(backend: str, mode: str, ledger: FaultLedger,
                                               no_leaks: None) -> None:
    """Every instance of sub-env 1 fails its first step: restarted twice in a row, then the
    sub-env's own error is raised, with a note naming the cap and its value. (In next-step
    mode each restart's next step is the new episode's reset, not a step of its own.)"""
    faults = {1: [Fault("raise", "step")]}
    policy = aiovec.RestartPolicy(max_restarts=2, backoff=0.0)
    async with aiovec.AsyncVectorEnv(faulty(2, ledger, faults, backend=backend),
                                     backend=backend, restart=policy,
                                     autoreset_mode=mode) as envs:
        await envs.reset(seed=0)
        for _ in range(2 if mode == "SameStep" else 4):  # fail, (reset,) fail, (reset)
            await envs.step(np.ones(2))
        with pytest.raises(aiovec.SubEnvErrorGroup) as caught:
            await envs.step(np.ones(2))
        assert caught.value.env_ids == (1,)
        assert "InjectedFault" in str(caught.value.exceptions[0])
        notes = getattr(caught.value, "__notes__", [])
        assert len(notes) == 1
        assert "RestartPolicy.max_restarts=2" in notes[0] and "in a row" in notes[0]
        assert envs.statistics().restarts == 2 and ledger.faults([1]) == 3
        assert envs.unusable_envs == (1,)


@pytest.mark.parametrize("backend", DEADLINE_BACKENDS)
async def test_restart_counts_per_env_and_backoff_is_validated(backend: str) -> None:
    with pytest.raises(ValueError, match="backoff_factor"):
        aiovec.RestartPolicy(backoff_factor=0.5)
    with pytest.raises(ValueError, match="max_restarts"):
        aiovec.RestartPolicy(max_restarts=-1)
    with pytest.raises(TypeError, match="restart must be"):
        aiovec.AsyncVectorEnv(faulty(1, backend=backend),
                              backend=backend, restart="always")  # type: ignore[arg-type]
    policy = aiovec.RestartPolicy(backoff=0.5, backoff_factor=2, max_backoff=1.5)
    assert [policy.delay(attempt) for attempt in (1, 2, 3, 4)] == [0, 0.5, 1.0, 1.5]
    assert aiovec.AsyncVectorEnv(faulty(1, backend=backend),
                                 backend=backend, restart=3).restart_policy == \
        aiovec.RestartPolicy(max_restarts=3)


@pytest.mark.parametrize("mode", ["NextStep", "SameStep"])
async def test_sub_envs_sharing_a_dead_worker_restart_together(
    mode: str, ledger: FaultLedger, no_leaks: None
) -> None:
    faults = {1: [Fault("kill", "step", at=1, instance=0)]}
    async with aiovec.AsyncVectorEnv(faulty(4, ledger, faults), backend="process",
                                     num_workers=2, restart=FAST, autoreset_mode=mode) as envs:
        await envs.reset()
        await envs.step(np.ones(4))
        obs, _, _, truncations, infos = await envs.step(np.full(4, 2.0))
        assert truncations.tolist() == [True, True, False, False]
        assert "died" in infos["restart"][1] and "died" in infos["restart"][0]
        assert envs.unusable_envs == ()
        obs, *_ = await envs.step(np.full(4, 3.0))
        assert obs[:, 3].tolist() == [1, 1, 0, 0]  # both made afresh, stepping on
        assert envs.statistics().restarts == 2
