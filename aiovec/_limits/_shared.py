"""A vector env's declared limits while it lives: the ``Broker``, the ``Service`` thread
while running, and the takers each backend binds around its sub-envs' calls."""

from __future__ import annotations

from typing import Any

from aiovec._limits._broker import Broker
from aiovec._limits._limit import Address, LimitUsage, check_limits
from aiovec._limits._service import Service
from aiovec._limits._take import LocalTaker

__all__ = ["SharedLimits", "WorkerLimits"]

#: What a worker process needs to take its vector env's limits: where, and their names.
WorkerLimits = tuple[Address, tuple[str, ...]]


class SharedLimits:
    """``limits=`` of one vector env (checked here), shared by every backend instance it makes
    (restarts included): ``open`` at start, ``close`` once closed. False when it declares none:
    then nothing runs and backends are given ``None``."""

    def __init__(self, limits: Any) -> None:
        checked = check_limits(limits)
        self.broker = Broker(checked or {})
        self._declared = checked is not None
        self._service: Service | None = None

    def __bool__(self) -> bool:
        return self._declared

    def open(self) -> None:
        """Start the service thread (idempotent; with limits declared): it grants rate-held
        takes when their time comes, and serves worker processes."""
        if self._service is None and self._declared:
            self._service = Service(self.broker)

    def for_workers(self) -> WorkerLimits:
        self.open()
        assert self._service is not None
        return self._service.address, self.broker.names

    def local_taker(self, *, can_wait: bool = True) -> LocalTaker:
        return LocalTaker(self.broker, can_wait=can_wait)

    def close(self) -> None:
        """Stop the service thread (idempotent); what worker processes held is given back."""
        service, self._service = self._service, None
        if service is not None:
            service.close()
        if self._declared:
            self.broker.close()  # a thread still waiting (abandoned at a deadline) wakes up

    def usage(self) -> dict[str, LimitUsage]:
        return self.broker.usage()
