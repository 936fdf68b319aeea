"""Every exception aiovec raises, in one place.

The tree, and who caused each error::

    AiovecError                      base of everything below
    ├── ClosedError                  you used the vector env after closing it
    ├── NotStartedError              you asked for something that needs the sub-envs running
    ├── BusyError                    your code ran two calls on one vector env at once
    ├── NothingSentError             your code called recv with nothing sent to receive
    ├── ResetNeededError             your code stepped before reset (or a failed sub-env)
    ├── EnvTimeoutError              sub-envs did not answer before the deadline
    ├── WorkerDiedError              a worker process died (crash, signal, out of memory)
    ├── SerializationError           a sub-env's result or exception could not be pickled
    ├── SubEnvError                  one sub-env failed; ``__cause__`` is its exception
    ├── SubEnvErrorGroup             every sub-env that failed in one call (an ExceptionGroup)
    ├── LimitError                   a sub-env took a limit its vector env does not declare
    ├── FailureBudgetError           so many sub-envs failed that the restart policy stopped
    └── RemoteError                  a served session's server refused or failed a request
        └── ServerGoneError          the server closed the connection or cannot be reached

``SubEnvErrorGroup`` is an ``ExceptionGroup`` of ``SubEnvError``: catch it with a plain
``except aiovec.SubEnvErrorGroup`` or pick sub-envs apart with ``except* aiovec.SubEnvError``.
The classes also derive from the matching Gymnasium errors, so code written against
``gymnasium.vector.AsyncVectorEnv`` keeps catching what it caught before.

Every exception here survives a pickle round trip with its attributes intact (except
``partial_result``, the healthy sub-envs' results of the failed call, which stays local).
"""

from __future__ import annotations

import multiprocessing
import sys
import warnings
from collections.abc import Sequence
from typing import Any, cast

from gymnasium.error import ClosedEnvironmentError
from gymnasium.error import ResetNeeded as _GymResetNeeded

if sys.version_info < (3, 11):  # pragma: no cover - exercised on 3.10 only
    from exceptiongroup import BaseExceptionGroup, ExceptionGroup

__all__ = [
    "AiovecError",
    "BusyError",
    "ClosedError",
    "EnvTimeoutError",
    "FailureBudgetError",
    "LimitError",
    "NotStartedError",
    "NothingSentError",
    "RemoteError",
    "ResetNeededError",
    "SerializationError",
    "ServerGoneError",
    "SubEnvError",
    "SubEnvErrorGroup",
    "WorkerDiedError",
]


def add_note(error: BaseException, note: str) -> None:
    """``error.add_note(note)`` (PEP 678), on Python 3.10 too, where tracebacks show the notes
    once ``exceptiongroup`` is imported (aiovec imports it there)."""
    if sys.version_info >= (3, 11):
        error.add_note(note)
    else:  # pragma: no cover - exercised on 3.10 only
        notes = getattr(error, "__notes__", None)
        if notes is None:
            notes = error.__notes__ = []  # type: ignore[attr-defined]
        notes.append(note)


class AiovecError(Exception):
    """Base class of every error raised by aiovec."""


class ClosedError(AiovecError, ClosedEnvironmentError):
    """The vector env was closed by your code; it cannot be used any more."""


class NotStartedError(AiovecError):
    """The sub-envs are not running yet: ``await envs.start()`` or use ``async with`` first."""


class BusyError(AiovecError):
    """Another task is already running a call on this vector env.

    A vector env serves one call at a time; run concurrent work on separate vector envs.
    """


class NothingSentError(AiovecError):
    """``recv`` has nothing to wait for: no sub-env was sent an action (``send`` first)."""


class LimitError(AiovecError):
    """A sub-env's code took a named limit (``aiovec.limit``) its vector env does not declare
    in ``limits=``, or one it could not wait for (the inline backend). Raised in the sub-env,
    it is that sub-env's failure."""


