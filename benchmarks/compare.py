"""Before/after in one run: a benchmark script of two checkouts, interleaved, ratios side by side.

Each round runs the script once from the old checkout and once from this one (the order
alternates between rounds, so drift of a noisy machine hits both alike), each importing its
own ``aiovec`` (``PYTHONPATH``). Every table row with a "vs SyncVectorEnv" column (or another
of ``RATIO_COLUMNS``, e.g. "time vs bare gather") is compared: that ratio is measured within
each run, against a contender that did not change, so it cancels what the machine did
meanwhile. The report gives each side's median ratio, the
per-round values, and new/old.

Run (the old commit checked out beside this one, e.g. ``git worktree add /tmp/old <commit>``)::

    .venv/bin/python benchmarks/compare.py --old /tmp/old --rounds 2 -- run.py --repeats 3
    .venv/bin/python benchmarks/compare.py --old /tmp/old --rounds 3 -- overhead.py --repeats 5

``--same-script`` runs this checkout's script for both sides (each still importing its own
``aiovec``): for a benchmark, or a section of one, that the old checkout does not have yet.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from harness import arguments, read_tables

HERE = Path(__file__).resolve().parent
#: Columns holding a within-run ratio against Gymnasium's SyncVectorEnv, and whether a larger
#: value is better (throughput ratio) or worse (time ratio).
RATIO_COLUMNS = {"vs SyncVectorEnv": True, "% of limit": True, "time vs SyncVectorEnv": False,
                 "time vs bare gather": False, "CPU time vs bare gather": False,
                 "time vs no validation": False}

Row = tuple[str, str]  # (section, row label)


def run_once(tree: Path, script: str, script_arguments: Sequence[str], output: Path,
             script_tree: Path | None = None) -> str:
    """Run ``script`` from ``script_tree``'s ``benchmarks/`` (default: ``tree``'s) with
    ``tree``'s aiovec; the report text."""
    environment = dict(os.environ, PYTHONPATH=str(tree))
    extra = ["--output", str(output)] if script == "run.py" else []
    benchmarks = (script_tree or tree) / "benchmarks"
    completed = subprocess.run(
        [sys.executable, str(benchmarks / script), *script_arguments, *extra],
        cwd=tree, env=environment, capture_output=True, text=True, check=False)
    if completed.returncode:
        raise SystemExit(f"{script} in {tree} failed:\n{completed.stdout}\n{completed.stderr}")
    report = output / "latest.md"
    return report.read_text() if script == "run.py" and report.exists() else completed.stdout


def ratios(report: str) -> dict[Row, tuple[float, bool]]:
    """Every within-run ratio (``RATIO_COLUMNS``) in a report's markdown tables, by section
    and row."""
    found: dict[Row, tuple[float, bool]] = {}
    for section, rows in read_tables(report).items():
        for cells in rows:
            columns = RATIO_COLUMNS.keys() & set(cells)
            for column in columns:
                match = re.fullmatch(r"([\d.]+)(?:x|%)", cells[column])
                if match is None:
                    continue
                first = next(iter(cells.values()))
                label = first if "num_envs" not in cells else f"{first}, {cells['num_envs']} envs"
                if "loop" in cells:
                    label += f", {cells['loop']}"
                if len(columns) > 1:  # say which ratio it is
                    label += f" ({column})"
                found[(section[:60], label)] = (float(match.group(1)), RATIO_COLUMNS[column])
    return found


def main(argv: Sequence[str] | None = None) -> None:
    parser = arguments(__doc__)
    parser.add_argument("--old", type=Path, required=True, help="the old checkout's root")
    parser.add_argument("--new", type=Path, default=HERE.parent,
                        help="the new checkout's root (default: this one)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--same-script", action="store_true",
                        help="run the new checkout's script on both sides (each with its own "
                             "aiovec)")
    parser.add_argument("script", help="a script in benchmarks/, e.g. run.py")
    parser.add_argument("arguments", nargs=argparse.REMAINDER, help="the script's arguments")
    args = parser.parse_args(argv)
    script_arguments = [a for a in args.arguments if a != "--"]
    sides = {"old": args.old.resolve(), "new": args.new.resolve()}
    values: dict[str, dict[Row, list[float]]] = {"old": {}, "new": {}}
    direction: dict[Row, bool] = {}
    with tempfile.TemporaryDirectory() as scratch:
        for round_index in range(args.rounds):
            order = ["old", "new"] if round_index % 2 == 0 else ["new", "old"]
            for side in order:
                output = Path(scratch) / f"{side}-{round_index}"
                output.mkdir()
                print(f"round {round_index + 1}/{args.rounds}: {side} ({sides[side]})",
                      flush=True)
                for row, (ratio, better) in ratios(
                        run_once(sides[side], args.script, script_arguments, output,
                                 sides["new"] if args.same_script else None)).items():
                    values[side].setdefault(row, []).append(ratio)
                    direction[row] = better
    load = os.getloadavg()[0]
    print(f"\n# {args.script} {' '.join(script_arguments)}: old {sides['old']} vs new "
          f"{sides['new']}, {args.rounds} interleaved rounds; load average at end {load:.2f}\n")
    print("| section | row | old (median; per round) | new (median; per round) | new/old |")
    print("|---|---|---|---|---:|")
    for row in sorted(set(values["old"]) & set(values["new"])):
        old, new = values["old"][row], values["new"][row]
        change = statistics.median(new) / statistics.median(old)
        if not direction[row]:  # a time ratio: smaller is better, so invert for "new/old"
            change = 1 / change
        print(f"| {row[0]} | {row[1]} | {statistics.median(old):.2f}x; "
              f"{', '.join(f'{v:.2f}' for v in old)} | {statistics.median(new):.2f}x; "
              f"{', '.join(f'{v:.2f}' for v in new)} | {change:.2f} |")
    print("\nnew/old > 1: the new checkout does better against its within-run reference "
          "(SyncVectorEnv, or a bare gather; time ratios are inverted so that > 1 is better "
          "there too).")


if __name__ == "__main__":
    main()
