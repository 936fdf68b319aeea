"""Shared fixtures: every async test runs on asyncio, asyncio + uvloop and trio (a Ray
variant on trio and uvloop only in the Ray backend's own tests: ``RAY_ON_EVERY_LOOP``), each
loop against every backend, every value of every parameter met (tests/variants.py)."""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import AsyncIterator, Generator, Iterator
from typing import Any

import pytest

from tests import variants
from tests.backends_matrix import EVENT_LOOPS
from tests.leaks import (
    child_pids,
    end_abandoned_parent_workers,
    helper_fds,
    mapped_blocks,
    open_fds,
    wait_for_exit,
)
from tests.ray_runtime import actor_pids, ensure_ray

# `except*` is a syntax error before 3.11, so that module is not even collected there.
collect_ignore = ["core/test_except_star.py"] if sys.version_info < (3, 11) else []
# RLlib pins its own Gymnasium, so tests/rllib runs in a venv of its own: `make rllib`, which
# sets AIOVEC_RLLIB_TESTS=1 (part of `make test`).
if os.environ.get("AIOVEC_RLLIB_TESTS") != "1":
    collect_ignore.append("rllib")
# The agent frameworks' tests need them installed: `make agents` (part of `make test`), in
# .venv-agents, sets AIOVEC_AGENT_TESTS=1.
if os.environ.get("AIOVEC_AGENT_TESTS") != "1":
    collect_ignore.append("agents")


def pytest_configure(config: pytest.Config) -> None:
    """The ``each`` design chooses after ``-m`` and ``-k`` (tests/variants.py)."""
    config.pluginmanager.register(variants.EachDesign(), "aiovec-each-design")


@pytest.fixture(params=[pytest.param(loop, id=name) for name, loop in EVENT_LOOPS.items()])
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    """The event loop an ``@pytest.mark.anyio`` test runs on."""
    return request.param


