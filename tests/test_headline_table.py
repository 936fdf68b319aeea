"""README.md and the guides show the tables ``benchmarks/headline.py`` renders from the result
files (the headline table; the agentic table): none can drift from another or from the
measurements."""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def headline(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """``benchmarks/headline.py``, imported as its scripts import each other (by plain name)."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    yield importlib.import_module("headline")
    for name in ("headline", "harness"):
        sys.modules.pop(name, None)


def test_the_readme_and_the_guide_show_the_rendered_table(headline: ModuleType) -> None:
    table = headline.render()
    rows = [line for line in table.splitlines() if line.startswith("| ")]
    assert len(rows) == 1 + len(headline.CELLS)  # the headings, then a row a cell
    for markers, rendering, documents in headline.BLOCKS:
        table = rendering()
        for path in documents:
            text = path.read_text()
            assert text.count(markers[0]) == text.count(markers[1]) == 1, path.name
            assert headline.block(text, markers) == table, (
                f"{path.relative_to(ROOT)}: {markers[0]} differs from the result files; "
                "run benchmarks/headline.py")


def test_the_agentic_table_has_every_contender_and_every_target(headline: ModuleType) -> None:
    """A row per variant and contender of the reports, and every run's target checks as they
    are."""
    assert len(headline.AGENTIC_RUNS) == 3  # three full runs, as the benchmark asks
    table = headline.render_agentic()
    for path in headline.AGENTIC_RUNS:
        report = path.read_text()
        measured = sum(len(rows) for section in report.split("\n## ")[1:]
                       for rows in headline.read_tables(section).values())
        rows = [line for line in table.splitlines() if line.startswith("| ")]
        assert measured >= 8 and len(rows) == 1 + measured, path.name
        targets = [line for line in report.splitlines() if line.startswith(("PASS", "MISS"))]
        assert len(targets) == 5 and all(line in table.splitlines() for line in targets)


def _changed_rows(render: Callable[..., str], runs: list[Path], tmp_path: Path, run: int,
                  section: str, contender: str, cells: dict[int, str]) -> list[str]:
    """The rows of ``render``'s table that differ once, in a copy of the reports ``runs``, the
    row of ``contender`` under ``section`` of report ``run`` has ``cells`` (by column)."""
    copies = []
    for index, path in enumerate(runs):
        text = path.read_text()
        if index == run:
            row = text.index(f"| {contender} |", text.index(section))
            end = text.index("\n", row)
            columns = text[row:end].split("|")
            for column, value in cells.items():
                columns[column + 1] = f" {value} "
            text = text[:row] + "|".join(columns) + text[end:]
        copies.append(tmp_path / path.name)
        copies[-1].write_text(text)
    before, after = render(), render(copies)
    # Table rows only: the caption names the files, which moved.
    return [new for old, new in zip(before.splitlines(), after.splitlines())
            if old.startswith("|") and old != new]


def test_the_table_is_read_from_the_result_files(headline: ModuleType, tmp_path: Path) -> None:
    """A changed figure in one run's report moves the range it falls in, and only that one."""
    changed = _changed_rows(headline.render, headline.RUNS, tmp_path, 0, "## Pong n=32",
                            "aiovec process (await)", {1: "9,999", 2: "1%", 3: "3.33x", 4: "99%"})
    assert len(changed) == 1 and changed[0].startswith("| Pong (32) |")
    dash, times = headline.DASH, headline.TIMES
    assert f"{dash}9,999 |" in changed[0] and f"{dash}99 % |" in changed[0]
    assert f"{dash}3.33{times} |" in changed[0]


def test_the_agentic_table_spans_the_runs(headline: ModuleType, tmp_path: Path) -> None:
    """A changed figure in one run's report widens the range of its cell, and only that one."""
    changed = _changed_rows(headline.render_agentic, headline.AGENTIC_RUNS, tmp_path, 1,
                            "## stress", "aiovec async", {1: "99,999.9"})  # episodes/s
    assert len(changed) == 1 and changed[0].startswith("| stress (")
    assert "| aiovec async |" in changed[0] and f"{headline.DASH}99,999.9 |" in changed[0]


def test_the_1s_faults_table_spans_the_runs(headline: ModuleType, tmp_path: Path) -> None:
    """Three full runs with 1 s deadlines: a row per contender, every run's target checks as
    they are; a changed figure in one run widens its cell's range, and only that one."""
    assert len(headline.FAULTS_1S_RUNS) == 3
    table = headline.render_fault_runs()
    for path in headline.FAULTS_1S_RUNS:
        targets = [line for line in path.read_text().splitlines()
                   if line.startswith(("PASS", "MISS"))]
        assert len(targets) == 5 and all(line in table.splitlines() for line in targets)
    rows = [line for line in table.splitlines() if line.startswith("| ")]
    assert len(rows) == 1 + 5 and rows[-1].startswith("| aiovec async |")
    changed = _changed_rows(headline.render_fault_runs, headline.FAULTS_1S_RUNS, tmp_path, 2,
                            "Measured", "aiovec async", {1: "9,999.9"})  # goodput
    assert len(changed) == 1 and changed[0].startswith("| aiovec async |")
    assert f"{headline.DASH}9,999.9 |" in changed[0]


def test_the_readme_quotes_figures_in_the_rendered_tables_only(headline: ModuleType) -> None:
    """Measured figures only in the rendered tables: the README's other tables compare
    features."""
    text = (ROOT / "README.md").read_text()
    outside = text
    for markers, _, documents in headline.BLOCKS:
        if ROOT / "README.md" in documents:
            outside = outside.replace(headline.block(text, markers), "")
    figure = re.compile(r"\d[\d,.]*\s?(?:\N{MULTIPLICATION SIGN}|x\b|%|steps/s|ms\b)")
    figures = [line for line in outside.splitlines()
               if line.startswith("|") and figure.search(line)]
    assert not figures, figures
