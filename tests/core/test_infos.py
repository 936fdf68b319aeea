"""merge_info agrees with Gymnasium's own info merging, key order and dtypes included."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from gymnasium.vector import SyncVectorEnv

from aiovec._core._infos import merge_info
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
