"""Small in-process environments for tests that need to misbehave on cue."""

from __future__ import annotations

import threading
from typing import Any

from aiovec.testing import CountingEnv


class RaisingEnv(CountingEnv):
    """Raises ``error`` once, in the ``phase`` call ("reset" or "step") numbered ``after``."""

    def __init__(self, phase: str, after: int = 0,
                 error: Exception | None = None) -> None:
        super().__init__()
        self.phase, self.after = phase, after
        self.error = error or ValueError(f"injected failure in {phase}")

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> Any:
        if self.phase == "reset" and self.resets == self.after:
            self.resets += 1
            raise self.error
        return super().reset(seed=seed, options=options)

    def step(self, action: int) -> Any:
        if self.phase == "step" and self.steps == self.after:
            self.steps += 1
            raise self.error
        return super().step(action)


class GatedEnv(CountingEnv):
    """``step`` announces itself on ``entered`` and then waits for ``release`` (if gated)."""

    def __init__(self, gated: bool = True) -> None:
        super().__init__()
        self.gated = gated
        self.entered = threading.Event()
        self.release = threading.Event()
        self.thread_ids: set[int] = {threading.get_ident()}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        self.thread_ids.add(threading.get_ident())
        return super().reset(seed=seed, options=options)

    def step(self, action: int) -> Any:
        self.thread_ids.add(threading.get_ident())
        if self.gated:
            self.entered.set()
            if not self.release.wait(timeout=60):
                raise TimeoutError("the test never released this env")
        return super().step(action)

    def close(self) -> None:
        self.thread_ids.add(threading.get_ident())
        super().close()


def failing_factory() -> CountingEnv:
    raise RuntimeError("the factory exploded")
