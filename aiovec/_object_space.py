"""``ObjectSpace``: observations and actions that are Python objects, and how they batch.

A batch of them is a tuple with one value per sub-env, as Gymnasium batches ``Text``; the
batched space is a ``Tuple`` whose rows share one space (``_core._batching.shared_rows``).
This module registers that with Gymnasium's vector utilities, so Gymnasium's own vector envs
batch these spaces too: ``batch_space`` and ``batch_differing_spaces`` (a ``Tuple`` of rows),
``create_empty_array`` (``None`` in every row) and ``concatenate`` (the tuple of the values,
Gymnasium's own for ``Text``).
``iterate`` is left as it is: it walks a batched ``Tuple`` of rows value by value as it walks
one of ``Text`` rows (registering this space there would make Gymnasium iterate each value).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
from gymnasium import Space
from gymnasium.spaces import Tuple
from gymnasium.vector import utils as gym_utils

from aiovec._core._batching import TUPLE_OF_VALUES, copied_rows, shared_rows

__all__ = ["ObjectSpace"]

#: Draws one value from a generator (``ObjectSpace(sampler=...)``).
Sampler = Callable[[np.random.Generator], Any]


class ObjectSpace(Space[Any]):
    """Any Python object, or those of the given ``types``: the space to declare for text of
    any Unicode (``ObjectSpace(str)``), a chat as a list of message dicts
    (``ObjectSpace(list)``), token ids, or anything else an array cannot hold.

    ``contains(value)`` is ``isinstance(value, types)`` (any object when no type is given);
    what is inside a list or dict is not checked. Two such spaces are equal when they hold
    the same types.

    ``sample()`` draws with ``sampler``, a function of the space's numpy ``Generator`` that
    returns one value (so ``seed()`` fixes the draws); without one, there is nothing sensible
    to draw and it raises ``NotImplementedError`` saying so. To cross to worker processes the
    space pickles, ``sampler`` included: make it a module-level function.

    Over a served env's wire a value goes as JSON: lists, dicts with string keys, strings,
    numbers, booleans and ``None`` arrive as they were sent (tuples as lists).
    """

    def __init__(self, types: type | Sequence[type] = (), *, sampler: Sampler | None = None,
                 seed: int | np.random.Generator | None = None) -> None:
        kinds = (types,) if isinstance(types, type) else tuple(types)
        for kind in kinds:
            if not isinstance(kind, type):
                raise TypeError(f"ObjectSpace types must be classes, got {kind!r}")
        #: The classes a value must be an instance of; empty: any object.
        self.types: tuple[type, ...] = kinds
        #: Draws ``sample()``'s values (``None``: ``sample()`` raises).
        self.sampler = sampler
        super().__init__(None, None, seed)

    @property
    def is_np_flattenable(self) -> bool:
        """False: an object has no flat array form."""
        return False

    def contains(self, x: Any) -> bool:
        """Whether ``x`` is an instance of one of the space's types (any object if none)."""
        return not self.types or isinstance(x, self.types)

    def sample(self, mask: Any = None, probability: Any = None) -> Any:
        """One value from ``sampler`` (``NotImplementedError`` without one; no masks)."""
        if mask is not None or probability is not None:
            raise ValueError(f"{self!r} samples without a mask or probability")
        if self.sampler is None:
            raise NotImplementedError(
                f"{self!r} has no sampler, so nothing to draw values from: give it "
                "sampler=, a function of a numpy Generator that returns one value")
        return self.sampler(self.np_random)

    def to_jsonable(self, sample_n: Iterable[Any]) -> list[Any]:
        return list(sample_n)

    def from_jsonable(self, sample_n: list[Any]) -> list[Any]:
        return list(sample_n)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ObjectSpace) and self.types == other.types

    def __repr__(self) -> str:
        if not self.types:
            return "ObjectSpace()"
        names = ", ".join(kind.__qualname__ for kind in self.types)
        return f"ObjectSpace({names})" if len(self.types) == 1 else f"ObjectSpace(({names}))"


# (Gymnasium dispatches this one on the type of the first space of the sequence it is given.)
def _differing_rows(spaces: Sequence[ObjectSpace]) -> Tuple[Any]:  # type: ignore[misc]
    """A batch of values of ``spaces``, one each, as aiovec's own batching makes it."""
    return copied_rows(spaces)


def _empty_rows(space: ObjectSpace, n: int = 1, fn: Callable[..., Any] = np.zeros
                ) -> tuple[None, ...]:
    """A batch before any value came: ``None`` in each row."""
    return (None,) * n


gym_utils.batch_space.register(ObjectSpace)(shared_rows)
gym_utils.batch_differing_spaces.register(ObjectSpace)(_differing_rows)
gym_utils.create_empty_array.register(ObjectSpace)(_empty_rows)
gym_utils.concatenate.register(ObjectSpace)(TUPLE_OF_VALUES)
