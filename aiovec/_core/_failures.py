"""Failure replies turned into the exceptions callers see: each names its sub-env and keeps
the remote traceback; a call's healthy results ride along as ``partial_result``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aiovec._core._in_flight import InFlight
from aiovec._core._requests import Failure
from aiovec._exceptions import EnvTimeoutError, SubEnvError, SubEnvErrorGroup

__all__ = ["call_error", "error_group", "sub_env_error"]


def sub_env_error(failure: Failure) -> SubEnvError:
    """The ``SubEnvError`` for a failure reply, its original exception as ``__cause__``."""
    error = SubEnvError(failure.env_index, failure.phase, failure.description, failure.traceback)
    error.__cause__ = failure.exception
    return error


def error_group(operation: str, failures: Sequence[Failure]) -> SubEnvErrorGroup:
    """One ``SubEnvErrorGroup`` for the failure replies of ``operation``."""
    return SubEnvErrorGroup.from_errors(operation, [sub_env_error(failure)
                                                    for failure in failures])


def call_error(operation: str, in_flight: InFlight, broken: dict[int, str],
               partial_result: Any) -> EnvTimeoutError | SubEnvErrorGroup:
    """The error for the broken sub-envs of a call (those not restarted): ``EnvTimeoutError``
    when they all missed the deadline, else a group in which the late ones are
    ``SubEnvError``s caused by it."""
    error: EnvTimeoutError | SubEnvErrorGroup
    late = [env_index for env_index in in_flight.late if env_index in broken]
    failed = [failure for failure in in_flight.failed if failure.env_index in broken]
    if late and not failed:
        error = EnvTimeoutError(operation, late, in_flight.deadline)
    else:
        errors = []
        for env_index in late:
            timed_out = SubEnvError(env_index, operation, broken[env_index])
            timed_out.__cause__ = EnvTimeoutError(operation, [env_index], in_flight.deadline)
            errors.append(timed_out)
        errors += [sub_env_error(failure) for failure in failed]
        errors.sort(key=lambda sub_error: sub_error.env_id)
        error = SubEnvErrorGroup.from_errors(operation, errors)
    error.partial_result = partial_result
    return error
