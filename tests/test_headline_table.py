"""README.md and the guides show the tables ``benchmarks/headline.py`` renders from the result
files (the headline table; the agentic table): none can drift from another or from the
measurements."""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Iterator
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
    """A row per variant and contender of the report, and its target checks as they are."""
    report = headline.AGENTIC.read_text()
    table = headline.render_agentic()
    measured = sum(len(rows) for section in report.split("\n## ")[1:]
                   for rows in headline.read_tables(section).values())
    rows = [line for line in table.splitlines() if line.startswith("| ")]
    assert measured >= 8 and len(rows) == 1 + measured
    targets = [line for line in report.splitlines() if line.startswith(("PASS", "MISS"))]
    assert len(targets) == 5 and all(line in table.splitlines() for line in targets)


def test_the_table_is_read_from_the_result_files(headline: ModuleType, tmp_path: Path) -> None:
    """A changed figure in one run's report moves the range it falls in, and only that one."""
    copies = []
    for index, path in enumerate(headline.RUNS):
        copy = tmp_path / path.name
        text = path.read_text()
        if index == 0:
            section = text.index("## Pong n=32")
            row = text.index("| aiovec process (await) |", section)
            end = text.index("\n", row)
            text = (text[:row] + "| aiovec process (await) | 9,999 | 1% | 3.33x | 99% |"
                    + text[end:])
        copy.write_text(text)
        copies.append(copy)
    before, after = headline.render(), headline.render(copies)
    rows = [(old, new) for old, new in zip(before.splitlines(), after.splitlines())
            if old.startswith("|")]  # the caption names the files, which moved
    changed = [(old, new) for old, new in rows if old != new]
    assert len(changed) == 1 and changed[0][1].startswith("| Pong (32) |")
    dash, times = headline.DASH, headline.TIMES
    assert f"{dash}9,999 |" in changed[0][1] and f"{dash}99 % |" in changed[0][1]
    assert f"{dash}3.33{times} |" in changed[0][1]


def test_the_readme_quotes_figures_in_the_rendered_tables_only(headline: ModuleType) -> None:
    """Measured figures only in the rendered tables: the README's other tables compare
    features."""
    text = (ROOT / "README.md").read_text()
    outside = text
    for markers, _, _ in headline.BLOCKS:
        outside = outside.replace(headline.block(text, markers), "")
    figure = re.compile(r"\d[\d,.]*\s?(?:\N{MULTIPLICATION SIGN}|x\b|%|steps/s|ms\b)")
    figures = [line for line in outside.splitlines()
               if line.startswith("|") and figure.search(line)]
    assert not figures, figures
