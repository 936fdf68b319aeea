"""What the backends share beyond the interface they implement (``aiovec._core._backend``)."""

from __future__ import annotations

__all__ = ["split_into_shares", "workers_within"]


def workers_within(num_workers: int | None, max_concurrency: int | None, default: int) -> int:
    """How many workers (or actors) to start so that at most ``max_concurrency`` sub-envs
    execute at once, as Gymnasium's ``max_concurrency`` means: a worker steps its sub-envs
    one at a time, so that is at most one sub-env per worker."""
    if max_concurrency is None:
        return num_workers or default
    if num_workers is None:
        return min(default, max_concurrency)
    if num_workers > max_concurrency:
        raise ValueError(
            f"num_workers={num_workers} exceeds max_concurrency={max_concurrency}: each worker "
            "steps one sub-env at a time, so at most num_workers sub-envs execute at once; "
            "leave num_workers out (aiovec then starts at most max_concurrency workers) or "
            "pass one no larger")
    return num_workers


def split_into_shares(num_envs: int, num_hosts: int) -> list[range]:
    """Sub-envs ``0..num_envs-1`` split into ``num_hosts`` contiguous shares, as even as can be
    (sizes differ by at most one): each worker process or Ray actor hosts one share."""
    bounds = [num_envs * index // num_hosts for index in range(num_hosts + 1)]
    return [range(bounds[index], bounds[index + 1]) for index in range(num_hosts)]
