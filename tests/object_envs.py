"""Sub-envs whose observations are text and Python objects, for the tests of every backend and
of the served path: module-level classes, so worker processes and Ray actors import them.

- ``UnicodeTextEnv``: ``Text`` spaces over a wide charset; its observations also hold
  characters outside that charset (CJK, emoji beyond the BMP, a combining mark, a zero-width
  joiner, right-to-left text, NUL), which Gymnasium's shared-memory form of ``Text`` drops.
- ``ChatEnv``: a chat as a list of message dicts (``ObjectSpace(list)``) and a string action;
  it returns its own list and appends to it at the next step, so a vector env that hands out
  the sub-env's object instead of a copy shows it.
- ``FailingChatEnv``: a ``ChatEnv`` whose step raises for the action ``"fail"``.
- ``TokenBufferEnv`` (and ``TokenDictEnv``, the same inside a ``Dict`` beside an array): token
  ids in a numpy buffer the env keeps and updates in place (``ObjectSpace(np.ndarray)``).
- ``EchoObjectEnv``: observes the action it was given (an ``ObjectSpace(list)``), as it was
  when the sub-env got it.

Both are seed-determined, start each episode with every one of ``UNUSUAL``, and end episodes
after a seed-drawn number of steps (autoreset runs).
"""

from __future__ import annotations

import copy
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.spaces import Box, Dict, Discrete, Text

import aiovec

#: Characters a Text's charset rarely holds.
UNUSUAL = "é中文字😀🧪\u0301\u200d\u05e9\u05dc\u05d5\u05dd\x00\t\nΩ"  # Hebrew: shalom
#: A wide charset (700 characters from the space on), as an agent's Text space would have.
WIDE_CHARSET = "".join(chr(code) for code in range(0x20, 0x20 + 700))
TEXT_SPACE = Text(max_length=512, min_length=0, charset=WIDE_CHARSET)


def unicode_words(rng: Any, count: int) -> str:
    """``count`` characters drawn from the wide charset and ``UNUSUAL``."""
    pool = WIDE_CHARSET[:60] + UNUSUAL
    return "".join(pool[int(index)] for index in rng.integers(0, len(pool), count))


class UnicodeTextEnv(gym.Env[str, str]):
    """Text in, text out: the observation is the action followed by some drawn characters."""

    observation_space = TEXT_SPACE
    action_space = TEXT_SPACE

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        self.left = int(self.np_random.integers(2, 6))
        return UNUSUAL + unicode_words(self.np_random, 12), {}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self.left -= 1
        observation = (action + unicode_words(self.np_random, 8))[:TEXT_SPACE.max_length]
        return observation, float(len(action)), self.left <= 0, False, {}


class ChatEnv(gym.Env[list[dict[str, Any]], str]):
    """A chat: the observation is the message list (the env's own, appended to at each step)."""

    observation_space = aiovec.ObjectSpace(list)
    action_space = aiovec.ObjectSpace(str)

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[list[dict[str, Any]],
                                                               dict[str, Any]]:
        super().reset(seed=seed)
        self.left = int(self.np_random.integers(2, 6))
        self.messages: list[dict[str, Any]] = [
            {"role": "system", "content": "You are a careful agent."},
            {"role": "user", "content": "task: " + UNUSUAL + unicode_words(self.np_random, 10),
             "token_ids": self.np_random.integers(0, 50_000, 5).tolist()}]
        return self.messages, {}

    def step(self, action: str) -> tuple[list[dict[str, Any]], float, bool, bool,
                                         dict[str, Any]]:
        self.left -= 1
        self.messages.append({"role": "assistant", "content": action})
        self.messages.append({"role": "tool", "content": unicode_words(self.np_random, 6),
                              "result": {"ok": bool(self.np_random.integers(2)),
                                         "score": float(self.np_random.random()),
                                         "lines": int(self.np_random.integers(100)),
                                         "error": None}})
        return self.messages, 1.0, self.left <= 0, False, {}


class FailingChatEnv(ChatEnv):
    """A ``ChatEnv`` whose step raises ``RuntimeError`` for the action ``"fail"``."""

    def step(self, action: str) -> tuple[list[dict[str, Any]], float, bool, bool,
                                         dict[str, Any]]:
        if action == "fail":
            raise RuntimeError("asked to fail")
        return super().step(action)


class TokenBufferEnv(gym.Env[Any, int]):
    """Each step adds the action to every token of its buffer, in place, and returns the
    buffer itself."""

    observation_space: gym.Space[Any] = aiovec.ObjectSpace(np.ndarray)
    action_space = Discrete(3)

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self.tokens = np.zeros(4, np.int64)
        return self._observation(), {}

    def step(self, action: int) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self.tokens += int(action)
        return self._observation(), 0.0, False, False, {}

    def _observation(self) -> Any:
        return self.tokens


class TokenDictEnv(TokenBufferEnv):
    """``TokenBufferEnv`` with its buffer in a ``Dict``, beside an array."""

    observation_space = Dict({"tokens": aiovec.ObjectSpace(np.ndarray),
                              "total": Box(0, np.inf, (1,))})

    def _observation(self) -> Any:
        return {"tokens": self.tokens, "total": np.array([self.tokens.sum()], np.float32)}


class EchoObjectEnv(gym.Env[list[Any], list[Any]]):
    """Observes the list it is given as its action, copied as the sub-env received it."""

    observation_space = action_space = aiovec.ObjectSpace(list)

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[list[Any], dict[str, Any]]:
        return [], {}

    def step(self, action: list[Any]) -> tuple[list[Any], float, bool, bool, dict[str, Any]]:
        return list(action), 0.0, False, False, {}


class CountingText(Text):
    """A Text that counts its deep copies (Gymnasium batches it as it batches any Text)."""

    copies = 0

    def __deepcopy__(self, memo: dict[int, Any]) -> CountingText:
        CountingText.copies += 1
        twin = CountingText.__new__(CountingText)
        twin.__dict__.update(copy.deepcopy(self.__dict__, memo))
        return twin


class CountingTextEnv(gym.Env[str, str]):
    """Echoes its action with a "!": its spaces count how often they are deep-copied."""

    observation_space = action_space = CountingText(512, min_length=0, charset=WIDE_CHARSET)

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        return "", {}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        return action + "!", 0.0, False, False, {}


ENV_KINDS = {"text": UnicodeTextEnv, "chat": ChatEnv}


def actions_for(kind: str, step: int, count: int) -> tuple[str, ...]:
    """A step's actions for ``count`` sub-envs, each in its env's action space: for the chat,
    with unusual characters; for Text, with characters of its charset far from ASCII."""
    extra = UNUSUAL if kind == "chat" else WIDE_CHARSET[-40:]
    return tuple(f"{kind} step {step} env {index} {extra[(7 * step + index) % len(extra)]}"
                 for index in range(count))
