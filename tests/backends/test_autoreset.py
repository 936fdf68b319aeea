"""The autoreset rule, on its own (the backends' slots follow it; the differential tests check
their trajectories against Gymnasium's)."""

from __future__ import annotations

import pytest
from gymnasium.vector import AutoresetMode

from aiovec._backends._autoreset import Autoreset


def test_next_step_mode_resets_on_the_step_after_an_episode_end() -> None:
    autoreset = Autoreset(AutoresetMode.NEXT_STEP)
    autoreset.made()
    autoreset.explicitly_reset()
    assert not autoreset.reset_instead_of_step()
    assert not autoreset.reset_now(terminated=False, truncated=False)
    assert not autoreset.reset_instead_of_step()
    assert not autoreset.reset_now(terminated=False, truncated=True)  # not now: next step
    assert autoreset.reset_instead_of_step()
    assert not autoreset.reset_instead_of_step()  # once


def test_a_fresh_env_in_next_step_mode_starts_on_its_first_step() -> None:
    autoreset = Autoreset(AutoresetMode.NEXT_STEP)
    autoreset.made()
    assert autoreset.reset_instead_of_step()


def test_an_explicit_reset_cancels_the_owed_reset() -> None:
    autoreset = Autoreset(AutoresetMode.NEXT_STEP)
    autoreset.reset_now(terminated=True, truncated=False)
    autoreset.explicitly_reset()
    assert not autoreset.reset_instead_of_step()


def test_same_step_mode_resets_within_the_ending_step() -> None:
    autoreset = Autoreset(AutoresetMode.SAME_STEP)
    autoreset.made()
    assert not autoreset.reset_instead_of_step()
    assert autoreset.reset_now(terminated=True, truncated=False)
    assert not autoreset.reset_instead_of_step()


@pytest.mark.parametrize("ended", [(True, False), (False, True)])
def test_disabled_mode_never_resets(ended: tuple[bool, bool]) -> None:
    autoreset = Autoreset(AutoresetMode.DISABLED)
    autoreset.made()
    assert not autoreset.reset_now(*ended)
    assert not autoreset.reset_instead_of_step()
