"""The headline table: the real workloads over the runs kept in ``results/``, rendered once.

README.md and the benchmarks guide (``docs/guide/benchmarks.md``) hold this table between the
``BEGIN``/``END`` markers below; both are written by this script from the same result files, and
``tests/test_headline_table.py`` checks that neither differs from what it renders, so the two
can never disagree. After a new run of ``real_envs.py``, list its report in ``RUNS`` and::

    .venv/bin/python benchmarks/headline.py           # rewrite both documents
    .venv/bin/python benchmarks/headline.py --check   # exit 1 if either is out of date
"""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path

from harness import arguments, number, read_tables

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
#: The reports of ``real_envs.py`` the table spans, oldest first.
RUNS = [HERE / "results" / name for name in ("real_envs.md", "real_envs_run2.md",
                                             "real_envs_run3.md")]
#: The documents that show the table, between the markers.
DOCUMENTS = [ROOT / "README.md", ROOT / "docs" / "guide" / "benchmarks.md"]
BEGIN = "<!-- headline table: written by benchmarks/headline.py from benchmarks/results -->"
END = "<!-- end of the headline table -->"

TIMES, DASH = "\N{MULTIPLICATION SIGN}", "\N{EN DASH}"  # as the documents write them
CELLS = [("Pong", 8), ("Pong", 32), ("HalfCheetah", 8), ("HalfCheetah", 32), ("CartPole", 32)]
LIMIT = "limit: 2 processes x n/2 envs, no IPC"
AIOVEC = "aiovec process (await)"
RATE = "steps/s (median)"
#: (column heading, the report's contender row, the report's column, unit shown)
COLUMNS = [
    ("2-core limit", LIMIT, RATE, ""),
    ("gymnasium Sync", "gymnasium SyncVectorEnv", RATE, ""),
    ("gymnasium Async", "gymnasium AsyncVectorEnv (shm)", RATE, ""),
    ("EnvPool (C++)", "EnvPool (C++, 2 threads)", RATE, ""),
    ("aiovec process, `await`", AIOVEC, RATE, ""),
    ("aiovec: % of limit", AIOVEC, "% of limit", " %"),
    ("aiovec vs Sync", AIOVEC, "vs SyncVectorEnv", TIMES),
]


def _span(values: Sequence[float], unit: str) -> str:
    """The range of one figure over the runs, written as the reports write it."""
    shown = [f"{v:.2f}" if unit == TIMES else f"{v:,.0f}" for v in (min(values), max(values))]
    return (shown[0] if shown[0] == shown[1] else DASH.join(shown)) + unit


def _bullets(report: str) -> list[str]:
    """The ``- ...`` lines of a report's header (above its first table)."""
    head = report.split("\n## ", 1)[0]
    return [line[2:].strip() for line in head.splitlines() if line.startswith("- ")]


def _stated(reports: Sequence[str], key: str, older: str = "") -> str:
    """What the reports' headers say on their ``- key: ...`` line (in older reports, the line
    holding ``older``), each distinct statement once."""

    def said(report: str) -> str:
        lines = _bullets(report)
        return next((line.removeprefix(f"{key}:").strip() for line in lines
                     if line.startswith(f"{key}:") or (older and older in line)), "not stated")

    return "; ".join(dict.fromkeys(said(report) for report in reports))


def render(runs: Sequence[Path] = RUNS) -> str:
    """The table, its caption and the machine, from ``runs``."""
    reports = [path.read_text() for path in runs]
    tables = [read_tables(report) for report in reports]
    lines = ["| workload (n) | " + " | ".join(heading for heading, *_ in COLUMNS) + " |",
             "|---|" + "---:|" * len(COLUMNS)]
    for workload, num_envs in CELLS:
        cells = []
        for _, contender, column, unit in COLUMNS:
            values = [number(row[column]) for table in tables
                      for row in table.get(f"{workload} n={num_envs}", [])
                      if row["contender"] == contender]
            found = [value for value in values if value is not None]
            cells.append(_span(found, unit) if found else "—")
        lines.append(f"| {workload} ({num_envs}) | " + " | ".join(cells) + " |")
    names = ", ".join(f"`{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}`"
                      for path in runs)
    caption = (
        f"Sub-env steps per second; each cell is the range over {len(runs)} runs of "
        f"`benchmarks/real_envs.py` ({names}), each figure the median of its interleaved "
        "repeats (the per-repeat spread is in the reports). Machine: "
        f"{_stated(reports, 'machine')}. Software: {_stated(reports, 'versions')}. "
        f"Method: {_stated(reports, 'method', 'interleaved repeats')}.")
    return "\n".join([*lines, "", *textwrap.wrap(caption, 96, break_on_hyphens=False)])


def replace_block(text: str, table: str) -> str:
    """``text`` with what stands between the markers replaced by ``table``."""
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    return f"{text[:start]}\n{table}\n{text[end:]}"


def block(text: str) -> str:
    """What stands between the markers in ``text``."""
    return text[text.index(BEGIN) + len(BEGIN):text.index(END)].strip("\n")


def main(argv: Sequence[str] | None = None) -> None:
    parser = arguments(__doc__)
    parser.add_argument("--check", action="store_true",
                        help="change nothing; exit 1 if a document is out of date")
    args = parser.parse_args(argv)
    table = render()
    stale = [path for path in DOCUMENTS if block(path.read_text()) != table]
    for path in stale:
        if args.check:
            print(f"{path.relative_to(ROOT)}: the headline table is out of date", file=sys.stderr)
        else:
            path.write_text(replace_block(path.read_text(), table))
            print(f"wrote {path.relative_to(ROOT)}")
    if args.check and stale:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
