"""Waiting for descriptors to turn readable, whatever their numbers.

``select.select`` refuses descriptor numbers from 1024 (``FD_SETSIZE``) up, which a training
process with many open files (sockets, data sets, a deep-learning framework) reaches;
``select.poll`` has no such limit. Only a Python without ``poll`` (Windows) uses ``select``.
"""

from __future__ import annotations

import math
import select
from collections.abc import Collection

__all__ = ["readable"]


def readable(descriptors: Collection[int], timeout: float | None = 0.0) -> set[int]:
    """Those of ``descriptors`` that are readable, hung up or in error (a read tells which),
    waiting up to ``timeout`` seconds for the first (``None``: for as long as it takes; the
    default, 0, only looks). Empty when the time ran out."""
    if timeout is not None:
        timeout = max(timeout, 0.0)  # poll would take a negative timeout for "forever"
    if not hasattr(select, "poll"):  # pragma: no cover - Windows
        return set(select.select(list(descriptors), [], [], timeout)[0])
    poller = select.poll()
    for descriptor in descriptors:
        poller.register(descriptor, select.POLLIN)
    # Rounded up: a wait cut a fraction of a millisecond short would make its caller spin.
    milliseconds = None if timeout is None else math.ceil(timeout * 1000)
    return {descriptor for descriptor, _ in poller.poll(milliseconds)}
