"""The real workloads as a picture: each contender's share of the 2-core limit, per cell.

Reads one or more reports of ``real_envs.py`` (markdown) and draws, for every cell (Pong,
HalfCheetah and CartPole at 8 or 32 sub-envs), one bar per contender at the median of its "% of
limit" over the reports, with a line from the lowest to the highest. ``real_envs.py`` draws its
own full run this way (``results/real_envs.png``); the README's picture spans the runs it quotes:

    .venv/bin/python benchmarks/plot_real_envs.py benchmarks/results/real_envs.md \
        benchmarks/results/real_envs_run2.md benchmarks/results/real_envs_run3.md
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path

from harness import arguments, number, read_tables

HERE = Path(__file__).resolve().parent

CELLS = ["Pong n=8", "Pong n=32", "HalfCheetah n=8", "HalfCheetah n=32", "CartPole n=32"]
#: (row in the report, label in the picture)
CONTENDERS = [
    ("gymnasium SyncVectorEnv", "Gymnasium SyncVectorEnv"),
    ("gymnasium AsyncVectorEnv (shm)", "Gymnasium AsyncVectorEnv"),
    ("EnvPool (C++, 2 threads)", "EnvPool (C++ envs, 2 threads)"),
    ("aiovec process (await)", "aiovec, await"),
    ("aiovec shim, process", "aiovec, sync shim"),
    ("aiovec auto (await)", "aiovec auto, await"),
]

Shares = dict[tuple[str, str], float]


def read_report(path: Path) -> tuple[Shares, str]:
    """Every contender's "% of limit" per cell in one report, and its machine line."""
    text = path.read_text()
    shares = {(cell, row["contender"]): share
              for cell, rows in read_tables(text).items() if cell in CELLS for row in rows
              if (share := number(row.get("% of limit", ""))) is not None}
    machine = next((line.removeprefix("- machine:").strip() for line in text.splitlines()
                    if line.startswith("- machine:")), "")
    return shares, machine


def plot(reports: Sequence[Path], output: Path) -> None:
    """Draw the median share (and the range) of each contender over ``reports``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [read_report(path) for path in reports]
    figure, axes = plt.subplots(figsize=(13, 5.5))
    width = 0.8 / len(CONTENDERS)
    for position, (row, label) in enumerate(CONTENDERS):
        medians, lows, highs, xs = [], [], [], []
        for cell_index, cell in enumerate(CELLS):
            values = [shares[cell, row] for shares, _ in runs if (cell, row) in shares]
            if not values:
                continue
            median = statistics.median(values)
            xs.append(cell_index - 0.4 + width * (position + 0.5))
            medians.append(median)
            lows.append(median - min(values))
            highs.append(max(values) - median)
        axes.bar(xs, medians, width, label=label, yerr=[lows, highs], capsize=2)
    axes.axhline(100, color="black", linewidth=1, linestyle="--")
    axes.text(len(CELLS) - 0.55, 102, "2-core limit (two processes, no IPC)", ha="right",
              fontsize=9)
    axes.set_xticks(range(len(CELLS)), CELLS)
    axes.set_ylabel("% of the 2-core limit (higher is better)")
    machine = runs[0][1] if runs else ""
    axes.set_title(f"Real workloads, {len(reports)} run(s) of benchmarks/real_envs.py: median "
                   f"and range\n{machine}", fontsize=10)
    axes.legend(fontsize=8, ncols=3, loc="upper left")
    axes.set_ylim(0, 140)
    figure.tight_layout()
    output.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(output, dpi=110)
    plt.close(figure)


def main() -> None:
    parser = arguments(__doc__, output=HERE / "results" / "real_envs.png")
    parser.add_argument("reports", nargs="+", type=Path)
    args = parser.parse_args()
    plot(args.reports, args.output)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
