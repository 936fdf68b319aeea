"""The package's shape, checked: one-way layers, autoreset written once
(``docs/architecture.md`` describes the layers). Modules are split by job, not by a line
count (there is no cap on a module's length)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "aiovec"


def _modules(folder: str) -> list[Path]:
    return sorted((PACKAGE / folder).rglob("*.py"))


def _imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports, at any depth (``TYPE_CHECKING`` blocks and function
    bodies included), as absolute names."""
    package = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts[:-1])
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the module's package
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


@pytest.mark.parametrize("path", _modules("_core"), ids=lambda path: path.name)
def test_the_core_imports_no_backend(path: Path) -> None:
    """Backends depend on the core, never the reverse: the core loads them by name
    (``aiovec._core._selection``)."""
    backwards = sorted(name for name in _imported_modules(path)
                       if name == "aiovec._backends" or name.startswith("aiovec._backends."))
    assert not backwards, f"{path.name} imports {backwards}"


def test_importing_aiovec_loads_no_backend() -> None:
    """In a fresh interpreter: the public API imports no backend (and so no Ray) until a
    vector env is made on one."""
    code = ("import sys, aiovec; aiovec.AsyncVectorEnv, aiovec.VectorEnv, aiovec.make_vec; "
            "print(sorted(m for m in sys.modules if m.startswith(('aiovec._backends', 'ray'))))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True).stdout.strip()
    assert loaded == "[]"


#: The modules whose envs the tests hand to worker processes and Ray actors: each one imports
#: them to make its sub-envs.
ENV_MODULES = ("aiovec.testing", "tests.envs", "tests.faults.envs", "tests.object_envs",
               "tests.multiagent.envs", "tests.core.held")


def test_modules_of_test_envs_do_not_import_pytest() -> None:
    """In a fresh interpreter, as in a worker: importing pytest cost each worker ~0.14 s of
    CPU (CONTRIBUTING.md, where the suite's time goes)."""
    code = (f"import importlib, sys; [importlib.import_module(m) for m in {ENV_MODULES!r}]; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pytest', '_pytest')))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True, cwd=PACKAGE.parent).stdout.strip()
    assert loaded == "[]"


def test_autoreset_is_written_once() -> None:
    """Only ``_backends/_autoreset.py`` decides when a sub-env resets on its own: no other
    backend module names the next-step or same-step mode."""
    deciding = set()
    for path in _modules("_backends"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Attribute) and node.attr in ("NEXT_STEP", "SAME_STEP")
                    and isinstance(node.value, ast.Name) and node.value.id == "AutoresetMode"):
                deciding.add(path.name)
    assert deciding == {"_autoreset.py"}


BENCHMARKS = PACKAGE.parent / "benchmarks"


#: What only ``benchmarks/harness.py`` does: parse a script's arguments, and read the machine,
#: the date and the versions for a report's header.
HARNESS_ONLY = ("ArgumentParser(", "/proc/cpuinfo", "datetime.now(", "python_version()",
                "sys.version")


def test_benchmarks_share_one_harness() -> None:
    """Every script takes its arguments and writes its report's header through the harness, so
    that they all spell them one way."""
    written_again = {path.name: [text for text in HARNESS_ONLY if text in path.read_text()]
                     for path in sorted(BENCHMARKS.glob("*.py")) if path.name != "harness.py"}
    assert not {name: found for name, found in written_again.items() if found}
