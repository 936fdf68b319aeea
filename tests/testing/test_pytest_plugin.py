"""aiovec's pytest plugin, as a user enables it: a real pytest session in a subprocess (its
conftest has the one line), under pytest-asyncio and under anyio's plugin on asyncio and trio.
Vector envs the tests leave open are closed at teardown; a leak fails the test that caused it.
"""

from __future__ import annotations

import pytest

CONFTEST = 'pytest_plugins = ["aiovec.testing.pytest_plugin"]\n'

TESTS = '''
import functools
import gymnasium as gym
import numpy as np
import pytest
import aiovec

MARK = {mark}
CARTPOLES = [functools.partial(gym.make, "CartPole-v1")] * 2
LEAKED = []


@MARK
async def test_what_it_makes_is_closed_for_it(aiovec_vector_envs):
    envs = aiovec_vector_envs(CARTPOLES, backend="process")
    obs, _ = await envs.reset(seed=0)
    assert obs.shape == (2, 4)
    threads = aiovec_vector_envs(CARTPOLES, backend="thread")
    await threads.reset(seed=0)


@MARK
async def test_what_it_closes_itself_is_fine_too(aiovec_vector_envs):
    async with aiovec_vector_envs(CARTPOLES, backend="process") as envs:
        obs, _ = await envs.reset(seed=1)
        await envs.step(np.zeros(2, np.int64))


def test_the_sync_shim(aiovec_vector_envs):
    envs = aiovec_vector_envs.sync(CARTPOLES, backend="process")
    obs, _ = envs.reset(seed=0)
    assert obs.shape == (2, 4)


@MARK
async def test_a_leak_fails_the_test(aiovec_no_leaks):
    envs = aiovec.AsyncVectorEnv(CARTPOLES, backend="process")
    await envs.reset(seed=0)
    LEAKED.append(envs)  # never closed, still referenced: its workers keep running
'''


@pytest.mark.parametrize(("plugin", "mark", "options"), [
    ("asyncio", "pytest.mark.asyncio", ["-p", "asyncio", "-o", "asyncio_mode=strict",
                                        "-o", "asyncio_default_fixture_loop_scope=function"]),
    # Whole pytest sessions of seconds each: the quick tier keeps the first.
    pytest.param("anyio-asyncio", "pytest.mark.anyio", ["-p", "anyio", "-p", "no:asyncio"],
                 marks=pytest.mark.slow),
    pytest.param("anyio-trio", "pytest.mark.anyio", ["-p", "anyio", "-p", "no:asyncio"],
                 marks=pytest.mark.slow),
])
def test_the_fixtures_under_each_plugin(pytester: pytest.Pytester,
                                        monkeypatch: pytest.MonkeyPatch, plugin: str,
                                        mark: str, options: list[str]) -> None:
    conftest = CONFTEST
    if plugin.startswith("anyio"):
        conftest += ("import pytest\n\n@pytest.fixture\ndef anyio_backend():\n"
                     f"    return {plugin.split('-')[1]!r}\n")
    pytester.makeconftest(conftest)
    pytester.makepyfile(test_user=TESTS.format(mark=mark))
    monkeypatch.setenv("AIOVEC_LEAK_TIMEOUT", "2")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-W", "ignore", *options,
                                           "-o", "addopts=", timeout=240)
    result.assert_outcomes(passed=4, errors=1)
    # The leaked vector env is torn down at interpreter exit, without an error.
    assert "Exception ignored" not in result.stderr.str(), result.stderr.str()
    result.stdout.fnmatch_lines([
        "*ERROR at teardown of test_a_leak_fails_the_test*",
        "*aiovec left things behind: processes still running*",
    ])
