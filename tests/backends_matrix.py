"""The backends and event loops the tests run on, defined once: each named subset of backends
says why it is that subset.

Use them as ``pytest.mark.parametrize("backend", NAME)``. Every async test runs on each of
``EVENT_LOOPS`` (the ``anyio_backend`` fixture of tests/conftest.py) unless it parametrizes
``anyio_backend`` itself. A test on ``backend="ray"`` joins the session's shared Ray runtime
and runs in the pytest-xdist worker of the other Ray tests; its trio and uvloop variants run
only in the Ray backend's own test files (tests/conftest.py, ``RAY_ON_EVERY_LOOP``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from aiovec.testing import AsyncAdapter

#: The event loops, by test id: what anyio's pytest plugin takes as ``anyio_backend``.
EVENT_LOOPS: dict[str, tuple[str, dict[str, Any]]] = {
    "asyncio": ("asyncio", {}),
    "uvloop": ("asyncio", {"use_uvloop": True}),
    "trio": ("trio", {}),
}

#: Every backend.
ALL_BACKENDS = ["inline", "thread", "process", "async", "ray"]

#: Every backend but Ray, for checks of one local mechanism on each backend that has it; the
#: Ray variants live in tests/backends/test_ray*.py (a Ray actor takes seconds to start and
#: each round trip a millisecond, and every Ray test shares one xdist worker).
LOCAL_BACKENDS = ["inline", "thread", "process", "async"]

#: The backends that host plain (synchronous) Gymnasium or PettingZoo envs as they are:
#: ``backend="async"`` hosts coroutine envs only (``aiovec.AsyncEnv``), and
#: ``AsyncParallelVectorEnv`` refuses it (PettingZoo's envs are synchronous).
SYNC_BACKENDS = ["inline", "thread", "process", "ray"]

#: Plain envs on this machine: the API surface (core, the Gymnasium shim, multi-agent,
#: statistics). The async backend's API is tested in tests/backends/test_async.py, Ray's in
#: tests/backends/test_ray.py; the rollouts of all five are compared in
#: tests/core/test_differential.py.
LOCAL_SYNC_BACKENDS = ["inline", "thread", "process"]

#: Backends on which a sub-env can miss a deadline: inline sub-envs block the loop instead
#: (nothing runs while one works, so no deadline can fire). On the async backend a hang is a
#: coroutine awaiting forever, cancelled at the deadline.
DEADLINE_BACKENDS = ["thread", "process", "async", "ray"]

#: ``DEADLINE_BACKENDS`` but Ray, for the same reason as ``LOCAL_BACKENDS``. Also the
#: backends that leave the event loop free while sub-envs work (inline steps them on the
#: loop by design; tests/core/test_loop_citizenship.py).
LOCAL_DEADLINE_BACKENDS = ["thread", "process", "async"]

#: In-process backends whose sub-envs work concurrently, beside the loop: a slow sub-env is a
#: sleeping thread or task (no worker process to start), and one given up on stays in this
#: process (an abandoned thread, a cancelled task) and must hand back what it held.
CONCURRENT_IN_PROCESS_BACKENDS = ["thread", "async"]

#: Backends with worker processes or actors (``num_workers``): a fault that ends the process
#: hosting a sub-env hits every sub-env of that worker.
WORKER_BACKENDS = ["process", "ray"]

#: One backend in the test's process and one across a process boundary (pickling, a worker):
#: for checks of the layers above the backend (multi-agent seeding and restart bookkeeping),
#: which every backend feeds the same way.
IN_AND_OUT_OF_PROCESS = ["inline", "process"]


def slow_on(backends: Sequence[str], *slow: str) -> list[Any]:
    """``backends`` for ``parametrize``, the variants on the ``slow`` ones marked ``slow``
    (long rollouts pay a worker round trip per step): the quick tier (``make check``) leaves
    them out, ``make unit`` runs them. Ray's variants are slow anyway (tests/conftest.py)."""
    import pytest  # here, not above: worker processes import this module (tests.faults.envs)

    return [pytest.param(name, marks=pytest.mark.slow) if name in slow else name
            for name in backends]


def for_backend(backend: str, factories: Sequence[Callable[[], Any]]) -> list[Any]:
    """The factories of plain envs as ``backend`` hosts them: behind ``AsyncAdapter`` (a
    coroutine env) on the async backend, as they are on every other."""
    if backend != "async":
        return list(factories)
    return [functools.partial(AsyncAdapter, factory) for factory in factories]
