"""``SB3VecEnv``: an aiovec vector env behind Stable-Baselines3's ``VecEnv`` interface.

SB3 speaks its own dialect: a step returns ``dones`` and one info dict per env, a finished
env is reset in the same step with its last observation in ``info["terminal_observation"]``,
and ``reset`` takes its seeds and options from ``seed()`` / ``set_options()``. The adapter runs
the sub-envs with Gymnasium's same-step autoreset and translates each batch; everything else
(backends, deadlines, typed errors, restarts) is aiovec's own.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.error import AlreadyPendingCallError, NoAsyncCallError
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import concatenate, create_empty_array
from stable_baselines3.common.vec_env.base_vec_env import (
    VecEnv,
    VecEnvIndices,
    VecEnvObs,
    VecEnvStepReturn,
)

from aiovec._adapters._env_calls import call_method, is_wrapped, read_attr
from aiovec._core._in_flight import USE_DEFAULT, InFlight
from aiovec._core._vector_env import EnvFactory
from aiovec._exceptions import SubEnvErrorGroup
from aiovec._shim._vector_env import VectorEnv

__all__ = ["SB3VecEnv"]


class SB3VecEnv(VecEnv):
    """A Stable-Baselines3 ``VecEnv`` whose sub-envs run on any aiovec backend.

    ``env_fns`` are the sub-env factories; the keywords are ``aiovec.VectorEnv``'s (``backend``,
    ``timeout``, ``restart``, ``num_workers``, ...), so SB3's own helper builds one directly::

        vec_env = make_vec_env("CartPole-v1", n_envs=8, vec_env_cls=SB3VecEnv,
                               vec_env_kwargs={"backend": "process", "timeout": 5.0})

    A failing, hanging or crashed sub-env raises aiovec's typed errors (``SubEnvError`` and
    friends, naming the sub-env and keeping its traceback) instead of SB3's bare ``EOFError``.
    """

    def __init__(self, env_fns: Sequence[EnvFactory], **vector_kwargs: Any) -> None:
        if "autoreset_mode" in vector_kwargs:
            raise TypeError("SB3VecEnv always resets finished sub-envs in the same step "
                            "(SB3's convention); autoreset_mode cannot be chosen")
        self.vector = VectorEnv(env_fns, autoreset_mode=AutoresetMode.SAME_STEP, **vector_kwargs)
        self._async = self.vector.async_env
        self._all_envs = list(range(self.vector.num_envs))
        #: The step ``step_async`` sent, or why it could not be sent (raised by ``step_wait``).
        self._stepping: InFlight | Exception | None = None
        try:
            super().__init__(len(env_fns), self.vector.single_observation_space,
                             self.vector.single_action_space)
        except BaseException:
            self.vector.close(terminate=True)
            raise

    def __repr__(self) -> str:
        return f"SB3VecEnv(num_envs={self.num_envs}, backend={self.vector.backend_name!r})"

    # ------------------------------------------------------------------ stepping

    def reset(self) -> VecEnvObs:
        """Reset every sub-env with the seeds and options set since the last reset."""
        self._check_idle("reset")
        seeds = None if all(seed is None for seed in self._seeds) else list(self._seeds)
        groups = _group_by_options(self._options)
        for options, members in groups:  # one reset, or one masked reset per distinct options
            if len(groups) > 1:
                mask = np.zeros(self.num_envs, dtype=bool)
                mask[members] = True
                options = {**options, "reset_mask": mask}
            obs, infos = self.vector.reset(seed=seeds, options=options or None)
            rows = _info_rows(infos, self.num_envs)
            for index in members:
                self.reset_infos[index] = rows[index]
        self._reset_seeds()
        self._reset_options()
        return obs  # type: ignore[no-any-return]

    def step_async(self, actions: np.ndarray[Any, Any]) -> None:
        """Start stepping every sub-env and return at once; ``step_wait`` collects the batch.

        The actions are checked and sent now, so the sub-envs step while the caller works;
        as in SB3's own VecEnvs, a wrong batch raises from ``step_wait``.
        """
        self._check_idle("step_async")
        batch = _batched(self.vector.single_action_space, actions, self.num_envs)
        try:
            self._stepping = self.vector._loop.run(self._async._submit_step, batch)
        except Exception as error:
            self._stepping = error

    def step_wait(self) -> VecEnvStepReturn:
        """The batch, in SB3's form: obs, rewards, dones, and one info dict per sub-env."""
        if self._stepping is None:
            raise NoAsyncCallError("step_wait called without step_async", "step")
        stepping, self._stepping = self._stepping, None
        if isinstance(stepping, Exception):
            raise stepping
        obs, rewards, terminated, truncated, infos = self.vector._loop.run(
            self._async._finish_step, stepping, USE_DEFAULT)
        dones = terminated | truncated
        step_infos = _info_rows(infos, self.num_envs)
        for index in np.flatnonzero(dones).tolist():
            # A finished sub-env's row holds the reset's info, plus the last step's obs and
            # info: SB3 wants the last step's info, with the obs as "terminal_observation".
            reset_info = step_infos[index]
            info = dict(reset_info.pop("final_info"))
            info["terminal_observation"] = reset_info.pop("final_obs")
            if "restart" in reset_info:  # aiovec cut the episode: say why where SB3 users look
                info["restart"] = reset_info["restart"]
            self.reset_infos[index] = reset_info
            step_infos[index] = info
        for info, cut in zip(step_infos, (truncated & ~terminated).tolist()):
            info["TimeLimit.truncated"] = cut
        return obs, rewards.astype(np.float32), dones, step_infos

    def close(self) -> None:
        """Close the sub-envs and their hosts (idempotent); a pending step is waited for."""
        if self._stepping is not None:
            stepping, self._stepping = self._stepping, None
            if not isinstance(stepping, Exception):
                with contextlib.suppress(Exception):  # closing: the pending result is moot
                    self.vector._loop.run(self._async._finish_step, stepping, USE_DEFAULT)
        self.vector.close()

    # ------------------------------------------------------------------ sub-env access

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        """Attribute ``attr_name`` of each chosen sub-env (through its wrappers).

        A missing attribute raises ``AttributeError`` (SB3's ``has_attr`` relies on it),
        chained to aiovec's error that names the sub-envs.
        """
        try:
            return self._call("get_attr", indices, read_attr, attr_name)
        except SubEnvErrorGroup as group:
            if all(isinstance(error.__cause__, AttributeError) for error in group.exceptions):
                raise AttributeError(str(group.exceptions[0].__cause__)) from group
            raise

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        """Set ``attr_name`` to ``value`` on each chosen sub-env, where ``get_attr`` finds it:
        through the wrappers (Gymnasium's ``set_wrapper_attr``), so the env itself sees a
        changed setting. SB3's own VecEnvs set it on the outermost wrapper, which the env
        below never sees."""
        self._check_idle("set_attr")
        self.vector._loop.run(self._async._set_attr_at, self._indices(indices), attr_name,
                              value)

    def env_method(self, method_name: str, *method_args: Any, indices: VecEnvIndices = None,
                   **method_kwargs: Any) -> list[Any]:
        """Call method ``method_name`` on each chosen sub-env → the results, in order."""
        return self._call("env_method", indices, call_method, method_name, *method_args,
                          **method_kwargs)

    def env_is_wrapped(self, wrapper_class: type[gym.Wrapper[Any, Any, Any, Any]],
                       indices: VecEnvIndices = None) -> list[bool]:
        """Whether each chosen sub-env is wrapped (anywhere) in ``wrapper_class``."""
        return self._call("env_is_wrapped", indices, is_wrapped, wrapper_class)

    def get_images(self) -> Sequence[np.ndarray[Any, Any] | None]:
        """Each sub-env's ``rgb_array`` frame (``None`` each under another render mode)."""
        if self.render_mode != "rgb_array":
            gym.logger.warn(f"The render mode is {self.render_mode}, but get_images "
                            "needs 'rgb_array'.")
            return [None] * self.num_envs
        return self.env_method("render")

    def _call(self, method: str, indices: VecEnvIndices, function: Any,
              *args: Any, **kwargs: Any) -> list[Any]:
        self._check_idle(method)
        env_ids = self._indices(indices)
        return list(self.vector._loop.run(self._async._call_at, env_ids, function,
                                          *args, **kwargs))

    def _check_idle(self, method: str) -> None:
        self.vector._begin(method)
        if self._stepping is not None:
            raise AlreadyPendingCallError(
                f"Calling `{method}` while waiting for a pending call to `step` to complete.",
                "step")

    def _indices(self, indices: VecEnvIndices) -> list[int]:
        """SB3's indices: ``None`` (all), an int or an iterable of ints, negative ones
        counting from the end as in a list."""
        if indices is None:
            return self._all_envs
        chosen = [indices] if isinstance(indices, (int, np.integer)) else indices
        resolved = []
        for index in chosen:
            if not -self.num_envs <= int(index) < self.num_envs:
                raise IndexError(f"sub-env index {index} is out of range for "
                                 f"{self.num_envs} sub-envs")
            resolved.append(int(index) % self.num_envs)
        return resolved