class FailureBudgetError(AiovecError):
    """The restart policy's failure budget is spent (``max_failures``,
    ``max_failure_fraction``): the sub-envs that just failed were not restarted.

    ``failures`` maps each to why it failed; ``reason`` says which budget ran out. They need a
    reset (``unusable_envs``); every later failure raises this too. An outage stops the run
    here instead of being retried forever. Its ``__cause__`` is the error the call would have
    raised without a policy; ``partial_result`` holds the healthy sub-envs' results.
    """

    partial_result: Any = None

    def __init__(self, reason: str, failures: dict[int, str]) -> None:
        self.reason = reason
        self.failures = dict(failures)
        super().__init__(f"the restart policy's failure budget is spent ({reason}): "
                         f"sub-env(s) {_join_indices(sorted(self.failures))} failed and were "
                         f"not restarted; the first: {next(iter(self.failures.values()), '')}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.reason, self.failures))


class ResetNeededError(AiovecError, _GymResetNeeded):
    """A sub-env must be reset before it can step (never reset, or left unusable by a failure)."""


def _join_indices(env_ids: Sequence[int]) -> str:
    return ", ".join(str(index) for index in env_ids)


def _renamed(owner: str, old: str, new: str) -> None:
    """Warn that ``owner.old`` is the former name of ``owner.new`` (kept for one release)."""
    warnings.warn(f"{owner}.{old} is deprecated, use {new} (the old name goes in aiovec 0.3)",
                  DeprecationWarning, stacklevel=3)


class EnvTimeoutError(AiovecError, TimeoutError, multiprocessing.TimeoutError):
    """Sub-envs did not answer before the deadline.

    ``env_ids`` lists the sub-envs that still owed a reply. It is also a builtin
    ``TimeoutError`` and a ``multiprocessing.TimeoutError`` (what Gymnasium raises).
    ``partial_result`` holds what the call returned for the sub-envs that did answer.
    """

    partial_result: Any = None

    def __init__(self, operation: str, env_ids: Sequence[int], timeout: float | None) -> None:
        self.operation = operation
        self.env_ids = tuple(env_ids)
        self.timeout = timeout
        limit = "the deadline" if timeout is None else f"{timeout:g} s"
        super().__init__(
            f"{operation}: sub-env(s) {_join_indices(self.env_ids)} "
            f"did not answer within {limit}"
        )

    @property
    def env_indices(self) -> tuple[int, ...]:
        """Deprecated: ``env_ids``."""
        _renamed("EnvTimeoutError", "env_indices", "env_ids")
        return self.env_ids

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.operation, self.env_ids, self.timeout))


class WorkerDiedError(AiovecError):
    """A worker process hosting sub-envs died: the world (or the env's native code) broke it.

    ``env_ids`` are the sub-envs it hosted; ``exitcode`` is its exit status (negative:
    killed by that signal; ``None``: unknown); ``descendants_ended`` is how many processes its
    sub-envs had started were ended with it (``None``: not known). It is the ``__cause__`` of
    each ``SubEnvError`` for those sub-envs, and the group raised is also a ``WorkerDiedError``.
    """

    def __init__(self, message: str, env_ids: Sequence[int], exitcode: int | None,
                 descendants_ended: int | None = None) -> None:
        self.env_ids = tuple(env_ids)
        self.exitcode = exitcode
        self.descendants_ended = descendants_ended
        super().__init__(message)

    @property
    def env_indices(self) -> tuple[int, ...]:
        """Deprecated: ``env_ids``."""
        _renamed("WorkerDiedError", "env_indices", "env_ids")
        return self.env_ids

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (str(self), self.env_ids, self.exitcode,
                             self.descendants_ended))


class SerializationError(AiovecError):
    """A sub-env's result (observation, info, return value) or exception could not be pickled
    on its way from a worker process; the message carries its ``repr``."""


class SubEnvError(AiovecError):
    """One sub-env raised (or failed) while handling a call.

    ``env_id`` and ``phase`` (``"make"``, ``"reset"``, ``"step"``, ``"call"``, ``"close"``;
    ``"send"`` for a queued action refused when it went out, the caller's mistake: the sub-env
    never got it, is not restarted and needs no reset) say where; ``__cause__`` is the
    original exception when it could be kept, and ``remote_traceback`` is the traceback text
    from wherever the sub-env runs.
    """

    def __init__(
        self,
        env_id: int,
        phase: str,
        description: str,
        remote_traceback: str = "",
    ) -> None:
        self.env_id = env_id
        self.phase = phase
        self.description = description
        self.remote_traceback = remote_traceback
        super().__init__(f"sub-env {env_id} failed in {phase}: {description}")

    @property
    def env_index(self) -> int:
        """Deprecated: ``env_id``."""
        _renamed("SubEnvError", "env_index", "env_id")
        return self.env_id

    def __str__(self) -> str:
        message = super().__str__()
        if self.remote_traceback:
            message += "\n\nRemote traceback:\n" + self.remote_traceback.rstrip()
        return message

    def __reduce__(self) -> tuple[Any, ...]:
        state = {"__cause__": self.__cause__}
        arguments = (self.env_id, self.phase, self.description, self.remote_traceback)
        return (type(self), arguments, state)

    def __setstate__(self, state: dict[str, Any] | None) -> None:
        self.__cause__ = (state or {}).get("__cause__")


def _group_message(operation: str, errors: Sequence[SubEnvError]) -> str:
    indices = _join_indices([error.env_id for error in errors])
    details = "; ".join(f"[{error.env_id}] {error.description}" for error in errors)
    return f"{operation}: sub-env(s) {indices} failed: {details}"


