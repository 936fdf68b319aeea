"""What a call refuses while another runs or results are owed, and the words for it: one rule
for ``AsyncVectorEnv`` and the remote client (the server's refusals are its vector env's,
sent on), so a remote env refuses as a local one does.

Each check is made before anything is sent, after the call's deadline (``check_timeout``),
in the order below; a refused call changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

import numpy as np

from aiovec._core._arguments import check_env_ids
from aiovec._exceptions import BusyError, NothingSentError, ResetNeededError

__all__ = ["check_can_abort", "check_can_recv", "check_can_send", "check_not_busy",
           "check_nothing_owed", "check_reset_done"]


def check_not_busy(operation: str, running: str | None) -> None:
    """``BusyError`` while another task's call (``running``) holds the vector env."""
    if running is not None:
        raise BusyError(f"cannot {operation}: another task is still running {running} on "
                        "this vector env (one call at a time)")


def _check_not_held(operation: str, ids: list[int], running: str | None) -> None:
    if running is not None:
        raise BusyError(f"cannot {operation} sub-env(s) {ids}: another task's {running} is "
                        "still running on some of them")


def check_nothing_owed(operation: str, owed: Collection[int]) -> None:
    """``BusyError`` for a ``step`` (or ``reset``) while sub-envs ``owed`` were sent actions
    with ``send`` and their results not received yet."""
    if owed:
        raise BusyError(f"cannot {operation}: sub-env(s) {sorted(owed)} were sent actions with "
                        "send() and their results were not received; recv() (or abort()) "
                        "them first")


def check_can_send(env_ids: Any, num_envs: int, *, running: str | None, has_reset: bool,
                   owed: Callable[[list[int]], Collection[int]],
                   held: Callable[[list[int]], str | None] | None = None) -> list[int]:
    """``send``'s preconditions → the sub-envs ``env_ids`` names (``None``: all).

    Refused, in this order: while another call holding every sub-env runs (``running``; a
    ``recv`` does not count, nor its restart of failed sub-envs: the send is queued then),
    ``BusyError``; before the first reset, ``ResetNeededError``; a
    bad ``env_ids``, ``ValueError``; a sub-env another call holds (``held(ids)`` names that
    call, if any), ``BusyError``; a sub-env that is still stepping or whose result waits for
    ``recv`` (``owed(ids)`` lists them), ``BusyError``.
    """
    check_not_busy("send", running)
    if not has_reset:
        raise ResetNeededError("cannot send before reset: call `await envs.reset()` first")
    ids = check_env_ids(env_ids, num_envs)
    if held is not None:
        _check_not_held("send to", ids, held(ids))
    still_owed = owed(ids)
    if still_owed:
        raise BusyError(f"cannot send to sub-env(s) {sorted(still_owed)}: each is still "
                        "stepping or its result is waiting for recv()")
    return ids


def check_reset_done(needy: Collection[int]) -> None:
    """``ResetNeededError`` for a ``send`` to sub-envs ``needy`` that need a reset first;
    checked after ``check_can_send``."""
    if needy:
        raise ResetNeededError(
            f"cannot send to sub-env(s) {sorted(needy)}: they need a reset first (never reset, "
            "failed, aborted, or done with autoreset disabled)")


def check_can_recv(*, running: str | None, anything_owed: bool) -> None:
    """``recv``'s preconditions: ``NothingSentError`` when no sub-env owes a result, then
    ``BusyError`` while another call (another ``recv`` included) runs."""
    if not anything_owed:
        raise NothingSentError("nothing to receive: no sub-env was sent an action (send() "
                               "first), or every result was received already")
    check_not_busy("recv", running)


def check_can_abort(env_ids: Any, num_envs: int, *, running: str | None,
                    held: Callable[[list[int]], str | None] | None = None) -> list[int]:
    """``abort``'s preconditions → the sub-envs ``env_ids`` names (``None``: all; an empty
    sequence: none). Refused, in this order: while another call holding every sub-env runs
    (``running``; a ``recv`` does not count), ``BusyError``; a bad ``env_ids``, ``ValueError``
    (as ``send``'s); a sub-env another call holds (``held``, as ``send``'s), ``BusyError``."""
    check_not_busy("abort", running)
    if env_ids is not None and np.ndim(env_ids) == 1 and np.size(env_ids) == 0:
        return []
    ids = check_env_ids(env_ids, num_envs)
    if held is not None:
        _check_not_held("abort", ids, held(ids))
    return ids
