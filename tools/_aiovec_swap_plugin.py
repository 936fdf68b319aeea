"""Pytest plugin for ``gymnasium_conformance.py``: swap in a class for ``AsyncVectorEnv``.

Loaded with ``-p _aiovec_swap_plugin`` (``tools/`` on ``PYTHONPATH``), so it runs before any test
module is imported. Driven by environment variables:

``AIOVEC_SWAP_TARGET``
    ``"module:attribute"`` of the class that replaces ``gymnasium.vector.AsyncVectorEnv``
    (and ``gymnasium.vector.async_vector_env.AsyncVectorEnv``). Empty or unset: no swap, which
    gives the baseline run.
``AIOVEC_SWAP_REPORT``
    Path of a JSON file to write: the target, the test modules whose ``AsyncVectorEnv`` name was
    checked, and every test's outcome with a one-line gist of its error.

Test modules bind the name at import (``from gymnasium.vector import AsyncVectorEnv``) and
``gymnasium.make_vec(..., vectorization_mode="async")`` looks up ``gymnasium.vector.AsyncVectorEnv``
when called, so patching both module attributes before collection reaches every construction.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any

import gymnasium.vector
import gymnasium.vector.async_vector_env
import pytest

ORIGINAL_ASYNC_VECTOR_ENV = gymnasium.vector.AsyncVectorEnv
_PROJECT_ROOT = Path(__file__).resolve().parents[1]

_target: Any = None
_target_spec = ""
_checked_modules: dict[str, bool] = {}
_results: dict[str, dict[str, str]] = {}


def _load_target(spec: str) -> Any:
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise pytest.UsageError(f"AIOVEC_SWAP_TARGET must be 'module:attribute', got {spec!r}")
    if importlib.util.find_spec(module_name.split(".")[0]) is None:
        # aiovec not installed in this interpreter: use the checkout this plugin lives in. Appended,
        # so the project's own `tests` package cannot shadow Gymnasium's.
        sys.path.append(str(_PROJECT_ROOT))
    try:
        obj: Any = importlib.import_module(module_name)
        for part in attribute.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as e:
        raise pytest.UsageError(f"cannot load AIOVEC_SWAP_TARGET {spec!r}: {e!r}") from e
    return obj


def pytest_configure(config: pytest.Config) -> None:
    global _target, _target_spec
    _target_spec = os.environ.get("AIOVEC_SWAP_TARGET", "").strip()
    if not _target_spec:
        return
    _target = _load_target(_target_spec)
    gymnasium.vector.AsyncVectorEnv = _target  # type: ignore[misc]
    gymnasium.vector.async_vector_env.AsyncVectorEnv = _target  # type: ignore[misc]


def pytest_unconfigure(config: pytest.Config) -> None:
    gymnasium.vector.AsyncVectorEnv = ORIGINAL_ASYNC_VECTOR_ENV  # type: ignore[misc]
    gymnasium.vector.async_vector_env.AsyncVectorEnv = ORIGINAL_ASYNC_VECTOR_ENV  # type: ignore[misc]


def pytest_report_header(config: pytest.Config) -> str:
    if _target is None:
        return "aiovec swap: off (plain gymnasium.vector.AsyncVectorEnv)"
    return f"aiovec swap: gymnasium.vector.AsyncVectorEnv -> {_target_spec} ({_target!r})"


def pytest_make_parametrize_id(config: pytest.Config, val: object, argname: str) -> str | None:
    # Keep test ids such as `test_vector_return_info[AsyncVectorEnv]` identical to the baseline's.
    if _target is not None and val is _target:
        return "AsyncVectorEnv"
    return None


def pytest_collection_finish(session: pytest.Session) -> None:
    for item in session.items:
        module = getattr(item, "module", None)
        if module is None or not hasattr(module, "AsyncVectorEnv"):
            continue
        expected = _target if _target is not None else ORIGINAL_ASYNC_VECTOR_ENV
        _checked_modules[module.__name__] = module.AsyncVectorEnv is expected


def _gist(report: pytest.TestReport) -> str:
    """One line: the test's failing line (file:line), then the error message's lines."""
    longrepr = report.longrepr
    if isinstance(longrepr, tuple):  # skips: (path, line, reason)
        return str(longrepr[2])
    crash = getattr(longrepr, "reprcrash", None)
    message = str(crash.message if crash is not None else longrepr)
    crash_at = f"({Path(crash.path).name}:{crash.lineno})" if crash is not None else ""
    where = crash_at
    test_file = Path(report.location[0]).name
    for entry in getattr(getattr(longrepr, "reprtraceback", None), "reprentries", []):
        loc = getattr(entry, "reprfileloc", None)
        source = [ln[1:].strip() for ln in getattr(entry, "lines", []) if ln.startswith(">")]
        if loc is not None and source and Path(loc.path).name == test_file:
            test_at = f"({test_file}:{loc.lineno})"  # the innermost line of the test file
            where = f"{source[-1]} {test_at}" + (f" {crash_at}" if crash_at != test_at else "")
    text = " / ".join(line.strip() for line in message.strip().splitlines() if line.strip())
    return f"{where.strip()}: {text}"[:400]


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    previous = _results.get(report.nodeid)
    if previous is not None and previous["outcome"] in ("failed", "error"):
        return  # keep the first failure; a teardown error after a failed call adds nothing
    if report.failed:
        outcome = "failed" if report.when == "call" else "error"
    elif report.skipped:
        outcome = "xfailed" if hasattr(report, "wasxfail") else "skipped"
    elif report.when == "call":
        outcome = "xpassed" if hasattr(report, "wasxfail") else "passed"
    else:
        return
    gist = "" if outcome == "passed" else _gist(report)
    _results[report.nodeid] = {"outcome": outcome, "gist": gist}


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    path = os.environ.get("AIOVEC_SWAP_REPORT")
    if not path:
        return
    payload = {
        "target": _target_spec,
        "checked_modules": _checked_modules,
        "exitstatus": int(exitstatus),
        "results": _results,
    }
    Path(path).write_text(json.dumps(payload, indent=1, sort_keys=True))
