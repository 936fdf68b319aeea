"""``ActionCheckers``: one checker per batch size, made once and kept, deciding as a fresh
``ActionChecker`` of that size does; the engine, the remote client and the server share it."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium import spaces

from aiovec._core._actions import ActionChecker, ActionCheckers


def test_each_size_gets_one_checker_made_on_first_use() -> None:
    space = spaces.Box(-1, 1, (2,), np.float32)
    checkers = ActionCheckers(space, 4, values=True)
    assert checkers.of_size(4) is checkers.full
    two = checkers.of_size(2)
    assert checkers.of_size(2) is two and two is not checkers.full


@pytest.mark.parametrize("values", [False, True])
def test_a_kept_checker_decides_as_a_fresh_one(values: bool) -> None:
    space = spaces.Discrete(3)
    checkers = ActionCheckers(space, 5, values)
    for size in (1, 2, 5, 2, 1):
        fresh = ActionChecker(space, size, values)
        for actions in (np.zeros(size, np.int64), np.full(size, 7, np.int64),
                        np.zeros(size + 1, np.int64), np.zeros(size, np.float32)):
            outcomes = []
            for checker in (checkers.of_size(size), fresh):
                try:
                    outcomes.append(("ok", checker.check(actions).tolist()))
                except (TypeError, ValueError) as error:
                    outcomes.append((type(error).__name__, str(error)))
            assert outcomes[0] == outcomes[1], (size, actions)
