#!/usr/bin/env python3
"""Run Gymnasium's own vector-env tests with ``aiovec.VectorEnv`` in place of ``AsyncVectorEnv``.

A manual check, not part of CI (it needs a checkout of Gymnasium's ``tests/`` tree; see
``tools/README.md``). It runs pytest twice on the same test files: once with
``gymnasium.vector.AsyncVectorEnv`` swapped for the target class (``_aiovec_swap_plugin.py``)
and, unless ``--no-baseline``, once without, then lists the tests that fail only with the swap.

    python tools/gymnasium_conformance.py [GYMNASIUM_TESTS] [--target aiovec:VectorEnv]
        [--no-baseline] [--python PY] [--timeout S] [--log-dir DIR] [-- PYTEST_ARGS...]

Exit status: 0 if nothing fails only with the swap, 1 if something does, 2 if a run broke or the
swap did not reach the test modules.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

TOOLS_DIR = Path(__file__).resolve().parent
DEFAULT_TESTS = os.environ.get("GYMNASIUM_TESTS", "/work/gymnasium-tests")
DEFAULT_PATHS = (
    "tests/vector",
    "tests/wrappers/vector",
    "tests/envs/registration/test_make_vec.py",
)
FAILING = ("failed", "error")
# Gymnasium's own pytest settings (pyproject.toml); used instead of any config found upwards.
PYTEST_INI = "[pytest]\nfilterwarnings =\n    ignore::DeprecationWarning:gymnasium.*:\n"


@dataclass
class RunResult:
    label: str
    exit_code: int
    results: dict[str, dict[str, str]] = field(default_factory=dict)
    checked_modules: dict[str, bool] = field(default_factory=dict)
    output_tail: str = ""

    def failing(self) -> set[str]:
        return {n for n, r in self.results.items() if r["outcome"] in FAILING}

    def counts(self) -> str:
        c = collections.Counter(r["outcome"] for r in self.results.values())
        order = ("passed", "failed", "error", "skipped", "xfailed", "xpassed")
        return ", ".join(f"{c[k]} {k}" for k in order if c[k]) or "no tests"


def find_root(path: Path) -> Path:
    """The directory holding Gymnasium's ``tests`` package (accepts the ``tests`` dir itself)."""
    path = path.resolve()
    if path.name == "tests" and (path / "vector").is_dir():
        path = path.parent
    if not (path / "tests" / "vector" / "testing_utils.py").is_file():
        sys.exit(f"error: {path} has no tests/vector/testing_utils.py (see tools/README.md)")
    return path


def run_pytest(
    label: str,
    target: str,
    root: Path,
    args: argparse.Namespace,
    workdir: Path,
) -> RunResult:
    report = workdir / f"{label}.json"
    ini = workdir / "pytest.ini"
    ini.write_text(PYTEST_INI)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TOOLS_DIR), env.get("PYTHONPATH")]))
    env["AIOVEC_SWAP_TARGET"] = target
    env["AIOVEC_SWAP_REPORT"] = str(report)
    env.setdefault("SDL_VIDEODRIVER", "dummy")  # pygame-based rendering tests, headless
    env.setdefault("SDL_AUDIODRIVER", "dummy")
    cmd = [
        args.python, "-m", "pytest", "-c", str(ini), "--rootdir", str(root),
        "-p", "_aiovec_swap_plugin", "-p", "no:cacheprovider", "-q", "-rN",
        f"--timeout={args.timeout}", *DEFAULT_PATHS, *args.pytest_args,
    ]  # fmt: skip
    print(f"[{label}] {' '.join(cmd)}", file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, check=False)
    output = proc.stdout + proc.stderr
    if args.log_dir:
        args.log_dir.mkdir(parents=True, exist_ok=True)
        (args.log_dir / f"{label}.log").write_text(output)
    result = RunResult(label, proc.returncode, output_tail="\n".join(output.splitlines()[-25:]))
    if report.is_file():
        data = json.loads(report.read_text())
        result.results = data["results"]
        result.checked_modules = data["checked_modules"]
    return result


