"""By when the server has given up on every sub-env a remote ``recv`` waits for: the client
waits that long, and ``TRANSPORT_GRACE`` more, for the answer before it gives up on its own."""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["Due", "latest_answer"]

#: A sent sub-env's deadline: when it passes if its step went out at once (on the client's
#: clock), and its seconds; ``None`` when it has none.
Due = tuple[float, float] | None


def latest_answer(dues: Iterable[Due], max_in_flight: int | None, now: float) -> float | None:
    """Seconds from ``now`` until the server has given up on every sub-env of ``dues`` (``None``:
    one has no deadline, so nothing bounds the wait).

    Under an in-flight cap, a queued step's deadline starts when the server dispatches it,
    which the client cannot see. Then the bound is the worst the cap allows: each slot busy
    until its step's deadline, the queue taken in order, so the last step starts at most the
    steps' total seconds over the cap from now, and ends at most its own seconds later."""
    listed = list(dues)
    if not listed:
        return 0.0
    known = [due for due in listed if due is not None]
    if len(known) < len(listed):
        return None
    if max_in_flight is None:
        return max(0.0, max(when for when, _ in known) - now)
    seconds = [step for _, step in known]
    return sum(seconds) / max_in_flight + max(seconds)
