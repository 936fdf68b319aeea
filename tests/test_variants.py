"""The covering designs of tests/variants.py: which variants of a test run, and that every value
of every parameter still meets every loop (pairwise), Ray (each value once), or the
interpreter (``each``), and every loop meets every backend (``loops``, the default)."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests import variants
from tests.backends_matrix import EVENT_LOOPS

KINDS = ["box", "discrete", "dict", "tuple", "cartpole"]
MODES = ["NextStep", "SameStep", "Disabled"]
BACKENDS = ["inline", "thread", "process", "async", "ray"]
START_METHODS = ["forkserver", "spawn", "fork"]
REPO = Path(__file__).resolve().parent.parent

TEST_FILE = f"""
import pytest

@pytest.fixture(params={list(EVENT_LOOPS)!r})
def anyio_backend(request):
    return request.param

@pytest.mark.parametrize("backend", {BACKENDS!r})
@pytest.mark.parametrize("mode", {MODES!r})
@pytest.mark.parametrize("kind", {KINDS!r})
def test_rollout(anyio_backend, kind, mode, backend):
    pass

@pytest.mark.parametrize("backend", {BACKENDS[:-1]!r})
@pytest.mark.parametrize("mode", {MODES!r})
@pytest.mark.parametrize("kind", {KINDS!r})
def test_sync_rollout(kind, mode, backend):
    pass

@pytest.mark.parametrize("backend", {BACKENDS!r})
def test_one_mechanism(anyio_backend, backend):
    pass

@pytest.mark.parametrize("backend", ["inline", "process"])
@pytest.mark.parametrize("kind", ["box", "dict", "tuple"])
def test_too_few_to_thin(anyio_backend, kind, backend):
    pass

@pytest.mark.parametrize("crash", ["kill", "exit"])
@pytest.mark.parametrize("start_method", {START_METHODS!r})
def test_start_methods(anyio_backend, start_method, crash):
    pass

@pytest.mark.parametrize("start_method", {START_METHODS!r})
@pytest.mark.parametrize("loop", ["asyncio", "trio"])
def test_a_script_on_a_loop(loop, start_method):
    pass

@pytest.mark.parametrize(("kind", "size"), [("box", 1), ("dict", 2), ("tuple", 3)])
@pytest.mark.parametrize("backend", ["inline", "thread", "process"])
def test_pairs_given_together(anyio_backend, kind, size, backend):
    pass
"""

CONFTEST = """
from tests import variants
from tests.backends_matrix import EVENT_LOOPS

def pytest_collection_modifyitems(config, items):
    out = {id(item) for item in variants.left_out(
        items, EVENT_LOOPS, lambda item: item.callspec.params.get("backend") == "ray")}
    out |= {id(item) for item in variants.each_left_out(items)}
    items[:] = [item for item in items if id(item) not in out]
"""


def collected(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
              design: str) -> dict[str, list[dict[str, Any]]]:
    """Each test's variants that ``design`` keeps, as their parameters."""
    monkeypatch.setattr(variants, "DESIGN", design)
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_matrix=TEST_FILE)
    recorder = pytester.inline_run("--collect-only", "-p", "no:asyncio")
    [finished] = recorder.getcalls("pytest_collection_finish")
    items = finished.session.items
    kept: dict[str, list[dict[str, Any]]] = {}
    for item in items:
        kept.setdefault(item.originalname, []).append(dict(item.callspec.params))
    return kept


def met(rows: list[dict[str, Any]], first: str, second: str) -> set[tuple[Any, Any]]:
    return {(row[first], row[second]) for row in rows}


