"""The public surface: ``__all__`` is complete and every public name reports ``aiovec``."""

from __future__ import annotations

import re
import subprocess
import sys
import types
from pathlib import Path

import aiovec
import aiovec.testing


def test_all_lists_exactly_the_public_names() -> None:
    assert aiovec.AsyncVectorEnv  # the first use of a name loads every one of them
    public = {name for name in vars(aiovec)
              if not name.startswith("_") and not isinstance(getattr(aiovec, name),
                                                             types.ModuleType)}
    assert set(aiovec.__all__) == public
    assert list(aiovec.__all__) == sorted(aiovec.__all__)


def test_public_names_report_aiovec_as_their_module() -> None:
    for name in aiovec.__all__:
        assert getattr(aiovec, name).__module__ == "aiovec", name


def test_dir_lists_every_public_name() -> None:
    assert set(aiovec.__all__) <= set(dir(aiovec))


def test_a_worker_process_does_not_load_the_event_loop_side() -> None:
    """Worker processes import aiovec's worker module: the public API's event-loop side
    (the core, the shim's thread, anyio) loads on first use, never in them."""
    check = ("import sys, aiovec._backends._process._worker; "
             "print(sorted(m for m in ('aiovec._core._vector_env', 'aiovec._shim', 'anyio') "
             "if m in sys.modules))")
    output = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True,
                            check=True, cwd=Path(__file__).resolve().parent.parent).stdout
    assert output.strip() == "[]"
    assert aiovec.VectorEnv.__module__ == "aiovec"  # here, in the parent, all of it loads


def test_testing_module_is_curated() -> None:
    """``aiovec.testing.__all__`` lists exactly its public names (none missing, none extra)."""
    public = {name for name in vars(aiovec.testing)
              if not name.startswith("_") and not isinstance(getattr(aiovec.testing, name),
                                                             types.ModuleType)}
    assert set(aiovec.testing.__all__) == public
    assert len(aiovec.testing.__all__) == len(public)  # no name listed twice


def test_version() -> None:
    assert isinstance(aiovec.__version__, str) and aiovec.__version__.count(".") == 2


def test_the_api_reference_documents_every_public_name() -> None:
    reference = (Path(__file__).resolve().parent.parent / "docs" / "api.md").read_text()
    documented = set(re.findall(r"^::: aiovec\.(\w+)$", reference, flags=re.MULTILINE))
    assert documented == set(aiovec.__all__)
