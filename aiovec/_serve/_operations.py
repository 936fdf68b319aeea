"""What a session does for a request: ``reset``, ``step``, ``send``, ``recv``, ``abort``
and ``max_in_flight`` on its vector env, from a decoded request (a JSON object or a binary
frame's tree) to a result tree (numpy arrays left as they are: each transport encodes them
its own way).

Every argument is checked here or by the vector env before any sub-env is sent anything: a
client's wrong action, seed or id is refused (422 ``invalid``), never a sub-env failure to
restart.

A request may carry the client's deadline, ``"timeout"`` (seconds): where it is shorter
than the served env's own, it is the call's deadline here (``CallerDeadline``), so a late
sub-env is dealt with when the client gives up on it (its thread abandoned or its worker
killed, made afresh at the next reset) and not only at the served deadline, and the session
can be reset again at once.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import numpy as np
from gymnasium import spaces

from aiovec._core._actions import accepted_kinds
from aiovec._core._arguments import check_timeout
from aiovec._core._batching import batches_into_rows
from aiovec._core._first_ready import StepBatch
from aiovec._core._in_flight import USE_DEFAULT, CallerDeadline, Timeout
from aiovec._exceptions import EnvTimeoutError, SubEnvErrorGroup
from aiovec._serve._errors import ServeError, refusal_of
from aiovec._serve._sessions import Session

__all__ = ["OPERATIONS", "Operation", "actions_from", "prepare", "restarts_in"]

Operation = Callable[[Session, Mapping[str, Any]], Awaitable[dict[str, Any]]]


def actions_from(value: Any, single: spaces.Space[Any]) -> Any:
    """A decoded batch of actions for sub-envs whose action space is ``single``, as a local
    caller would pass it: nested lists become arrays; Dict and Tuple spaces keep their
    structure; a batch of spaces batched into rows (``Text``, ``aiovec.ObjectSpace``, ...)
    is the list of the values, one per sub-env."""
    if isinstance(single, spaces.Dict):
        if not isinstance(value, Mapping) or set(value) != set(single.spaces):
            raise ServeError("invalid", f"actions: expected an object with keys "
                             f"{sorted(single.spaces)}")
        return {key: actions_from(value[key], sub) for key, sub in single.spaces.items()}
    if isinstance(single, spaces.Tuple):
        if not isinstance(value, (list, tuple)) or len(value) != len(single.spaces):
            raise ServeError("invalid", f"actions: expected a list of {len(single.spaces)} "
                             "batches, one per part of the Tuple space")
        return tuple(actions_from(item, sub) for item, sub in zip(value, single.spaces))
    if batches_into_rows(single):
        if not isinstance(value, list):
            raise ServeError("invalid", f"actions: expected a list of actions, one per "
                             f"sub-env, for {single}")
        return value
    if isinstance(value, np.ndarray):  # from a binary frame: its dtype is the client's
        return _in_dtype_of(value, single, typeless=False) if value.dtype.kind != "O" else value
    try:
        array = np.asarray(value)
    except (TypeError, ValueError) as error:  # ragged nesting
        raise ServeError("invalid", f"actions: {error}") from None
    if array.dtype.kind == "O":
        raise ServeError("invalid", "actions: expected numbers (one per sub-env), got "
                         f"{type(value).__name__} holding other values")
    return _in_dtype_of(array, single, typeless=True)


def _in_dtype_of(array: np.ndarray[Any, Any], space: spaces.Space[Any], *, typeless: bool
                 ) -> np.ndarray[Any, Any]:
    """Actions in the dtype of ``space`` (one sub-env's) where the local check accepts them
    and nothing is lost, so the sub-env gets what its space contains (an env that asserts
    ``contains`` never fails on a dtype: a client could force restarts that way).

    The local check (``_core._actions``) decides what is accepted, here as in a local vector
    env: only a dtype it accepts is cast, so a cast never turns a refusal into an acceptance
    (bools are no Discrete index, a frame's int64 no uint8). ``typeless``: the numbers came
    in JSON, which has one integer type; whole numbers then stand for the space's integer
    dtype when every value fits it, as an array of that dtype would locally.
    """
    dtype = space.dtype
    kinds = accepted_kinds(space)
    if dtype is None or array.dtype == dtype or kinds is None or array.dtype.kind not in kinds:
        return array
    if array.dtype.kind == "f" and dtype.kind == "f":
        assert isinstance(space, spaces.Box)  # the one space of floats
        return _rounded(array, space)
    if dtype.kind in "iu" and (np.can_cast(array.dtype, dtype, "same_kind")
                               or (typeless and array.dtype.kind in "iu")):
        with np.errstate(over="ignore"):
            cast = array.astype(dtype)
        if np.array_equal(cast, array):  # no value overflowed the narrower type
            return cast
    return array


def _rounded(array: np.ndarray[Any, Any], space: spaces.Box) -> np.ndarray[Any, Any]:
    """Float actions in the Box's float dtype, unless rounding moved a value onto a bound
    (a float64 just past 1.0 is float32 1.0): rounding is monotone and every bound is a value
    of that dtype, so only there can a value change sides, and the check must then see the
    caller's own values, as a local env does."""
    with np.errstate(over="ignore"):  # too large for the dtype: infinite, as checked below
        cast = array.astype(space.dtype)
    moved = cast != array  # compared exactly, in the wider dtype
    if moved.any() and (moved & ((cast == space.low) | (cast == space.high))).any():
        return array
    return cast


def _required(request: Mapping[str, Any], name: str) -> Any:
    if name not in request:
        raise ServeError("invalid", f"the request needs {name!r}")
    return request[name]


def _seed(request: Mapping[str, Any], num_envs: int) -> Any:
    seed = request.get("seed")
    if isinstance(seed, np.ndarray):
        seed = seed.tolist() if seed.size <= num_envs else [None] * (num_envs + 1)
    if isinstance(seed, list) and len(seed) != num_envs:  # before looking at each one
        raise ServeError("invalid", f"seed: one per sub-env ({num_envs}), got {len(seed)}")
    return seed  # checked (type, sign) by the vector env before anything is sent


def _deadline(request: Mapping[str, Any], session: Session) -> Timeout:
    """The call's deadline: the client's ``timeout`` where it is shorter than the served
    env's (a ``CallerDeadline``), else the served env's own. Checked as every deadline is
    (``check_timeout``: its ``ValueError`` is refused as ``invalid``)."""
    seconds = check_timeout(request.get("timeout"), "timeout")
    if seconds is None or seconds == math.inf:
        return USE_DEFAULT
    served = session.envs.timeout
    return CallerDeadline(seconds) if served is None or seconds < served else USE_DEFAULT


def _env_ids(request: Mapping[str, Any], num_envs: int) -> list[int] | None:
    env_ids = request.get("env_ids")
    if env_ids is None:
        return None
    if isinstance(env_ids, np.ndarray):
        env_ids = env_ids.tolist() if env_ids.size <= num_envs else None
    if not (isinstance(env_ids, list) and 0 < len(env_ids) <= num_envs
            and all(type(index) is int and 0 <= index < num_envs for index in env_ids)
            and len(set(env_ids)) == len(env_ids)):
        raise ServeError("invalid", f"env_ids: distinct sub-env indices from 0 to "
                         f"{num_envs - 1}, or null for all")
    return env_ids


def prepare(session: Session, op: str, request: Mapping[str, Any]) -> Mapping[str, Any]:
    """``request`` with its actions turned into arrays (the costly part of a big request:
    a transport runs this in a worker thread for those)."""
    if op == "step" and "actions" in request:
        return {**request, "actions": actions_from(request["actions"],
                                                   session.envs.single_action_space)}
    if op == "send" and "actions" in request:
        return {**request, "env_ids": _env_ids(request, session.envs.num_envs),
                "actions": actions_from(request["actions"], session.envs.single_action_space)}
    return request


def _restarted(infos: Mapping[str, Any], env_ids: Any = None) -> dict[str, str]:
    """``{sub-env index: why}`` for the sub-envs restarted during the operation (the rows
    of a first-ready batch are sub-envs ``env_ids``)."""
    mask = infos.get("_restart")
    if mask is None:
        return {}
    reasons = infos["restart"]
    return {str(row if env_ids is None else env_ids[row]): str(reasons[row])
            for row in np.flatnonzero(mask)}


def _with_mask_array(options: dict[str, Any]) -> dict[str, Any]:
    """Reset options as a local caller passes them: JSON has no arrays, so a ``reset_mask``
    list becomes one (which the vector env then checks, as locally: booleans, one per
    sub-env)."""
    mask = options.get("reset_mask")
    if not isinstance(mask, list):
        return options
    try:
        return {**options, "reset_mask": np.asarray(mask)}
    except ValueError:  # ragged nesting
        raise ServeError("invalid", "options: reset_mask must be a list of booleans, one per "
                         "sub-env") from None


def _per_sub_env(options: list[Any], reset_ids: Any, num_envs: int) -> Any:
    """Each sub-env's own reset options (an array, one entry per sub-env), as a local caller
    passes them: the list, or for a reset of some (``reset_ids``) a dict from their
    indices."""
    if reset_ids is None:
        return options
    if not (isinstance(reset_ids, list) and reset_ids and all(
            type(index) is int and 0 <= index < num_envs for index in reset_ids)):
        raise ServeError("invalid", f"reset_ids must be a list of sub-env indices "
                         f"(0 to {num_envs - 1})")
    if len(options) != num_envs:
        raise ServeError("invalid", f"options: one entry per sub-env ({num_envs}), got "
                         f"{len(options)}")
    return {index: options[index] for index in reset_ids}


async def reset(session: Session, request: Mapping[str, Any]) -> dict[str, Any]:
    options = request.get("options")
    if options is not None:
        if not session.served.reset_options:
            raise ServeError("invalid", f"{session.env_id} takes no reset options here")
        if isinstance(options, list):
            options = _per_sub_env(options, request.get("reset_ids"), session.envs.num_envs)
        elif isinstance(options, dict):
            options = _with_mask_array(options)
        else:
            raise ServeError("invalid", "options must be an object, an array (one entry per "
                             "sub-env) or null")
    observations, infos = await session.envs.reset(
        seed=_seed(request, session.envs.num_envs), options=options,
        timeout=_deadline(request, session))
    return {"observations": observations, "infos": infos, "restarted": _restarted(infos)}


async def step(session: Session, request: Mapping[str, Any]) -> dict[str, Any]:
    envs = session.envs
    actions = actions_from(_required(request, "actions"), envs.single_action_space)
    observations, rewards, terminations, truncations, infos = await envs.step(
        actions, timeout=_deadline(request, session))
    session.steps += 1
    return {"observations": observations, "rewards": rewards, "terminations": terminations,
            "truncations": truncations, "infos": infos, "restarted": _restarted(infos)}


async def send(session: Session, request: Mapping[str, Any]) -> dict[str, Any]:
    """First-ready batches: start stepping ``env_ids`` (default all); ``recv`` collects."""
    envs = session.envs
    _required(request, "actions")
    env_ids = _env_ids(request, envs.num_envs)
    envs.send(actions_from(request["actions"], envs.single_action_space), env_ids,
              timeout=_deadline(request, session))
    return {}


async def recv(session: Session, request: Mapping[str, Any]) -> dict[str, Any]:
    batch_size, min_size = request.get("batch_size"), request.get("min_size")
    for name, value in (("batch_size", batch_size), ("min_size", min_size)):
        if value is not None and type(value) is not int:
            raise ServeError("invalid", f"{name} must be an int or null")
    wait = request.get("wait")
    if wait is not None and type(wait) not in (int, float):
        raise ServeError("invalid", "wait must be a number or null")
    try:
        batch = await session.envs.recv(batch_size=batch_size, min_size=min_size, wait=wait)
    except (EnvTimeoutError, SubEnvErrorGroup) as error:
        # The batch is received even so (its healthy rows ride on the error locally): the
        # client is told which sub-envs it held, so it knows they owe nothing any more.
        partial = error.partial_result
        if isinstance(partial, StepBatch):
            refused = refusal_of(error)
            assert refused is not None
            refused.extra["received"] = partial.env_ids.tolist()
            raise refused from None
        raise
    session.steps += 1
    return {"observations": batch.observations, "rewards": batch.rewards,
            "terminations": batch.terminations, "truncations": batch.truncations,
            "infos": batch.infos, "env_ids": batch.env_ids,
            "restarted": _restarted(batch.infos, batch.env_ids)}


async def abort(session: Session, request: Mapping[str, Any]) -> dict[str, Any]:
    """Cancel the outstanding first-ready steps of ``env_ids`` (default all; an empty list:
    none), as ``AsyncVectorEnv.abort``: each that owed a result then needs a reset. Its
    check of ``env_ids`` is the local one (a ``ValueError``: ``invalid``)."""
    session.envs.abort(request.get("env_ids"))
    return {}


async def max_in_flight(session: Session, request: Mapping[str, Any]) -> dict[str, Any]:
    """Move the session's in-flight cap (``max_in_flight``: a positive int, or null for
    none), as setting ``AsyncVectorEnv.max_in_flight`` does."""
    session.envs.max_in_flight = _required(request, "max_in_flight")
    return {}


OPERATIONS: dict[str, Operation] = {"reset": reset, "step": step, "send": send, "recv": recv,
                                    "abort": abort, "max_in_flight": max_in_flight}


def restarts_in(result: Mapping[str, Any]) -> int:
    """How many sub-envs the server restarted during this operation."""
    return len(result.get("restarted", ()))
