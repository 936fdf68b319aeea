"""What runs inside each Ray actor: a share of the sub-envs, served one batched call at a time.

One actor call serves every sub-env of the actor that a request addresses, so a vector step
costs one round trip per actor, not per sub-env (a Ray round trip is ~1 ms). The sub-envs live
in ``EnvSlot`` objects as on every other backend, so autoreset and failure capture are the same.

Once the driver knows the vector env's observation space and it batches into arrays
(``attach``), a step's results travel as one ``StepBlock``: the observations concatenated as the
core would concatenate them, rewards and episode ends as arrays, and only the sub-envs with
something to say (infos, a same-step autoreset's final observation, a failure) one by one.
The driver copies the block into the vector env's batch arrays, so its core does no per-sub-env
work. Observations that do not batch (``Text``, ``Graph``, custom spaces), or a step whose
observations do not fit the space, travel as one reply per sub-env, as before.

What the sub-envs start dies with them, as in a process worker: the actor is a child subreaper
and ends its tree on close and restarts; a keeper (``_keeper``) ends it if the actor dies.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable, Sequence
from typing import Any

import cloudpickle
import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import concatenate, create_empty_array

from aiovec._backends._keeper import start_keeper
from aiovec._backends._portable import picklable, portable
from aiovec._backends._process_tree import OWNER_VARIABLE, StartedProcesses, become_subreaper
from aiovec._backends._registrations import install_registrations
from aiovec._backends._slot import EnvSlot
from aiovec._core._cleanups import CleanupTally
from aiovec._core._requests import Failure, Op
from aiovec._limits._limit import WorkerLimits
from aiovec._limits._take import bind_process
from aiovec._limits._takers import SocketTaker

__all__ = ["EnvHost", "StepBlock", "Tallied"]

#: True in a Ray actor's process (``aiovec.testing.FaultyEnv`` only ends processes where it is).
IN_ACTOR = False


class EnvHost:
    """Hosts some sub-envs in a Ray actor (the class is wrapped by ``ray.remote`` on the driver).

    ``env_fns`` is the cloudpickled ``({env_index: factory}, registrations)`` of its sub-envs
    (``_registrations``: the driver's Gymnasium registrations), unpickled at the
    first ``make`` so that a factory which cannot be loaded here fails its sub-envs with the
    traceback, instead of killing the actor. ``share`` lists them in order (a step that
    addresses all of them names none); ``batched_space`` is ``attach``'s, for an actor made
    after it.
    """

    def __init__(self, autoreset_mode: str, env_fns: bytes, share: Sequence[int] = (),
                 batched_space: gym.Space[Any] | None = None,
                 limits: WorkerLimits | None = None,
                 episode_timeout: float | None = None) -> None:
        global IN_ACTOR
        IN_ACTOR = True
        # The vector env's named limits (``limits=``), taken over TCP from its limits thread.
        bind_process(None if limits is None else SocketTaker(*limits))
        become_subreaper()
        os.environ[OWNER_VARIABLE] = str(os.getpid())
        keeper = start_keeper()
        self._started = StartedProcesses(spare=() if keeper is None else (keeper[0],))
        self._cleanups = CleanupTally()
        self._autoreset_mode = AutoresetMode(autoreset_mode)
        self._episode_timeout = episode_timeout
        self._env_fns_blob = env_fns
        self._env_fns: dict[int, Callable[[], Any]] | None = None
        self._slots: dict[int, EnvSlot] = {}
        self._share = list(share)
        self._batched_space = batched_space

    def attach(self, batched_space: gym.Space[Any] | None) -> list[None]:
        """From now on, step results come back as ``StepBlock`` batched by this space (the
        vector env's single observation space), or per sub-env if ``None``; one ``None``
        reply per hosted sub-env."""
        self._batched_space = batched_space
        return [None] * len(self._share)

    def make(self, env_indices: Sequence[int]) -> Tallied:
        """Make (or remake) the sub-envs; the replies are ``EnvDescription`` or ``Failure``.

        A remade sub-env is closed first, then what it started is ended."""
        try:
            if self._env_fns is None:
                self._env_fns, registrations = cloudpickle.loads(self._env_fns_blob)
                install_registrations(registrations)
            env_fns = self._env_fns
        except Exception as error:
            return self._tallied([portable(Failure.capture(index, "make", error))
                                  for index in env_indices])
        remade = [env_index for env_index in env_indices if env_index in self._slots]
        for env_index in remade:
            self._slots[env_index].run(Op.CLOSE, None)  # a broken env's close may fail: go on
        if remade:
            self._started.end(remade, len(env_fns))
        replies = []
        for env_index in env_indices:
            slot = self._slots.get(env_index)
            if slot is None:
                slot = self._slots[env_index] = EnvSlot(
                    env_index, self._autoreset_mode, cleanups=self._cleanups,
                    episode_timeout=self._episode_timeout)
            with self._started.making(env_index):
                replies.append(slot.run(Op.MAKE, env_fns[env_index]))
        return self._tallied(_portable("make", env_indices, replies))

    def _tallied(self, replies: list[Any]) -> Tallied:
        tally = (self._started.take_ended(), self._cleanups.run, self._cleanups.failed)
        self._cleanups.run = self._cleanups.failed = 0
        return Tallied((replies, tally))

    def step(self, env_indices: Sequence[int] | None, actions: Any) -> list[Any] | StepBlock:
        """Step the sub-envs (``None``: the whole share), ``actions[k]`` going to the k-th
        (the hot path)."""
        if env_indices is None:
            env_indices = self._share
        slots = self._slots
        replies = [slots[env_index].run(Op.STEP, actions[position])
                   for position, env_index in enumerate(env_indices)]
        if self._batched_space is not None:
            block = _block(self._batched_space, env_indices, replies)
            if block is not None:
                return block
        return _portable("step", env_indices, replies)

    def serve(self, op: Op, env_indices: Sequence[int],
              payloads: Sequence[Any]) -> list[Any] | Tallied:
        """Any other request (reset, call, set_attr, close), one payload per sub-env; closing
        ends whatever the sub-envs left running."""
        replies: list[Any] = []
        for env_index, payload in zip(env_indices, payloads):
            slot = self._slots.get(env_index)
            if slot is not None:
                replies.append(slot.run(op, payload))
            elif op is Op.CLOSE:  # never made: nothing to close
                replies.append(None)
            else:
                replies.append(Failure(env_index, op.value, None,
                                       f"sub-env {env_index} was never made in this actor", ""))
        if op is Op.CLOSE:
            self._started.end_all()
            return self._tallied(_portable(op.value, env_indices, replies))
        return _portable(op.value, env_indices, replies)


class Tallied(tuple[Any, ...]):
    """Replies to a request that may end sub-envs (make, close), then what ending them did:
    ``(replies, (processes ended, cleanups run, cleanups failed))``."""

    __slots__ = ()


class StepBlock(tuple[Any, ...]):
    """One actor's step results, a row per sub-env in the order addressed:
    ``(observations, rewards, terminations, truncations, extras)``. The first four are batches
    (observations as ``gymnasium.vector.utils.concatenate`` makes them); ``extras`` lists
    ``(row, reply)`` for the rows with more to say: ``(info, final)``, or a ``Failure`` (that
    row's observation is filler: never use it)."""

    __slots__ = ()


def _block(space: gym.Space[Any], env_indices: Sequence[int],
           replies: list[Any]) -> StepBlock | None:
    """The replies as one block, or ``None`` if they do not batch into ``space`` (then they
    travel one by one and the driver meets whatever is wrong with them as it would have)."""
    count = len(replies)
    rewards = np.zeros(count, dtype=np.float64)
    terminations = np.zeros(count, dtype=np.bool_)
    truncations = np.zeros(count, dtype=np.bool_)
    observations: list[Any] = []
    extras: list[tuple[int, Any]] = []
    failed = False
    filler = None
    try:
        for row, reply in enumerate(replies):
            if type(reply) is Failure:
                extras.append((row, reply))
                observations.append(None)
                failed = True
                continue
            observation, reward, terminated, truncated, info, final = reply
            # Item assignment, as the core's own batching does: the same casts, bit for bit.
            rewards[row] = reward
            terminations[row] = terminated
            truncations[row] = truncated
            observations.append(observation)
            filler = observation
            if info or final is not None:
                extras.append((row, (info, final)))
        if filler is None:  # every sub-env failed
            return None
        if failed:
            observations = [filler if item is None else item for item in observations]
        out: Any = create_empty_array(space, count, np.empty)
        batch = concatenate(space, observations, out)
    except Exception:
        return None
    if extras:
        rows = [row for row, _ in extras]
        extras = list(zip(rows, _portable("step", [env_indices[row] for row in rows],
                                          [reply for _, reply in extras])))
    return StepBlock((batch, rewards, terminations, truncations, extras))


def _portable(phase: str, env_indices: Sequence[int], replies: list[Any]) -> list[Any]:
    """The replies, each one that would not survive pickling replaced by its sub-env's failure.

    Plain step results (an array observation, no infos) skip the check: they always pickle.
    """
    if all(_plain(reply) for reply in replies):
        return replies
    try:
        pickle.loads(pickle.dumps(replies, protocol=pickle.HIGHEST_PROTOCOL))
    except Exception:
        return [portable(reply) if type(reply) is Failure else picklable(phase, index, reply)
                for index, reply in zip(env_indices, replies)]
    return [portable(reply) if type(reply) is Failure else reply for reply in replies]


def _plain(reply: Any) -> bool:
    if reply is None:
        return True
    if type(reply) is not tuple or len(reply) != 6:
        return False
    observation, _, _, _, info, final = reply
    return (not info and final is None and type(observation) is np.ndarray
            and observation.dtype != object)
