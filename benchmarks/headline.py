"""The tables the documents quote, rendered once from the reports kept in ``results/``.

- The headline table: the real workloads over the runs of ``real_envs.py`` in ``RUNS``, held by
  README.md and the benchmarks guide (``docs/guide/benchmarks.md``) between ``BEGIN``/``END``.
- The agentic table: the last full run of ``agentic.py`` (``results/agentic.md``), held by
  README.md and the agentic guide (``docs/guide/agentic.md``) between ``AGENTIC_BEGIN``/``_END``.

Each document is written by this script from the same result files, and
``tests/test_headline_table.py`` checks that none differs from what it renders, so they can
never disagree. After a new run of ``real_envs.py``, list its report in ``RUNS``; after a full
run of ``agentic.py``, nothing to list; then::

    .venv/bin/python benchmarks/headline.py           # rewrite both documents
    .venv/bin/python benchmarks/headline.py --check   # exit 1 if either is out of date
"""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Callable, Sequence
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

AGENTIC = HERE / "results" / "agentic.md"
AGENTIC_DOCUMENTS = [ROOT / "README.md", ROOT / "docs" / "guide" / "agentic.md"]
AGENTIC_BEGIN = ("<!-- agentic table: written by benchmarks/headline.py from "
                 "benchmarks/results/agentic.md -->")
AGENTIC_END = "<!-- end of the agentic table -->"
#: The columns of the agentic report the documents show.
AGENTIC_COLUMNS = ("episodes/s", "% of X*", "turns/s vs hand-written", "mean batch / B",
                   "p99 latency", "spread")

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


def render_agentic(path: Path = AGENTIC) -> str:
    """The agentic table: a row per variant and contender, X* per variant, the target checks
    and the machine, from the report at ``path``."""
    report = path.read_text()
    heading = "| variant (X*) | contender | " + " | ".join(AGENTIC_COLUMNS) + " |"
    lines = [heading, "|---|---|" + "---:|" * len(AGENTIC_COLUMNS)]
    for section in report.split("\n## ")[1:]:
        variant = section.split(":", 1)[0]
        bound = next((line.split("(")[0].removeprefix("X* = ").strip()
                      for line in section.splitlines() if line.startswith("X* = ")), None)
        if bound is None:
            continue
        for _, rows in read_tables(section).items():
            for row in rows:
                cells = [row.get(column, "—") for column in AGENTIC_COLUMNS]
                lines.append(f"| {variant} ({bound}) | {row['contender']} | "
                             + " | ".join(cells) + " |")
    checks = report.split("## Target checks", 1)[1].split("```")[1].strip("\n")
    caption = (
        f"Medians of the interleaved repeats of one full run of `benchmarks/agentic.py` "
        f"(`{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}`, which has every "
        "column and the formulas of X*); spread = (max-min)/median of episodes/s. "
        f"Machine: {_stated([report], 'machine')}. Software: {_stated([report], 'versions')}. "
        f"Date: {_stated([report], 'date')}.")
    return "\n".join([*lines, "", "```", checks, "```", "",
                      *textwrap.wrap(caption, 96, break_on_hyphens=False)])


#: Each quoted table: its markers, how it is rendered, the documents that hold it.
BLOCKS: list[tuple[tuple[str, str], Callable[[], str], list[Path]]] = [
    ((BEGIN, END), render, DOCUMENTS),
    ((AGENTIC_BEGIN, AGENTIC_END), render_agentic, AGENTIC_DOCUMENTS)]


def replace_block(text: str, table: str, markers: tuple[str, str] = (BEGIN, END)) -> str:
    """``text`` with what stands between the markers replaced by ``table``."""
    begin, end = markers
    start, stop = text.index(begin) + len(begin), text.index(end)
    return f"{text[:start]}\n{table}\n{text[stop:]}"


def block(text: str, markers: tuple[str, str] = (BEGIN, END)) -> str:
    """What stands between the markers in ``text``."""
    begin, end = markers
    return text[text.index(begin) + len(begin):text.index(end)].strip("\n")


def main(argv: Sequence[str] | None = None) -> None:
    parser = arguments(__doc__)
    parser.add_argument("--check", action="store_true",
                        help="change nothing; exit 1 if a document is out of date")
    args = parser.parse_args(argv)
    stale = False
    for markers, rendering, documents in BLOCKS:
        table = rendering()
        for path in documents:
            if block(path.read_text(), markers) == table:
                continue
            stale = True
            if args.check:
                print(f"{path.relative_to(ROOT)}: the {markers[0]} block is out of date",
                      file=sys.stderr)
            else:
                path.write_text(replace_block(path.read_text(), table, markers))
                print(f"wrote {path.relative_to(ROOT)}")
    if args.check and stale:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
