"""Which variants of a parametrized test run: every value of every parameter, not every product.

Covering designs: each is a choice of variants that still meets every value of every
parameter. ``AIOVEC_VARIANTS`` names the design: ``loops`` (the default), ``pairwise``,
``each`` (the other Pythons ``make test`` runs) or ``full`` (every variant: ``make full``).

``loops``, the default, keeps of every test that runs on several event loops a few variants
(a greedy cover) that meet each value of each parameter at least once and every pair of a
loop and a backend (or a start method: ``LOOP_PAIRS``): each loop waits, wakes and cancels
on each backend in every test that runs on several of both, while the other parameters
(spaces, autoreset modes, sizes) are met once each. A test on no loop (the sync shim's) is
thinned as under ``pairwise``. The suite's tests then add up to about 88 % of ``pairwise``'s
time.

``pairwise`` also meets every loop with every value of every other parameter. It is two
rules:

- **Loops, pairwise.** Every async test runs on asyncio, uvloop and trio. A test that also
  varies two or more other parameters (a backend, a space, an autoreset mode, ...) does not
  need every loop against every combination of them: what a loop can get wrong is how a
  mechanism waits, wakes and cancels, which shows against each backend, each space and each
  mode, not against each triple. So each combination of the other parameters runs on one
  loop, chosen so that every value of every parameter still meets every loop (a Latin square:
  the loop is the sum of the parameters' positions, modulo the number of loops). Where that
  would leave a (loop, value) pair out, nothing is thinned. A test with no loop (the sync
  shim's) that runs on several backends and varies two or more other parameters is thinned
  alike, its parameter with the fewest values in the loop's place.
- **Ray, each value once.** The Ray variants of a test outside the Ray backend's own tests
  (tests/backends/test_ray*.py: there every variant runs), on ``backend="ray"`` or marked
  ``ray``, meet each value of each other parameter at least once (an actor takes seconds to
  start, and every Ray test shares one pytest-xdist worker: tests/conftest.py); the local
  backends run the design above. So Ray's bit-for-bit rollouts meet every space and every
  autoreset mode, not every pair of them.

``each`` keeps, of every test, a few variants (a greedy cover) that meet each value of each
parameter (the loop included) at least once, among those left after ``-m`` and ``-k``: on the
other Pythons, what differs is the interpreter, which every test and every value still meets.

The designs are chosen over the whole collection (``pairwise``, before ``-m`` and ``-k``) or
over what is left (``loops`` and ``each``). So a combination that ``pairwise`` gives uvloop,
whose variants are ``slow``, does not run in ``make check``; ``make unit`` runs it. Values
told apart by identity only: a test holding one object twice under two ids is not thinned.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

import pytest

#: The design: ``loops``, ``pairwise``, ``each`` or ``full``.
DESIGN = os.environ.get("AIOVEC_VARIANTS", "loops")
if DESIGN not in ("pairwise", "loops", "each", "full"):
    raise RuntimeError(f"AIOVEC_VARIANTS={DESIGN!r}: use pairwise, loops, each or full")
LOOP_PARAMETER = "anyio_backend"
#: Under ``loops``: every value of one of the first parameters (a loop: the test's own, or
#: one a script it runs uses) meets every value of one of the second (what a loop waits on:
#: the backend, the process backend's start method).
LOOP_PAIRS = (("anyio_backend", "loop"), ("backend", "start_method"))
#: The parameter of the backend a test runs on (its Ray variants are those on Ray).
BACKEND_PARAMETER = "backend"
#: The Ray backend's own tests: every Ray variant runs there.
RAY_OWN_TESTS = "tests/backends/test_ray"

#: A variant's parameters, as (name, position among that parameter's values).
Key = tuple[tuple[str, int], ...]


def left_out(items: Sequence[pytest.Item], loops: dict[str, Any],
             uses_ray: Callable[[pytest.Item], bool]) -> list[pytest.Item]:
    """The variants of ``items`` the pairwise design leaves out (under ``loops``, of the tests
    with no loop; none under another design); ``uses_ray`` tells the tests on Ray."""
    if DESIGN not in ("pairwise", "loops"):
        return []
    out: list[pytest.Item] = []
    for variants in _by_test(items):
        if DESIGN == "loops" and _on_loops(variants):
            continue  # chosen after -m and -k: each_left_out
        ray = [item for item in variants if uses_ray(item)]
        if ray and not variants[0].nodeid.startswith(RAY_OWN_TESTS):
            out.extend(_each_left_out(ray, BACKEND_PARAMETER))
            variants = [item for item in variants if not uses_ray(item)]
        if variants and all(LOOP_PARAMETER in item.callspec.params  # type: ignore[attr-defined]
                            for item in variants):
            out.extend(_loops_left_out(variants, loops))
        elif variants:
            out.extend(_backends_left_out(variants))
    return out


def each_left_out(items: Sequence[pytest.Item]) -> list[pytest.Item]:
    """The variants of ``items`` the ``each`` design leaves out, or the ``loops`` design of
    the tests on loops (none under another)."""
    if DESIGN == "each":
        return [item for variants in _by_test(items) for item in _each_left_out(variants, "")]
    if DESIGN == "loops":
        return [item for variants in _by_test(items) if _on_loops(variants)
                for item in _each_left_out(variants, "", LOOP_PAIRS)]
    return []


def _on_loops(variants: list[pytest.Item]) -> bool:
    """Whether a test's variants run on several loops (its own, or a script's)."""
    for name in LOOP_PAIRS[0]:
        values: list[Any] = []
        for item in variants:
            params = item.callspec.params  # type: ignore[attr-defined]
            if name in params:
                _position(values, params[name])
        if len(values) > 1:
            return True
    return False


def _by_test(items: Sequence[pytest.Item]) -> list[list[pytest.Item]]:
    """The parametrized ``items``, grouped by the test they are variants of."""
    by_test: dict[tuple[Any, ...], list[pytest.Item]] = defaultdict(list)
    for item in items:
        if getattr(item, "callspec", None) is not None:
            by_test[(item.path, getattr(item.cls, "__name__", None),
                     getattr(item, "originalname", item.name))].append(item)
    return list(by_test.values())


def loop_name(value: Any, loops: dict[str, Any]) -> str | None:
    """The name in ``loops`` of an ``anyio_backend`` value (a name or a loop's spec)."""
    for name, spec in loops.items():
        if value in (spec, name):
            return name
    return None


def _loops_left_out(variants: list[pytest.Item], loops: dict[str, Any]) -> list[pytest.Item]:
    """The loop variants of one test that the pairwise design leaves out."""
    return _latin_left_out(variants, LOOP_PARAMETER, lambda value: loop_name(value, loops),
                           list(loops))


def _backends_left_out(variants: list[pytest.Item]) -> list[pytest.Item]:
    """The variants of one test with no loop, run on several backends, that the pairwise
    design leaves out: its parameter with the fewest values is assigned as a loop is."""
    seen: dict[str, list[Any]] = defaultdict(list)
    for item in variants:
        _key(item.callspec.params, seen, "")  # type: ignore[attr-defined]
    if len(seen.get(BACKEND_PARAMETER, ())) < 2 or len(seen) < 3:
        return []
    assigned = min((parameter for parameter, values in seen.items() if len(values) > 1
                    and parameter != BACKEND_PARAMETER), key=lambda name: len(seen[name]),
                   default=None)
    if assigned is None:
        return []
    values = seen[assigned]
    return _latin_left_out(variants, assigned, lambda value: _position(values, value),
                           list(range(len(values))))


def _latin_left_out(variants: list[pytest.Item], assigned: str, name_of: Callable[[Any], Any],
                    order: list[Any]) -> list[pytest.Item]:
    """The variants of one test left out when each combination of the other parameters runs
    with one value of ``assigned`` (the Latin square above; ``name_of`` names a value,
    ``order`` lists the names); none where a (value, ``assigned``) pair would be lost."""
    combos: dict[Key, dict[Any, pytest.Item]] = defaultdict(dict)
    seen: dict[str, list[Any]] = defaultdict(list)
    for item in variants:
        params = item.callspec.params  # type: ignore[attr-defined]
        name = name_of(params[assigned])
        if name is None:
            return []
        by_value = combos[_key(params, seen, assigned)]
        if name in by_value:  # one object under two ids: variants not told apart
            return []
        by_value[name] = item
    # Only the combinations that run with every value are thinned (e.g. not the Ray
    # process-tree tests', which run on asyncio alone: tests/conftest.py).
    full = [key for key, by_value in combos.items() if len(by_value) == len(order)]
    columns = _columns(full)
    if len(columns) < 2:
        return []
    ranks = [{index: rank for rank, index in enumerate(sorted(set(column)))}
             for column in columns]
    kept = [order[sum(rank[column[row]] for rank, column in zip(ranks, columns)) % len(order)]
            for row in range(len(full))]
    for column in columns:
        met = {(column[row], kept[row]) for row in range(len(full))}
        if len(met) < len(set(column)) * len(order):
            return []
    return [item for key, value in zip(full, kept)
            for name, item in combos[key].items() if name != value]


def _each_left_out(variants: list[pytest.Item], leaving: str,
                   pairs: tuple[Sequence[str], Sequence[str]] = ((), ())) -> list[pytest.Item]:
    """The variants of one test left out when a few that meet each value of each parameter
    but ``leaving``, and each pair of values of a parameter in ``pairs[0]`` and one in
    ``pairs[1]``, are kept (greedily: the variant meeting the most not met yet first)."""
    seen: dict[str, list[Any]] = defaultdict(list)
    keyed: list[tuple[tuple[Any, ...], pytest.Item]] = []
    for item in variants:
        key: tuple[Any, ...] = _key(item.callspec.params, seen, leaving)  # type: ignore[attr-defined]
        values = dict(key)
        key += tuple(((first, second), (values[first], values[second]))
                     for first in pairs[0] if first in values
                     for second in pairs[1] if second in values)
        keyed.append((key, item))
    if len({key for key, _ in keyed}) < len(keyed):  # one object under two ids
        return []
    to_meet = {met for key, _ in keyed for met in key}
    kept: set[int] = set()
    while to_meet or not kept:
        best = max(range(len(keyed)), key=lambda row: len(to_meet.intersection(keyed[row][0])))
        kept.add(best)
        to_meet.difference_update(keyed[best][0])
    return [item for row, (_, item) in enumerate(keyed) if row not in kept]


def _key(params: dict[str, Any], seen: dict[str, list[Any]], leaving: str) -> Key:
    """A variant's parameters but ``leaving``, as positions among each one's values."""
    return tuple(sorted((parameter, _position(seen[parameter], value))
                        for parameter, value in params.items() if parameter != leaving))


def _position(values: list[Any], value: Any) -> int:
    """The position of ``value`` among ``values`` (appended if new): by identity, as every
    variant of a test holds the very objects its parametrize lists."""
    for position, known in enumerate(values):
        if known is value:
            return position
    values.append(value)
    return len(values) - 1


def _columns(keys: list[Key]) -> list[tuple[int, ...]]:
    """The positions of each parameter over ``keys`` (a column per parameter), with
    parameters that always move together (one ``parametrize`` of several names) merged."""
    names = sorted({parameter for key in keys for parameter, _ in key})
    columns = []
    for parameter in names:
        column = tuple(dict(key).get(parameter, -1) for key in keys)
        if column not in columns and len(set(column)) > 1:
            columns.append(column)
    return columns


def deselect(config: pytest.Config, items: list[pytest.Item],
             out: Sequence[pytest.Item]) -> None:
    """Take ``out`` from ``items``, reported as deselected (counted in pytest's summary)."""
    if out:
        config.hook.pytest_deselected(items=list(out))
        gone = {id(item) for item in out}
        items[:] = [item for item in items if id(item) not in gone]


class EachDesign:
    """The ``each`` design, as a plugin: it chooses among the variants ``-m`` and ``-k`` left
    (registered by tests/conftest.py)."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config,
                                      items: list[pytest.Item]) -> None:
        deselect(config, items, each_left_out(items))