class SubEnvErrorGroup(AiovecError, ExceptionGroup[SubEnvError]):
    """All the sub-envs that failed in one call, as an ``ExceptionGroup`` of ``SubEnvError``.

    ``env_ids`` lists them in order; sub-envs not listed answered normally. When every
    failed sub-env raised the same exception type (say ``ValueError``), the group raised is
    also an instance of that type, so ``except ValueError`` keeps working as it did with
    Gymnasium, which re-raises the sub-env's exception type.

    ``partial_result`` is what the call returned for the sub-envs that did not fail (see the
    the user guide, docs/guide/failures.md): nothing a healthy sub-env did is dropped silently.
    """

    operation: str
    partial_result: Any = None

    def __new__(cls, operation: str, errors: Sequence[SubEnvError]) -> SubEnvErrorGroup:
        self = super().__new__(cls, _group_message(operation, errors), list(errors))
        self.operation = operation
        return self

    def __init__(self, operation: str, errors: Sequence[SubEnvError]) -> None:
        # Not super(): a derived group's other base (the cause's type) has its own signature.
        ExceptionGroup.__init__(self, _group_message(operation, errors), list(errors))

    @classmethod
    def from_errors(cls, operation: str, errors: Sequence[SubEnvError]) -> SubEnvErrorGroup:
        """The group for ``errors``, also deriving from their common original type if any."""
        causes = {type(error.__cause__) for error in errors if error.__cause__ is not None}
        same_type = len(causes) == 1 and all(error.__cause__ is not None for error in errors)
        group_class = _group_class_for(causes.pop()) if same_type else cls
        return group_class(operation, errors)

    @property
    def env_ids(self) -> tuple[int, ...]:
        """The sub-envs that failed, in ascending order."""
        return tuple(error.env_id for error in self.exceptions
                     if isinstance(error, SubEnvError))

    @property
    def env_indices(self) -> tuple[int, ...]:
        """Deprecated: ``env_ids``."""
        _renamed("SubEnvErrorGroup", "env_indices", "env_ids")
        return self.env_ids

    def derive(self, excs: Sequence[SubEnvError]) -> SubEnvErrorGroup:  # type: ignore[override]
        return SubEnvErrorGroup.from_errors(self.operation, excs)

    def __reduce__(self) -> tuple[Any, ...]:
        # The derived classes are made at run time; they are rebuilt from the causes.
        rebuild = SubEnvErrorGroup if type(self) is SubEnvErrorGroup else _rebuild_group
        return (rebuild, (self.operation, list(self.exceptions)))


def _rebuild_group(operation: str, errors: Sequence[SubEnvError]) -> SubEnvErrorGroup:
    return SubEnvErrorGroup.from_errors(operation, errors)


_GROUP_CLASSES: dict[type[BaseException], type[SubEnvErrorGroup]] = {}


def _group_class_for(cause_type: type[BaseException]) -> type[SubEnvErrorGroup]:
    """``SubEnvErrorGroup`` that is also a ``cause_type``, where Python allows the combination."""
    if cause_type in _GROUP_CLASSES:
        return _GROUP_CLASSES[cause_type]
    group_class = SubEnvErrorGroup
    if issubclass(cause_type, Exception) and not issubclass(cause_type, BaseExceptionGroup):
        name = f"SubEnvErrorGroup[{cause_type.__name__}]"
        try:
            group_class = cast("type[SubEnvErrorGroup]", type(
                name, (SubEnvErrorGroup, cause_type), {"__module__": "aiovec"}))
        except TypeError:  # incompatible instance layouts (e.g. OSError subclasses)
            group_class = SubEnvErrorGroup
    _GROUP_CLASSES[cause_type] = group_class
    return group_class


class RemoteError(AiovecError):
    """The server of a remote vector env (``aiovec.remote``) refused or failed a request.

    ``code`` is the server's stable error code (``"sub_env_failed"``, ``"unauthorized"``,
    ...; see ``aiovec.serve.ERROR_CODES``), ``status`` its HTTP status (``None`` when it
    came over a WebSocket), ``detail`` its explanation, ``env_ids`` the sub-envs concerned.
    """

    def __init__(self, code: str, detail: str, status: int | None = None,
                 env_ids: Sequence[int] = ()) -> None:
        self.code, self.detail, self.status = code, detail, status
        self.env_ids = tuple(env_ids)
        where = f" (sub-envs {_join_indices(self.env_ids)})" if self.env_ids else ""
        super().__init__(f"the server answered {code}{where}: {detail}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.code, self.detail, self.status, self.env_ids))


class ServerGoneError(RemoteError, ConnectionError):
    """The server closed the connection or could not be reached: the world broke it. The
    session and its sub-envs are gone with it; open a new remote vector env."""
