"""Turning the ``seed`` and ``options`` of a vector ``reset`` into per-sub-env requests."""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np

from aiovec._core._episode_options import per_env_options

__all__ = ["ResetOptions", "check_options", "per_env_seeds", "per_sub_env", "split_options",
           "split_reset_mask"]

#: A vector ``reset``'s ``options``: one dict for every sub-env, one entry per sub-env, or a
#: dict from sub-env indices to each one's (``split_options``).
ResetOptions = dict[Any, Any] | Sequence[dict[str, Any] | None] | None


def per_env_seeds(seed: int | Sequence[int | None] | None, num_envs: int) -> list[int | None]:
    """``None`` → no seeds, an int ``s`` → ``s, s+1, …``, a sequence → one seed per sub-env.

    Checked here, before anything is sent: a seed numpy refuses (negative, not an int) is the
    caller's mistake, never a sub-env failure to restart.
    """
    if seed is None:
        return [None] * num_envs
    candidate: object = seed  # checked as an object: callers may pass anything
    if isinstance(candidate, bool):
        raise TypeError("seed must be None, an int or a list of ints, got bool")
    if isinstance(candidate, numbers.Integral):
        first = _checked_seed(candidate, "seed")
        assert first is not None
        return [first + index for index in range(num_envs)]
    if isinstance(candidate, np.ndarray) and candidate.ndim == 1:  # np.arange(n), say
        candidate = candidate.tolist()
    elif isinstance(candidate, (str, bytes)) or not isinstance(candidate, Sequence):
        raise TypeError(f"seed must be None, an int or a list of ints, got {type(seed).__name__}")
    assert isinstance(candidate, (list, Sequence))
    seeds = [_checked_seed(value, f"seed[{index}]") for index, value in enumerate(candidate)]
    if len(seeds) != num_envs:
        raise ValueError(
            f"If seeds are passed as a list the length must match num_envs={num_envs} "
            f"but got length={len(seeds)}."
        )
    return seeds


def _checked_seed(value: object, where: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{where} must be None or an int, got {type(value).__name__}")
    if int(value) < 0:
        raise ValueError(f"{where} must be a non-negative int (numpy seeds are), got {value}")
    return int(value)


def check_options(options: object) -> None:
    """``options`` go to every sub-env's ``reset``: a dict (or ``None``)."""
    if options is not None and not isinstance(options, dict):
        raise TypeError(f"options must be None, a dict, or one dict (or None) per sub-env, "
                        f"got {type(options).__name__}")


def per_sub_env(options: object) -> bool:
    """Whether ``options`` give each sub-env its own (``split_options``)."""
    return isinstance(options, (list, tuple)) or (
        isinstance(options, dict) and bool(options) and all(
            isinstance(key, numbers.Integral) and not isinstance(key, bool) for key in options))


def split_options(options: object, num_envs: int) -> tuple[
        np.ndarray[Any, np.dtype[np.bool_]] | None, dict[str, Any] | None,
        list[dict[str, Any] | None] | None]:
    """A vector ``reset``'s ``options`` → ``(reset_mask, options for all, options per
    sub-env)``, checked before anything is sent. ``options`` is

    - ``None``, or a dict for every sub-env (Gymnasium's: ``reset_mask`` picks which reset);
    - a list (or tuple) of one entry per sub-env, each ``None`` or a dict: each sub-env's own;
    - a dict from sub-env indices to such entries: those sub-envs reset, each with its own.
    """
    if isinstance(options, (list, tuple)):
        return None, None, per_env_options(options, num_envs)
    if per_sub_env(options):
        assert isinstance(options, dict)
        reset_mask = np.zeros(num_envs, dtype=np.bool_)
        per_env: list[dict[str, Any] | None] = [None] * num_envs
        for key, entry in options.items():
            if not 0 <= key < num_envs:
                raise ValueError(f"options for sub-env {key}: there are {num_envs} sub-envs")
            reset_mask[key] = True
            per_env[key] = entry
        return reset_mask, None, per_env_options(per_env, num_envs)
    if isinstance(options, dict) and any(isinstance(key, numbers.Integral) for key in options):
        raise TypeError("options mixes sub-env indices with option names: give either one "
                        "dict for every sub-env, or a dict from sub-env indices to each one's "
                        "options")
    check_options(options)
    assert options is None or isinstance(options, dict)
    mask, shared = split_reset_mask(options, num_envs)
    return mask, shared, None


def split_reset_mask(
    options: dict[str, Any] | None, num_envs: int
) -> tuple[np.ndarray[Any, np.dtype[np.bool_]] | None, dict[str, Any] | None]:
    """Take ``options["reset_mask"]`` out of ``options``, checked as Gymnasium checks it.

    Returns the mask (or ``None`` for a full reset) and the options the sub-envs receive.
    The caller's dict is left untouched.
    """
    check_options(options)
    if options is None or "reset_mask" not in options:
        return None, options
    env_options = dict(options)
    reset_mask = env_options.pop("reset_mask")
    if not isinstance(reset_mask, np.ndarray):
        raise TypeError(f"`options['reset_mask']` must be a numpy array, got {type(reset_mask)}")
    if reset_mask.shape != (num_envs,):
        raise ValueError(
            f"`options['reset_mask']` must have shape `({num_envs},)`, got {reset_mask.shape}"
        )
    if reset_mask.dtype != np.bool_:
        raise TypeError(
            f"`options['reset_mask']` must have `dtype=np.bool_`, got {reset_mask.dtype}"
        )
    if not np.any(reset_mask):
        raise ValueError(
            "`options['reset_mask']` must contain a boolean array with at least one True value, "
            f"got reset_mask={reset_mask}"
        )
    return reset_mask, env_options
