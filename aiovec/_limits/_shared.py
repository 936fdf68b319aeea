"""A vector env's declared limits while it lives: the ``Broker``, the ``Service`` thread
while running, and the takers each backend binds around its sub-envs' calls."""

from __future__ import annotations

from typing import Any

from aiovec._limits._broker import Broker
from aiovec._limits._limit import LimitUsage, WorkerLimits, check_limits
from aiovec._limits._service import Service
from aiovec._limits._take import opened
from aiovec._limits._takers import LocalTaker

__all__ = ["SharedLimits"]

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
            self.broker.reopen()
            self._service = Service(self.broker)
            opened(self.broker, True)

    def for_workers(self) -> WorkerLimits:
        self.open()
        assert self._service is not None
        return self._service.address, self.broker.names

    def for_remote_workers(self, host: str) -> WorkerLimits:
        """As ``for_workers``, over TCP at ``host`` (Ray actors, maybe on other machines)."""
        self.open()
        assert self._service is not None
        return self._service.listen_tcp(host), self.broker.names

    def local_taker(self, *, can_wait: bool = True) -> LocalTaker:
        return LocalTaker(self.broker, can_wait=can_wait)

    def close(self) -> None:
        """Stop the service thread (idempotent); what worker processes held is given back."""
        service, self._service = self._service, None
        if service is not None:
            service.close()
        if self._declared:
            opened(self.broker, False)
            self.broker.close()  # a thread still waiting (abandoned at a deadline) wakes up

    def usage(self) -> dict[str, LimitUsage]:
        return self.broker.usage()