@pytest.fixture
def ctrl_c() -> Iterator[None]:
    """SIGINT raises ``KeyboardInterrupt``, as in a terminal, even when the test runner was
    started in the background by a shell without job control (which ignores SIGINT)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


#: ``aiovec._backends._ray._backend.RAY_STARTER_THREAD`` (not imported: that would import Ray here).
RAY_STARTER_THREAD = "aiovec-ray-starter"


@pytest.fixture(autouse=True)
def _no_leaked_threads() -> Iterator[None]:
    """Every test must leave behind no sub-env or loop thread of aiovec's (threads finishing
    their last job, e.g. an abandoned sub-env closing once released, get a few seconds).
    The thread that started Ray is meant to live as long as the process."""
    yield
    finishing = [thread for thread in threading.enumerate() if thread.name.startswith("aiovec-")
                 and not thread.name.startswith(RAY_STARTER_THREAD)]
    for thread in finishing:
        thread.join(timeout=5)
    leaked = [thread.name for thread in finishing if thread.is_alive()]
    assert not leaked, f"threads left running: {leaked}"


def _item_uses_ray(item: pytest.Item) -> bool:
    """True for tests on ``backend="ray"``, or marked ``ray``."""
    callspec = getattr(item, "callspec", None)
    return ((callspec is not None and callspec.params.get("backend") == "ray")
            or item.get_closest_marker("ray") is not None)


def _uses_ray(request: pytest.FixtureRequest) -> bool:
    return _item_uses_ray(request.node)


#: Tests that build a Ray cluster of their own (test_ray_cluster.py shuts the shared runtime
#: down first; the example builds one in a subprocess): they run in the Ray group, one at a
#: time with the other Ray tests, not as a second cluster beside the shared runtime (seconds
#: of start-up and hundreds of MB more).
OWN_RAY_CLUSTER = ("tests/backends/test_ray_cluster.py",
                   "tests/test_examples.py::test_ray_cluster_example_recovers_from_a_dead_node")
#: The Ray backend's own tests: the only Ray tests not marked ``slow``.
RAY_QUICK = "tests/backends/test_ray.py"
#: The pytest-xdist group of every test that touches Ray.
RAY_GROUP = "ray"
#: The event loop whose variant of every test is ``slow``: uvloop runs asyncio's code paths
#: (aiovec sees an asyncio loop), and its variants are a third of the suite.
SLOW_LOOP = EVENT_LOOPS["uvloop"]
ASYNCIO = EVENT_LOOPS["asyncio"]
#: Where the Ray backend runs on every loop: its own API tests. The other Ray tests run on
#: asyncio only: the Ray tests run one after another in one xdist worker, the suite's longest
#: path, and a trio or uvloop variant there adds seconds per test (an actor to start) to check
#: no code of its own (the Ray backend's bridge to the caller's loop is the same for every
#: mechanism, and test_ray.py checks it on every loop; what ends a Ray sub-env's processes,
#: tests/backends/test_ray_process_tree.py, is the actor and its keeper, not the loop).
RAY_ON_EVERY_LOOP = ("tests/backends/test_ray.py",)


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(config: pytest.Config,
                                  items: list[pytest.Item]) -> Generator[None, None, None]:
    """Under pytest-xdist (``make unit``: ``--dist loadgroup``), every test that touches Ray
    runs in one worker: the session shares one Ray runtime (started once: seconds, and
    hundreds of MB per copy), and the scripts some tests run join it (by ``RAY_ADDRESS``,
    ``tests/ray_runtime.py``). Without xdist (tests/rllib's venv) that mark is left
    out: it is xdist's, unknown to ``--strict-markers`` there.

    Every test on ``backend="ray"`` is marked ``ray``: the other Pythons ``make test`` runs
    (the Makefile's ``OTHER_PYTHONS``) have no Ray and leave them out with ``-m "not ray"``.

    So the Ray tests run one after another, and they are slow (an actor takes seconds to
    start): all but the Ray backend's own (``RAY_QUICK``) are marked ``slow``, so that the
    quick tier (``make check``) does not wait on that one worker. So are the uvloop variants
    (``SLOW_LOOP``). ``make unit`` runs them all.

    A wrapper: the marks are added before ``-m`` and xdist's worker read them, and xdist's
    grouping is checked after (see ``_group_by_suffix``).
    """
    grouping = config.pluginmanager.hasplugin("xdist")
    variants.deselect(config, items,
                      [item for item in items if _ray_off_asyncio_elsewhere(item)])
    # Under AIOVEC_VARIANTS=pairwise: every loop against every other parameter pairwise, not
    # every combination (tests/variants.py; the default design chooses later: EachDesign).
    variants.deselect(config, items, variants.left_out(items, EVENT_LOOPS, _item_uses_ray))
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is not None and callspec.params.get("anyio_backend") == SLOW_LOOP:
            item.add_marker(pytest.mark.slow)
        if _item_uses_ray(item):
            item.add_marker(pytest.mark.ray)  # a test on backend="ray" (`-m "not ray"`)
        if _item_uses_ray(item) or item.nodeid.startswith(OWN_RAY_CLUSTER):
            if not item.nodeid.startswith(RAY_QUICK):
                item.add_marker(pytest.mark.slow)
            if grouping:
                item.add_marker(pytest.mark.xdist_group(RAY_GROUP))
    yield
    if getattr(config.option, "loadgroup", False):  # set in xdist workers under loadgroup
        _group_by_suffix(items)


def _ray_off_asyncio_elsewhere(item: pytest.Item) -> bool:
    """A trio or uvloop variant on ``backend="ray"`` outside ``RAY_ON_EVERY_LOOP``: left out
    (deselected, counted in the summary)."""
    callspec = getattr(item, "callspec", None)
    return (callspec is not None
            and callspec.params.get("anyio_backend", ASYNCIO) not in (ASYNCIO, "asyncio")
            and _item_uses_ray(item) and not item.nodeid.startswith(RAY_ON_EVERY_LOOP))


def _group_by_suffix(items: list[pytest.Item]) -> None:
    """Give each grouped test the ``@<group>`` suffix --dist loadgroup schedules by.

    xdist 3.8's worker appends it by assigning ``item._nodeid``, which pytest 9.2's
    structured node ids no longer read: the suffix is lost and the groups silently spread
    over every worker (pytest-dev/pytest-xdist#1386). Where it did take, nothing is done.
    """
    for item in items:
        names = sorted({str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
                        for mark in item.iter_markers("xdist_group")})
        suffix = "@" + "_".join(names)
        if names and not item.nodeid.endswith(suffix):
            node_id = getattr(item, "_id", None)
            if node_id is None or not hasattr(node_id, "parse"):
                raise RuntimeError("cannot group tests for pytest-xdist with this pytest: "
                                   "see tests/conftest.py::_group_by_suffix")
            item._id = node_id.parse(item.nodeid + suffix)  # type: ignore[attr-defined]


@pytest.fixture(autouse=True)
def _ray_runtime(request: pytest.FixtureRequest) -> None:
    """Tests that use Ray get the session's shared Ray runtime."""
    if _uses_ray(request):
        ensure_ray()


@pytest.fixture
async def no_leaks(request: pytest.FixtureRequest,
                   capfd: pytest.CaptureFixture[str]) -> AsyncIterator[None]:
    """The test must leave no worker process, descriptor or shared memory behind, and no
    worker may have printed a traceback.

    Everything checked belongs to this test process, never the whole machine: other programs
    and the other pytest-xdist workers create and remove processes, descriptors and
    ``/dev/shm`` entries (Ray's object store, Python's semaphores) at any moment. aiovec never
    names its shared memory: each batch is an anonymous ``memfd_create("aiovec-batch")``
    (``aiovec._backends._process._shared_memory.open_block``), freed by the kernel once no process
    maps it or holds its descriptor. So a leak is such a block still mapped here
    (``/proc/self/maps``) or a descriptor still open (``/proc/self/fd``); the workers' own
    copies go with the workers, which must be gone (this process's children, and what its
    fork servers forked).

    Async, so the event loop's own descriptors already exist when the baseline is taken. On
    the Ray backend, the processes are the actors' (the runtime's own connections and
    processes are Ray's to manage, so descriptors are not counted there).
    """
    if _uses_ray(request):
        # actor_pids() sees every aiovec actor on the machine, not only this test's: correct
        # because every Ray test runs in one xdist worker (pytest_collection_modifyitems),
        # one test at a time, so no other test makes or ends actors meanwhile.
        actors = actor_pids()
        yield
        left = wait_for_exit(sorted(actor_pids() - actors), timeout=20)
        assert not left, f"Ray actor processes left running: {left}"
        return
    fds, blocks, children = open_fds(), mapped_blocks(), child_pids()
    yield
    end_abandoned_parent_workers(request.node)
    assert child_pids() <= children, "worker processes left running"
    assert mapped_blocks() <= blocks, "shared memory (aiovec-batch) left mapped"
    leaked = {}
    for fd in open_fds() - fds - helper_fds():
        try:
            leaked[fd] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # the listing's own descriptor, gone by now
            continue
    assert not leaked, f"descriptors left open: {leaked}"
    errors = capfd.readouterr().err
    assert "Traceback" not in errors, errors
