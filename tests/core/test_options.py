"""The vector envs' keywords are declared once (``_core/_options.py``): each constructor takes
exactly its declared set, with the declared defaults, shown by name to ``inspect``; a keyword
outside its set is refused; every keyword and position that worked before still does."""

from __future__ import annotations

import inspect
from typing import Any

import anyio
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

import aiovec
from aiovec._core._options import (
    DEFAULTS,
    AsyncVectorOptions,
    ParallelOptions,
    VectorOptions,
)
from aiovec.testing import CountingEnv
from tests.multiagent.envs import Arena

CONSTRUCTORS = [(aiovec.AsyncVectorEnv, AsyncVectorOptions), (aiovec.VectorEnv, VectorOptions),
                (aiovec.AsyncParallelVectorEnv, ParallelOptions),
                (aiovec.ParallelVectorEnv, ParallelOptions)]

#: The keywords each constructor took before they were declared in one place, with their
#: defaults (and ``limits``, ``episode_timeout`` and ``episode_options``, added since): none
#: may go away or change its default unnoticed.
CORE_KEYWORDS = {
    "backend": "auto", "autoreset_mode": AutoresetMode.NEXT_STEP, "copy": True,
    "timeout": None, "observation_mode": "same", "close_timeout": 10.0, "restart": None,
    "batch_size": None, "max_concurrency": None, "num_workers": None, "start_method": None,
    "parent_worker": None, "address": None, "actor_options": None, "validate_actions": False,
    "max_in_flight": None, "limits": None, "episode_timeout": None, "episode_options": None,
}
LEFT_OUT_BY_MULTI_AGENT = {"observation_mode", "batch_size", "validate_actions", "limits",
                           "episode_timeout", "episode_options"}
#: The sync shim's leading parameters, in Gymnasium's ``AsyncVectorEnv`` order.
GYMNASIUM_POSITIONS = ["env_fns", "shared_memory", "copy", "context", "daemon", "worker",
                       "observation_mode", "autoreset_mode"]


def keywords(constructor: Any) -> dict[str, Any]:
    return {name: parameter.default
            for name, parameter in inspect.signature(constructor).parameters.items()
            if name != "env_fns"}


def test_every_declared_keyword_has_one_default() -> None:
    assert set(DEFAULTS) == set(AsyncVectorOptions.__optional_keys__)
    assert set(ParallelOptions.__optional_keys__) <= set(AsyncVectorOptions.__optional_keys__)
    assert set(VectorOptions.__optional_keys__) <= set(AsyncVectorOptions.__optional_keys__)


@pytest.mark.parametrize(("constructor", "options"), CONSTRUCTORS,
                         ids=[constructor.__name__ for constructor, _ in CONSTRUCTORS])
def test_each_constructor_shows_its_declared_keywords(constructor: Any, options: Any) -> None:
    parameters = inspect.signature(constructor).parameters
    declared = [name for name, parameter in parameters.items()
                if parameter.kind is parameter.KEYWORD_ONLY]
    assert declared == list(options.__annotations__)
    assert not any(parameter.kind is parameter.VAR_KEYWORD for parameter in parameters.values())
    taken = keywords(constructor)
    assert {name: taken[name] for name in declared} == {name: DEFAULTS[name]  # type: ignore[literal-required]
                                                         for name in declared}


def test_every_keyword_of_before_is_taken_with_its_default() -> None:
    from aiovec._make import _VECTOR_OPTIONS, VECTOR_KEYWORDS

    assert keywords(aiovec.AsyncVectorEnv) == CORE_KEYWORDS
    assert set(CORE_KEYWORDS) == VECTOR_KEYWORDS <= _VECTOR_OPTIONS
    shim = keywords(aiovec.VectorEnv)
    assert {name: shim[name] for name in CORE_KEYWORDS} == CORE_KEYWORDS
    assert list(inspect.signature(aiovec.VectorEnv).parameters)[:8] == GYMNASIUM_POSITIONS
    for constructor in (aiovec.AsyncParallelVectorEnv, aiovec.ParallelVectorEnv):
        expected = {name: default for name, default in CORE_KEYWORDS.items()
                    if name not in LEFT_OUT_BY_MULTI_AGENT}
        assert keywords(constructor) == expected


@pytest.mark.parametrize(("constructor", "options"), CONSTRUCTORS,
                         ids=[constructor.__name__ for constructor, _ in CONSTRUCTORS])
def test_a_keyword_outside_the_set_is_refused(constructor: Any, options: Any) -> None:
    elsewhere = (set(AsyncVectorOptions.__optional_keys__) - set(options.__optional_keys__)
                 - set(inspect.signature(constructor).parameters))
    outside = ["no_such_keyword", *sorted(elsewhere)]
    for name in outside:
        with pytest.raises(TypeError, match=f"unexpected keyword argument '{name}'"):
            constructor([CountingEnv], **{name: None})


def test_the_keywords_reach_the_async_core() -> None:
    given: dict[str, Any] = {"backend": "inline", "timeout": 2, "close_timeout": 5,
                             "restart": 3, "batch_size": 1, "validate_actions": True,
                             "max_concurrency": 2, "max_in_flight": 1}
    envs = aiovec.AsyncVectorEnv([CountingEnv] * 2, copy=False,
                                 autoreset_mode="SameStep", **given)
    with aiovec.VectorEnv([CountingEnv] * 2, True, False, None, True, None, "same",
                          AutoresetMode.SAME_STEP, **given) as shim:
        for core in (envs, shim.async_env):
            assert (core.timeout, core.close_timeout, core.batch_size) == (2.0, 5.0, 1)
            assert core.max_in_flight == 1
            assert core.validate_actions and not core.copy
            assert core.autoreset_mode is AutoresetMode.SAME_STEP
            assert core.restart_policy is not None and core.restart_policy.max_restarts == 3
            assert core.backend_name == "inline"
        shim.reset(seed=0)
        with pytest.raises(ValueError, match="outside"):  # validate_actions reached it
            shim.step(np.array([5, 0]))
    multi = aiovec.AsyncParallelVectorEnv([Arena], backend="inline", timeout=2, copy=False,
                                          autoreset_mode=AutoresetMode.DISABLED)
    core = multi._env
    assert (core.timeout, core.copy, core.autoreset_mode) == (2.0, False,
                                                              AutoresetMode.DISABLED)


def test_the_settable_options_reach_the_engine_and_are_checked() -> None:
    # timeout, copy and validate_actions may be set after construction (validate_actions
    # until start, when the checks are set up); a bad timeout is refused as the
    # constructor refuses it, and autoreset_mode cannot change under the backends.
    with aiovec.VectorEnv([CountingEnv] * 2, backend="inline") as shim:
        core = shim.async_env
        core.timeout = 3
        assert core.timeout == 3.0 and core._engine.timeout == 3.0
        with pytest.raises(ValueError, match="timeout"):
            core.timeout = -1
        assert core.timeout == 3.0
        core.copy = False
        shim.reset(seed=0)
        again, *_ = shim.step(np.array([1, 1]))
        assert again is core._engine.results.observations  # not copied: the batch itself
        with pytest.raises(AttributeError):
            core.autoreset_mode = AutoresetMode.DISABLED  # type: ignore[misc]

    async def set_before_start() -> None:
        envs = aiovec.AsyncVectorEnv([CountingEnv] * 2, backend="inline")
        envs.validate_actions = True
        async with envs:
            await envs.reset(seed=0)
            with pytest.raises(ValueError, match="outside"):
                await envs.step(np.array([5, 0]))

    anyio.run(set_before_start)
