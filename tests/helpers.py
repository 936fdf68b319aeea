"""Helpers shared by the tests: comparing batched results exactly, and rollout drivers."""

from __future__ import annotations

from typing import Any

import numpy as np


def assert_identical(actual: Any, expected: Any, path: str = "value") -> None:
    """Fail unless ``actual`` equals ``expected`` bit for bit: same types, dtypes, keys, order."""
    assert type(actual) is type(expected), f"{path}: {type(actual)} != {type(expected)}"
    if isinstance(expected, np.ndarray):
        assert actual.dtype == expected.dtype, f"{path}: dtype {actual.dtype} != {expected.dtype}"
        assert actual.shape == expected.shape, f"{path}: shape {actual.shape} != {expected.shape}"
        if expected.dtype == object:
            for index in np.ndindex(expected.shape):
                assert_identical(actual[index], expected[index], f"{path}[{index}]")
        else:
            assert actual.tobytes() == expected.tobytes(), f"{path}: {actual} != {expected}"
    elif isinstance(expected, dict):
        assert list(actual) == list(expected), f"{path}: keys {list(actual)} != {list(expected)}"
        for key in expected:
            assert_identical(actual[key], expected[key], f"{path}[{key!r}]")
    elif isinstance(expected, (tuple, list)):
        assert len(actual) == len(expected), f"{path}: length {len(actual)} != {len(expected)}"
        for index, (a, e) in enumerate(zip(actual, expected)):
            assert_identical(a, e, f"{path}[{index}]")
    elif isinstance(expected, float) and np.isnan(expected):
        assert np.isnan(actual), f"{path}: {actual} != nan"
    else:
        assert actual == expected, f"{path}: {actual!r} != {expected!r}"