def broken(run: RunResult) -> str | None:
    """Why a run cannot be trusted, if it cannot."""
    if not run.results:
        return f"pytest exited {run.exit_code} without a report:\n{run.output_tail}"
    if not run.checked_modules:
        return "no collected test module imports AsyncVectorEnv"
    missed = sorted(m for m, ok in run.checked_modules.items() if not ok)
    if missed:
        return f"AsyncVectorEnv is not the expected class in: {', '.join(missed)}"
    return None


def print_failures(title: str, run: RunResult, nodeids: set[str]) -> None:
    print(f"\n{title} ({len(nodeids)}):")
    for nodeid in sorted(nodeids):
        r = run.results[nodeid]
        print(f"  {r['outcome'].upper():6} {nodeid}\n         {r['gist']}")


def print_grouped(title: str, run: RunResult, nodeids: set[str]) -> None:
    print(f"\n{title} ({len(nodeids)}), by error:")
    gists = collections.Counter(run.results[n]["gist"] for n in nodeids)
    for gist, count in gists.most_common():
        print(f"  {count:4} x {gist}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "tests", nargs="?", type=Path, default=Path(DEFAULT_TESTS),
        help="Gymnasium checkout (or export) holding tests/ (default: $GYMNASIUM_TESTS or "
        "%(default)s)",
    )  # fmt: skip
    parser.add_argument("--target", default="aiovec:VectorEnv", help="module:attr to swap in")
    parser.add_argument("--python", default=sys.executable, help="interpreter to run pytest with")
    parser.add_argument("--timeout", type=float, default=120, help="per-test timeout (s)")
    parser.add_argument("--no-baseline", action="store_true", help="skip the run without swap")
    parser.add_argument("--log-dir", type=Path, help="keep each run's pytest output here")
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:split])
    args.pytest_args = argv[split + 1 :]  # everything after `--` goes to both pytest runs

    root = find_root(args.tests)
    revision_file = root / "GYMNASIUM_REVISION"
    revision = revision_file.read_text().strip() if revision_file.is_file() else "unknown"
    print(f"Gymnasium tests: {root} (revision {revision})", file=sys.stderr)

    with tempfile.TemporaryDirectory(prefix="aiovec-conformance-") as tmp:
        swapped = run_pytest("swapped", args.target, root, args, Path(tmp))
        baseline = None if args.no_baseline else run_pytest("baseline", "", root, args, Path(tmp))

    print(f"\nGymnasium tests {root} @ {revision}")
    print(f"with {args.target} as AsyncVectorEnv: {swapped.counts()}")
    if baseline is not None:
        print(f"with Gymnasium's AsyncVectorEnv:     {baseline.counts()}")
    problems = [f"{r.label}: {why}" for r in (swapped, baseline) if r and (why := broken(r))]
    if problems:
        print("\nRUN BROKEN:\n" + "\n".join(problems))
        return 2

    only_swapped = swapped.failing()
    if baseline is not None:
        shared = only_swapped & baseline.failing()
        only_swapped -= shared
        passing = {n for n, r in swapped.results.items() if r["outcome"] == "passed"}
        fixed = baseline.failing() & passing
        print_failures("Failing only with the swap", swapped, only_swapped)
        print_grouped("Failing with and without the swap (environment)", swapped, shared)
        if fixed:
            print(f"\nPassing only with the swap ({len(fixed)}): {', '.join(sorted(fixed))}")
        missing = set(baseline.results) ^ set(swapped.results)
        if missing:
            print(f"\nIn only one of the runs ({len(missing)}): {', '.join(sorted(missing))}")
    else:
        print_failures("Failing with the swap", swapped, only_swapped)
    return 1 if only_swapped else 0


if __name__ == "__main__":
    sys.exit(main())
