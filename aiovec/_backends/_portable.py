"""Making a sub-env's reply survive the trip out of its host (worker process or Ray actor).

A reply that cannot be pickled must fail its own sub-env with a ``SerializationError`` that
says what could not be pickled, never the whole request or the host.
"""

from __future__ import annotations

import pickle
import traceback
from typing import Any

from aiovec._core._requests import Failure
from aiovec._exceptions import SerializationError

__all__ = ["picklable", "portable"]


def _dumps(value: Any) -> bytes:
    return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)


def portable(failure: Failure) -> Failure:
    """The failure, its exception replaced by a ``SerializationError`` if that exception would
    not survive the trip to the parent (the original traceback text is kept).

    The exception lets go of its frames (their text is in ``failure.traceback``): a frame's
    locals may hold views of shared memory, which could then not be unmapped.
    """
    drop_frames(failure.exception)
    try:
        pickle.loads(_dumps(failure.exception))
    except Exception as error:
        cause = SerializationError(
            f"the exception of sub-env {failure.env_index} could not be pickled ({error}): "
            f"{failure.exception!r:.200}")
        return Failure(failure.env_index, failure.phase, cause,
                       failure.description + " (the exception itself could not be pickled)",
                       failure.traceback)
    return failure


def picklable(phase: str, env_index: int, reply: Any) -> Any:
    """``reply`` if it survives pickling, else a ``Failure`` of sub-env ``env_index``."""
    try:
        pickle.loads(_dumps(reply))
    except Exception as error:
        text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
        message = (f"the {phase} result of sub-env {env_index} could not be pickled ({error}): "
                   f"{reply!r:.200}")
        return Failure(env_index, phase, SerializationError(message),
                       f"SerializationError: {message}", text)
    return reply


def drop_frames(exception: BaseException | None) -> None:
    """Detach the tracebacks of ``exception`` and of every exception chained or grouped
    with it."""
    seen: set[int] = set()
    stack = [exception]
    while stack:
        current = stack.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        current.__traceback__ = None
        stack += [current.__cause__, current.__context__,
                  *getattr(current, "exceptions", ())]
