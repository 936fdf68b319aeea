"""Real servers for the serve and remote tests: uvicorn in its own process on 127.0.0.1,
stopped with SIGTERM at the end; nothing it started may outlive it, and it must exit cleanly.

``start_server`` runs examples/serve/server.py (a fresh one per test); ``serve`` runs one of
the library configurations of ``tests/serve/apps.py``, shared by a test module.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.leaks import descendants, wait_for_exit, worker_processes_of

ROOT = Path(__file__).resolve().parents[2]
SERVER = ROOT / "examples" / "serve" / "server.py"


@dataclass
class Server:
    url: str
    process: subprocess.Popen[str]

    def workers(self) -> set[int]:
        """aiovec's sub-env worker processes under the server."""
        return worker_processes_of(self.process.pid)

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM, then wait; returns the exit code. Everything it started must be gone."""
        below = descendants(self.process.pid)
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError(f"the server did not stop within {timeout} s") from None
        assert wait_for_exit(sorted(below), 15) == [], "the server's children did not exit"
        return code

    def stop_cleanly(self) -> None:
        code = self.stop()
        _, errors = self.process.communicate()
        assert code == 0, errors
        assert "Traceback" not in errors, errors


def launch(command: list[str]) -> Server:
    """Run ``command`` and wait for its ``serving on URL`` line (printed once started)."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, cwd=ROOT)
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line.startswith("serving on "):
        process.kill()
        _, errors = process.communicate()
        raise AssertionError(f"the server did not start: {line!r} {errors}")
    return Server(line.split()[-1], process)


@pytest.fixture
def start_server() -> Iterator[Callable[..., Server]]:
    """Start examples/serve/server.py with extra arguments; stopped (and checked clean) at
    teardown."""
    started: list[Server] = []

    def start(*args: str) -> Server:
        server = launch([sys.executable, str(SERVER), "--port", "0", *args])
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop_cleanly()


@pytest.fixture(scope="module")
def serve() -> Iterator[Callable[[str], Server]]:
    """``serve(name)``: the server of ``tests/serve/apps.py``'s ``APPS[name]``, started once
    for the test module and stopped (checked clean) after its last test."""
    running: dict[str, Server] = {}

    def start(name: str) -> Server:
        if name not in running:
            running[name] = launch([sys.executable, "-m", "tests.serve.apps", name])
        return running[name]

    yield start
    for server in running.values():
        server.stop_cleanly()
