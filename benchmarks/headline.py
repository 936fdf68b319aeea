"""The tables the documents quote, rendered once from the reports kept in ``results/``.

- The headline table: the real workloads over the runs of ``real_envs.py`` in ``RUNS``, held by
  README.md and the benchmarks guide (``docs/guide/benchmarks.md``) between ``BEGIN``/``END``.
- The agentic table: the full runs of ``agentic.py`` in ``AGENTIC_RUNS``, held by README.md and
  the agentic guide (``docs/guide/agentic.md``) between ``AGENTIC_BEGIN``/``_END``.
- The faults table: the full runs of ``agentic_faults.py`` in ``FAULTS_RUNS``, held by the same
  two documents between ``FAULTS_BEGIN``/``_END``.
- The 1 s faults table: the full runs of ``agentic_faults.py --deadline 1`` in
  ``FAULTS_1S_RUNS``, held by the agentic guide between ``FAULTS_1S_BEGIN``/``_END``.

Each document is written by this script from the same result files, and
``tests/test_headline_table.py`` checks that none differs from what it renders, so they can
never disagree. After a new run of ``real_envs.py`` or ``agentic.py``, list its report in
``RUNS`` or ``AGENTIC_RUNS``; then::

    .venv/bin/python benchmarks/headline.py           # rewrite both documents
    .venv/bin/python benchmarks/headline.py --check   # exit 1 if either is out of date
"""

from __future__ import annotations

import functools
import sys
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path

from harness import NUMBER, arguments, number, read_tables

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
#: The reports of full runs of ``agentic.py`` the agentic table spans, oldest first.
AGENTIC_RUNS = [AGENTIC, *(HERE / "results" / f"agentic_run{n}.md" for n in (2, 3))]
AGENTIC_DOCUMENTS = [ROOT / "README.md", ROOT / "docs" / "guide" / "agentic.md"]
AGENTIC_BEGIN = ("<!-- agentic table: written by benchmarks/headline.py from "
                 "benchmarks/results/agentic.md -->")
AGENTIC_END = "<!-- end of the agentic table -->"
FAULTS = HERE / "results" / "agentic_faults.md"
#: The reports of full runs of ``agentic_faults.py`` (10 s deadlines), oldest first.
FAULTS_RUNS = [FAULTS, HERE / "results" / "agentic_faults_run2.md"]
FAULTS_BEGIN = ("<!-- faults table: written by benchmarks/headline.py from "
                "benchmarks/results/agentic_faults.md and _run2.md -->")
FAULTS_END = "<!-- end of the faults table -->"
#: The reports of full runs of ``agentic_faults.py --deadline 1``, oldest first.
FAULTS_1S_RUNS = [HERE / "results" / name for name in (
    "agentic_faults_deadline_1s.md", "agentic_faults_deadline_1s_run2.md",
    "agentic_faults_deadline_1s_run3.md")]
FAULTS_1S_BEGIN = ("<!-- 1 s faults table: written by benchmarks/headline.py from "
                   "benchmarks/results/agentic_faults_deadline_1s*.md -->")
FAULTS_1S_END = "<!-- end of the 1 s faults table -->"
#: The columns of those reports the guide shows.
FAULTS_COLUMNS = ("goodput", "% of X*·P(ok)", "lost (reported lost)", "misreported",
                     "orphaned leases", "leaked after SIGINT", "leaked after SIGKILL",
                     "orchestrator CPU")
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


def _text_span(cells: Sequence[str]) -> str:
    """The range of one figure over the runs, each end as its report writes it ("831.1",
    "99%", "9.47 s"); the unit once where the ends share it."""
    found = sorted((value, cell) for cell in cells if (value := number(cell)) is not None)
    if not found:
        return "\N{EM DASH}"
    low, high = found[0][1], found[-1][1]
    if low == high:
        return low
    low_number, high_number = (NUMBER.search(cell) for cell in (low, high))
    if (low_number and high_number and low[low_number.end():] == high[high_number.end():]
            and not low[:low_number.start()] and not high[:high_number.start()]):
        return f"{low_number.group()}{DASH}{high}"
    return f"{low}{DASH}{high}"


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


def _run_checks(runs: Sequence[Path], reports: Sequence[str]) -> list[str]:
    """Each run's target checks as its report writes them, under the run's number and file."""
    checks = []
    for number_of_run, (path, report) in enumerate(zip(runs, reports), start=1):
        checks += [f"run {number_of_run} ({path.name}):",
                   report.split("## Target checks", 1)[1].split("```")[1].strip("\n")]
    return checks