def test_pairwise_runs_each_combination_once_and_every_value_on_every_loop(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    rows = collected(pytester, monkeypatch, "pairwise")["test_rollout"]
    local = [row for row in rows if row["backend"] != "ray"]
    # Each combination of the other parameters on exactly one loop: a third of the product.
    combos = [(row["kind"], row["mode"], row["backend"]) for row in local]
    assert sorted(combos) == sorted(itertools.product(KINDS, MODES, BACKENDS[:-1]))
    for parameter, values in (("kind", KINDS), ("mode", MODES), ("backend", BACKENDS[:-1])):
        assert met(local, parameter, "anyio_backend") == set(
            itertools.product(values, EVENT_LOOPS)), parameter


def test_a_test_with_no_loop_is_thinned_pairwise_over_its_smallest_parameter(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    rows = collected(pytester, monkeypatch, "pairwise")["test_sync_rollout"]
    local = BACKENDS[:-1]
    assert sorted((row["kind"], row["backend"]) for row in rows) == sorted(
        itertools.product(KINDS, local))
    assert met(rows, "kind", "mode") == set(itertools.product(KINDS, MODES))
    assert met(rows, "backend", "mode") == set(itertools.product(local, MODES))


def test_ray_variants_meet_each_other_value_once(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    rows = collected(pytester, monkeypatch, "pairwise")["test_rollout"]
    ray = [row for row in rows if row["backend"] == "ray"]
    assert {row["kind"] for row in ray} == set(KINDS)
    assert {row["mode"] for row in ray} == set(MODES)
    assert {row["anyio_backend"] for row in ray} == set(EVENT_LOOPS)
    assert len(ray) == len(KINDS)  # the fewest that meet them all


def test_a_loop_against_one_parameter_keeps_every_pair(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    kept = collected(pytester, monkeypatch, "pairwise")
    mechanism = kept["test_one_mechanism"]
    local = [row for row in mechanism if row["backend"] != "ray"]
    assert met(local, "backend", "anyio_backend") == set(
        itertools.product(BACKENDS[:-1], EVENT_LOOPS))
    # Two names of one parametrize count as one parameter: kind and size move together.
    together = kept["test_pairs_given_together"]
    assert len(together) == 3 * 3
    assert met(together, "kind", "anyio_backend") == set(
        itertools.product(["box", "dict", "tuple"], EVENT_LOOPS))
    assert all({"box": 1, "dict": 2, "tuple": 3}[row["kind"]] == row["size"]
               for row in together)
    # 3 kinds x 2 backends: a kind would meet two loops only, so every variant runs.
    assert len(kept["test_too_few_to_thin"]) == 3 * 2 * len(EVENT_LOOPS)


def test_each_keeps_the_fewest_variants_that_meet_every_value(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    rows = collected(pytester, monkeypatch, "each")["test_rollout"]
    for parameter, values in (("kind", KINDS), ("mode", MODES), ("backend", BACKENDS),
                              ("anyio_backend", list(EVENT_LOOPS))):
        assert {row[parameter] for row in rows} == set(values), parameter
    assert len(rows) == len(BACKENDS)


def test_loops_meets_every_value_and_every_loop_on_every_backend(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    kept = collected(pytester, monkeypatch, "loops")
    rows = kept["test_rollout"]
    assert met(rows, "backend", "anyio_backend") == set(
        itertools.product(BACKENDS, EVENT_LOOPS))
    for parameter, values in (("kind", KINDS), ("mode", MODES)):
        assert {row[parameter] for row in rows} == set(values), parameter
    assert len(rows) == len(BACKENDS) * len(EVENT_LOOPS)  # the pairs: no variant more
    assert len(kept["test_one_mechanism"]) == len(BACKENDS) * len(EVENT_LOOPS)
    # A start method is what a loop waits on too; so is a loop a script runs on.
    assert met(kept["test_start_methods"], "start_method", "anyio_backend") == set(
        itertools.product(START_METHODS, EVENT_LOOPS))
    assert len(kept["test_a_script_on_a_loop"]) == 2 * len(START_METHODS)
    # A test on no loop is thinned as under ``pairwise``.
    assert sorted((row["kind"], row["backend"]) for row in kept["test_sync_rollout"]) == sorted(
        itertools.product(KINDS, BACKENDS[:-1]))


def test_full_keeps_every_variant(pytester: pytest.Pytester,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    kept = collected(pytester, monkeypatch, "full")
    assert len(kept["test_rollout"]) == len(EVENT_LOOPS) * len(KINDS) * len(MODES) * len(
        BACKENDS)
    assert len(kept["test_one_mechanism"]) == len(EVENT_LOOPS) * len(BACKENDS)


def collect_differential(design: str | None, *arguments: str) -> list[list[str]]:
    """The ids of ``test_async_rollouts_match_sync_vector_env``'s variants that a real
    collection under ``design`` (None: the default) keeps, split (loop, space, mode,
    backend): the suite's own conftest, ``-m`` and ``-k`` included."""
    environment = {key: value for key, value in os.environ.items() if key != "AIOVEC_VARIANTS"}
    if design is not None:
        environment["AIOVEC_VARIANTS"] = design
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         *arguments, "tests/core/test_differential.py"],
        cwd=REPO, env=environment, capture_output=True,
        text=True, timeout=300, check=True)
    name = "test_async_rollouts_match_sync_vector_env["
    return [line.split(name, 1)[1].rstrip("]").split("-") for line in done.stdout.splitlines()
            if name in line]


@pytest.mark.slow  # five collections in subprocesses
def test_the_suite_collects_each_design() -> None:
    loops, local = list(EVENT_LOOPS), BACKENDS[:-1]
    full = collect_differential("full")
    assert len(full) == len(loops) * len(KINDS) * len(MODES) * len(local)
    pairwise = collect_differential("pairwise")
    assert len(pairwise) == len(full) // len(loops)
    for position, values in ((1, KINDS), (2, MODES), (3, local)):
        assert {(ids[position], ids[0]) for ids in pairwise} == set(
            itertools.product(values, loops))
    # loops (the default): every loop on every backend, every space and mode met.
    loops_kept = collect_differential("loops")
    assert loops_kept == collect_differential(None)  # the default
    assert {(ids[0], ids[3]) for ids in loops_kept} == set(itertools.product(loops, local))
    assert {ids[1] for ids in loops_kept} == set(KINDS)
    assert {ids[2] for ids in loops_kept} == set(MODES)
    assert len(loops_kept) == len(loops) * len(local)
    # each: chosen after -m and -k (the uvloop variants are slow, so are the process ones).
    each = collect_differential("each", "-m", "not slow", "-k", "not trio")
    assert {ids[0] for ids in each} == {"asyncio"}
    assert {ids[1] for ids in each} == set(KINDS) and {ids[2] for ids in each} == set(MODES)
    assert {ids[3] for ids in each} == {"inline", "thread", "async"}
    assert len(each) == len(KINDS)