def _batched(space: gym.Space[Any], actions: Any, num_envs: int) -> Any:
    """SB3 steps Dict and Tuple action spaces with one action per sub-env (a list of dicts
    or of tuples): batched here as Gymnasium batches them. Batches pass unchanged."""
    kind = dict if isinstance(space, gym.spaces.Dict) else (
        tuple if isinstance(space, gym.spaces.Tuple) else None)
    if kind is None or not isinstance(actions, (list, tuple, np.ndarray)):
        return actions
    if len(actions) != num_envs or not all(isinstance(action, kind) for action in actions):
        return actions  # a batch (a tuple of per-part batches), or wrong: the check says why
    try:
        out: Any = create_empty_array(space, num_envs)
        return concatenate(space, list(actions), out)
    except (KeyError, IndexError, TypeError, ValueError) as error:
        raise ValueError(f"actions: the {num_envs} per-sub-env actions do not fit {space}: "
                         f"{error!r}") from None


def _group_by_options(options: list[dict[str, Any]]) -> list[tuple[dict[str, Any], list[int]]]:
    """The sub-envs that share each distinct options dict, in order of first appearance."""
    groups: list[tuple[dict[str, Any], list[int]]] = []
    for index, env_options in enumerate(options):
        for shared, members in groups:
            if _same_options(shared, env_options):
                members.append(index)
                break
        else:
            groups.append((env_options, [index]))
    return groups


def _same_options(first: dict[str, Any], second: dict[str, Any]) -> bool:
    try:
        return bool(first == second)
    except ValueError:  # arrays inside compare element-wise
        return first is second


def _info_rows(infos: dict[str, Any], num_envs: int) -> list[dict[str, Any]]:
    """Gymnasium's batched infos (arrays plus ``_key`` masks) → one dict per sub-env."""
    rows: list[dict[str, Any]] = [{} for _ in range(num_envs)]
    for key, values in infos.items():
        if key.startswith("_") and key[1:] in infos:
            continue  # the mask of ``key[1:]``
        mask = infos.get(f"_{key}")
        present = range(num_envs) if mask is None else np.flatnonzero(mask).tolist()
        if isinstance(values, dict):
            nested = _info_rows(values, num_envs)
            for index in present:
                rows[index][key] = nested[index]
        else:
            for index in present:
                value = values[index]
                # Python numbers, as SB3's own VecEnvs pass them on (a Monitor's episode
                # statistics are json.dumps-able): batching had made them numpy scalars.
                rows[index][key] = value.item() if isinstance(value, np.generic) else value
    return rows