def _names(runs: Sequence[Path]) -> str:
    """The reports' paths as the captions cite them."""
    return ", ".join(f"`{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}`"
                     for path in runs)


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
    names = _names(runs)
    caption = (
        f"Sub-env steps per second; each cell is the range over {len(runs)} runs of "
        f"`benchmarks/real_envs.py` ({names}), each figure the median of its interleaved "
        "repeats (the per-repeat spread is in the reports). Machine: "
        f"{_stated(reports, 'machine')}. Software: {_stated(reports, 'versions')}. "
        f"Method: {_stated(reports, 'method', 'interleaved repeats')}.")
    return "\n".join([*lines, "", *textwrap.wrap(caption, 96, break_on_hyphens=False)])


def render_agentic(runs: Sequence[Path] = AGENTIC_RUNS) -> str:
    """The agentic table: a row per variant and contender (as the first run lists them), each
    cell the range over ``runs``; X* per variant, each run's target checks and the machine."""
    reports = [path.read_text() for path in runs]
    sections = [{section.split(":", 1)[0]: section for section in report.split("\n## ")[1:]}
                for report in reports]
    heading = "| variant (X*) | contender | " + " | ".join(AGENTIC_COLUMNS) + " |"
    lines = [heading, "|---|---|" + "---:|" * len(AGENTIC_COLUMNS)]
    for variant, section in sections[0].items():
        bounds = [_bound(run[variant]) for run in sections if variant in run]
        if bounds[0] is None:
            continue
        bound = _text_span([found for found in bounds if found is not None])
        tables = [read_tables(run[variant]) for run in sections if variant in run]
        for _, rows in read_tables(section).items():
            for row in rows:
                same = [other for table in tables for rows_of in table.values()
                        for other in rows_of if other["contender"] == row["contender"]]
                cells = [_text_span([other.get(column, "") for other in same])
                         for column in AGENTIC_COLUMNS]
                lines.append(f"| {variant} ({bound}) | {row['contender']} | "
                             + " | ".join(cells) + " |")
    checks, names = _run_checks(runs, reports), _names(runs)
    caption = (
        f"Each cell is the range over {len(runs)} full runs of `benchmarks/agentic.py` "
        f"({names}, which have every column and the formulas of X*), each figure the median "
        "of that run's interleaved repeats; spread = (max-min)/median of episodes/s within a "
        f"run. Machine: {_stated(reports, 'machine')}. Software: "
        f"{_stated(reports, 'versions')}. Dates: {_stated(reports, 'date')}.")
    return "\n".join([*lines, "", "```", *checks, "```", "",
                      *textwrap.wrap(caption, 96, break_on_hyphens=False)])


def render_fault_runs(runs: Sequence[Path] = FAULTS_1S_RUNS,
                      columns: Sequence[str] = FAULTS_COLUMNS) -> str:
    """The faults table over several runs of one deadline: a row per contender (as the
    first run lists them), each cell the range over ``runs``; each run's target checks and
    the machine."""
    reports = [path.read_text() for path in runs]
    tables = [[row for rows in read_tables(report.split("\n## Workload: ", 1)[1]
                                           .split("\n## ", 1)[0]).values() for row in rows]
              for report in reports]
    lines = ["| contender | " + " | ".join(columns) + " |", "|---|" + "---:|" * len(columns)]
    for row in tables[0]:
        same = [other for table in tables for other in table
                if other["contender"] == row["contender"]]
        lines.append(f"| {row['contender']} | "
                     + " | ".join(_text_span([other.get(column, "") for other in same])
                                  for column in columns) + " |")
    checks, names = _run_checks(runs, reports), _names(runs)
    workload = reports[0].split("\n## Workload: ", 1)[1].splitlines()[0]
    caption = (
        f"Workload: {workload}. Each cell is the range over {len(runs)} full runs of "
        f"`benchmarks/agentic_faults.py` ({names}, which have every column and the formulas), "
        "each figure the median of that run's interleaved repeats, counts summed over them. "
        f"Machine: {_stated(reports, 'machine')}. Software: {_stated(reports, 'versions')}. "
        f"Method: {_stated(reports, 'method')}. Dates: {_stated(reports, 'date')}.")
    return "\n".join([*lines, "", "```", *checks, "```", "",
                      *textwrap.wrap(caption, 96, break_on_hyphens=False)])


def _bound(section: str) -> str | None:
    """A variant's X* as its report states it ("839.8")."""
    return next((line.split("(")[0].removeprefix("X* = ").strip()
                 for line in section.splitlines() if line.startswith("X* = ")), None)


#: Each quoted table: its markers, how it is rendered, the documents that hold it.
BLOCKS: list[tuple[tuple[str, str], Callable[[], str], list[Path]]] = [
    ((BEGIN, END), render, DOCUMENTS),
    ((AGENTIC_BEGIN, AGENTIC_END), render_agentic, AGENTIC_DOCUMENTS),
    ((FAULTS_BEGIN, FAULTS_END), functools.partial(render_fault_runs, FAULTS_RUNS),
     AGENTIC_DOCUMENTS),
    ((FAULTS_1S_BEGIN, FAULTS_1S_END), render_fault_runs, [ROOT / "docs" / "guide" / "agentic.md"])]


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
