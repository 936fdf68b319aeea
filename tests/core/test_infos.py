"""merge_info agrees with Gymnasium's own info merging, key order and dtypes included."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from gymnasium.vector import SyncVectorEnv

from aiovec._core._infos import merge_info, pack_infos, splice_infos
from aiovec.testing import CountingEnv
from tests.helpers import assert_identical

INFO_STREAMS: list[list[dict[str, Any]]] = [
    [{}, {"a": 1}, {}, {"a": 2, "b": 0.5}],
    [{"flag": True}, {"flag": np.bool_(False)}, {"text": "hi"}, {"obj": [1, 2]}],
    [{"vec": np.arange(3)}, {}, {"vec": np.ones(3, np.int64)}, {"f32": np.float32(1.5)}],
    [{"nested": {"x": 1, "deeper": {"y": 2.0}}}, {"nested": {"x": 3}}, {}, {"nested": {}}],
    [{"final_obs": np.zeros(2)}, {}, {"final_obs": {"k": 1}, "final_info": {"r": 1.0}}, {}],
]


@pytest.mark.parametrize("stream", INFO_STREAMS)
def test_merge_info_matches_gymnasium(stream: list[dict[str, Any]]) -> None:
    reference = SyncVectorEnv([CountingEnv] * len(stream))
    try:
        expected: dict[str, Any] = {}
        for index, info in enumerate(stream):
            expected = reference._add_info(expected, info, index)
    finally:
        reference.close()
    actual: dict[str, Any] = {}
    for index, info in enumerate(stream):
        merge_info(actual, info, index, len(stream))
    assert_identical(actual, expected)


def test_merge_info_masks_mark_who_set_a_key() -> None:
    merged: dict[str, Any] = {}
    merge_info(merged, {"score": 3}, 2, 4)
    assert merged["score"].tolist() == [0, 0, 3, 0]
    assert merged["_score"].tolist() == [False, False, True, False]


# ---------------------------------------------------------------------- packed by workers

#: The values each info key may take: kinds that merge into one column in any order (Python
#: and NumPy scalars of several dtypes; arrays of one shape; any objects).
_FAMILIES: dict[str, list[Any]] = {
    "a": [1, 2.5, True, np.float64(0.25), np.float32(-1.5), np.int64(7), np.bool_(True)],
    "b": [3, np.int32(4), np.uint8(5), 0.5],
    "c": [np.arange(3), np.ones(3, np.float32), np.full(3, 2.5)],
    "d": ["text", None, (1, 2), [3]],
    # None makes an object column, or a NaN in a float one: which depends on who came first.
    "e": [None, 2.5, np.float64(1.5)],
    # Arrays of objects: a column of rows (zeros where unset), not one of arrays.
    "f": [np.array(["a", "b"], dtype=object)],
    "x": [1, 2.5, np.float32(0.5)],
}


def _draw(rng: np.random.Generator, key: str) -> Any:
    family = _FAMILIES[key]
    return family[rng.integers(len(family))]


def _random_info(rng: np.random.Generator, uniform: dict[str, Any] | None) -> dict[str, Any]:
    """An info dict over a few keys; with ``uniform``, each key always takes one value (as
    real envs' infos do), else any value of its family."""
    info: dict[str, Any] = {}
    for key in ("a", "b", "c", "d", "e", "f"):
        if rng.random() < 0.6:
            info[key] = uniform[key] if uniform is not None else _draw(rng, key)
    if rng.random() < 0.3:
        info["nested"] = {"x": uniform["x"] if uniform is not None else _draw(rng, "x")}
    return info


def _packed_then_spliced(stream: list[tuple[dict[str, Any], dict[str, Any] | None]],
                         runs: list[range]) -> tuple[dict[str, Any], int]:
    """The batch's infos as the process backend builds them: each run of sub-envs packed where
    it is hosted (or, when packing is not exact, sent one by one), spliced in order."""
    batched: dict[str, Any] = {}
    packed_runs = 0
    for run in runs:
        packed = pack_infos([(row - run.start, stream[row][0], stream[row][1]) for row in run],
                            len(run))
        if packed is None:
            for row in run:
                info, final = stream[row]
                if final is not None:
                    merge_info(batched, final, row, len(stream))
                if info:
                    merge_info(batched, info, row, len(stream))
        else:
            splice_infos(batched, packed, run.start, len(stream))
            packed_runs += 1
    return batched, packed_runs


@pytest.mark.parametrize("seed", range(200))
def test_packed_infos_equal_merging_each_sub_env(seed: int) -> None:
    """Packing runs of sub-envs where they live, then splicing, gives exactly what merging
    every sub-env's info in turn gives: keys, order, dtypes, masks, values."""
    rng = np.random.default_rng(seed)
    num_envs = int(rng.integers(2, 12))
    # Half the cases draw one value kind per key for all sub-envs, the other half per run or
    # per sub-env: dtypes that differ between runs take the careful way into the batch.
    uniform_for_all = {key: _draw(rng, key) for key in _FAMILIES} if seed % 2 else None
    cuts = sorted(set(rng.integers(1, num_envs, size=int(rng.integers(0, 3))).tolist()))
    runs = [range(start, stop) for start, stop in zip([0, *cuts], [*cuts, num_envs])]
    stream: list[tuple[dict[str, Any], dict[str, Any] | None]] = []
    for run in runs:
        uniform = uniform_for_all or (
            {key: _draw(rng, key) for key in _FAMILIES} if rng.random() < 0.7 else None)
        for _ in run:
            final = ({"final_obs": np.full(2, rng.random()), "final_info": {"r": 1.0}}
                     if rng.random() < 0.2 else None)
            stream.append((_random_info(rng, uniform), final))
    expected: dict[str, Any] = {}
    for row, (info, final) in enumerate(stream):
        if final is not None:
            merge_info(expected, final, row, num_envs)
        if info:
            merge_info(expected, info, row, num_envs)
    actual, _ = _packed_then_spliced(stream, runs)
    assert_identical(actual, expected)


def test_runs_of_differing_kinds_are_spliced_value_by_value() -> None:
    """A key that is an int in one run and a float in the next: the batch keeps the first
    run's dtype and each value converts as merging it alone would."""
    stream: list[tuple[dict[str, Any], dict[str, Any] | None]] = [
        ({"k": 1}, None), ({"k": 2}, None), ({"k": 2.75}, None), ({}, None)]
    expected: dict[str, Any] = {}
    for row, (info, _) in enumerate(stream):
        merge_info(expected, info, row, 4)
    actual, packed_runs = _packed_then_spliced(stream, [range(2), range(2, 4)])
    assert packed_runs == 2
    assert_identical(actual, expected)
    assert actual["k"].tolist() == [1, 2, 2, 0]


def test_a_run_whose_kinds_differ_is_not_packed() -> None:
    assert pack_infos([(0, {"k": 1}, None), (1, {"k": 1.5}, None)], 2) is None
    assert pack_infos([(0, {"k": np.zeros(2)}, None), (1, {"k": np.zeros(3)}, None)], 2) is None
    assert pack_infos([(0, {"k": 1}, None), (1, {"k": 2}, None)], 2) is not None
