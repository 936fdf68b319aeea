"""``run.py``'s report: a table per workload, start-up, parent CPU and latency, the target
lines (PASS/MISS, never asserted) and the log-scale bar plot."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path

from companions import CompanionRun, report_lines
from harness import Check, ratio_cell, spread_cell
from run_contenders import (
    AUTO,
    AUTO_CHOICES,
    AUTO_PICKS,
    ENVPOOL,
    GYM_ASYNC,
    INLINE,
    PROCESS,
    PROCESS_PER_ENV,
    PROCESS_VIEW,
    RAW,
    RAW_PAIR,
    SHIM,
    STARTUP,
    STARTUP_ENVS,
    SYNC,
    THREAD,
    Cell,
    Results,
    Workload,
)


def workload_table(workload: Workload, cells: Sequence[Cell], results: Results) -> list[str]:
    with_envpool = workload.name == "CartPole-v1" and any(c.contender == ENVPOOL for c in cells)
    header = "| contender | num_envs | steps/s (median) | spread | vs SyncVectorEnv " \
             "| vs Gymnasium Async |" + (" vs EnvPool |" if with_envpool else "")
    lines = [f"## {workload.name}: {workload.description}", "", header,
             "|---|---:|---:|---:|---:|---:|" + ("---:|" if with_envpool else "")]
    for cell in cells:
        timings = results.timings.get(cell, [])
        median = results.median(cell.workload, cell.num_envs, cell.contender)
        reference = cell.contender in (RAW, RAW_PAIR)
        envs = f"{cell.num_envs} x 1 env" if cell.contender == RAW_PAIR else str(cell.num_envs)
        if median is None:
            rate = f"error: {results.errors.get(cell, 'no result')}"
        else:
            rate = f"{median:,.0f}"
            if cell in results.errors:
                rate += f" (then error: {results.errors[cell]})"
        row = [cell.contender, envs, rate, spread_cell([t.steps_per_second for t in timings])]
        bases = [SYNC, GYM_ASYNC] + ([ENVPOOL] if with_envpool else [])
        for base in bases:
            base_rate = None if reference else results.median(cell.workload, cell.num_envs, base)
            row.append(ratio_cell(median, base_rate))
        lines.append("| " + " | ".join(row) + " |")
    return lines


def extra_metrics(results: Results) -> list[str]:
    lines = ["## Start-up: construction + reset + first step, "
             f"{STARTUP_ENVS} CartPole-v1 envs", "",
             "| contender | median s | first run s (cold) | all runs s |", "|---|---:|---:|---|"]
    for name in STARTUP:
        runs = results.startup.get(name, [])
        if runs:
            lines.append(f"| {name} | {statistics.median(runs):.3f} | {runs[0]:.3f} | "
                         f"{', '.join(f'{r:.2f}' for r in runs)} |")
        else:
            lines.append(f"| {name} | error: {results.startup_errors.get(name, '?')} | | |")
    lines += ["", "## Parent-process CPU while stepping 32 SleepEnvs "
              "(user+sys of this process / wall time, % of one core)", "",
              "| contender | parent CPU | steps/s |", "|---|---:|---:|"]
    for name in (PROCESS, PROCESS_PER_ENV, THREAD, GYM_ASYNC):
        timings = results.timings.get(Cell("SleepEnv", 32, name))
        if timings:
            cpu = statistics.median(t.cpu_percent or 0.0 for t in timings)
            rate = statistics.median(t.steps_per_second for t in timings)
            lines.append(f"| {name} | {cpu:.1f}% | {rate:,.0f} |")
    lines += ["", "## Vector-step latency, 8 SleepEnvs (median ms per vector step; "
              "ideal ≈ 5 ms + the sleep's overshoot)", "", "| contender | latency ms |",
              "|---|---:|"]
    for name in (THREAD, PROCESS, PROCESS_PER_ENV, GYM_ASYNC, SYNC):
        timings = results.timings.get(Cell("SleepEnv", 8, name))
        if timings:
            latency = statistics.median(t.latency or 0.0 for t in timings)
            lines.append(f"| {name} | {latency * 1e3:.2f} |")
    return lines


def target_checks(results: Results) -> list[str]:
    def versus(label: str, workload: str, num_envs: int, base: str, target: float,
               base_envs: int | None = None, unit: str = "x", ours: str = PROCESS) -> Check:
        """``ours`` against ``base``: the ratio of medians, and the per-repeat ratios."""
        value = results.median(workload, num_envs, ours)
        reference = results.median(workload, base_envs or num_envs, base)
        mine = {t.repeat: t.steps_per_second
                for t in results.timings.get(Cell(workload, num_envs, ours), [])}
        theirs = results.timings.get(Cell(workload, base_envs or num_envs, base), [])
        paired = [mine[t.repeat] / t.steps_per_second for t in theirs if t.repeat in mine]
        ratio = None if value is None or not reference else value / reference
        return Check(label, ratio, target, unit=unit, per_repeat=paired)

    startup = results.startup.get(PROCESS)
    auto_startup = results.startup.get(AUTO)
    checks = [
        versus("CartPole-v1 n=32, aiovec process vs SyncVectorEnv", "CartPole-v1", 32, SYNC,
               1.5),
        versus("CartPole-v1 n=32, aiovec process vs 2 raw loops in 2 processes",
               "CartPole-v1", 32, RAW_PAIR, 0.8, base_envs=2, unit="%"),
        versus("CartPole-v1 n=8, aiovec process vs SyncVectorEnv", "CartPole-v1", 8, SYNC,
               1.0),
        versus("CartPole-v1 n=32, aiovec process vs Gymnasium AsyncVectorEnv", "CartPole-v1",
               32, GYM_ASYNC, 15.0),
        *(versus(f"CartPole-v1 n={n}, sync shim vs await (both process)", "CartPole-v1", n,
                 PROCESS, 0.95, ours=SHIM) for n in (8, 32)),
        versus("CpuEnv n=8, aiovec process vs 2 raw loops in 2 processes", "CpuEnv", 8,
               RAW_PAIR, 0.9, base_envs=2, unit="%"),
        versus("PixelEnv n=32, aiovec process vs Gymnasium AsyncVectorEnv", "PixelEnv", 32,
               GYM_ASYNC, 10.0),
        versus("PixelEnv n=32, aiovec process vs SyncVectorEnv", "PixelEnv", 32, SYNC, 1.0),
        versus("PixelEnv n=32, aiovec process copy=False vs SyncVectorEnv", "PixelEnv", 32,
               SYNC, 1.2, ours=PROCESS_VIEW),
        Check(f"start-up ({STARTUP_ENVS} CartPole envs to first step), aiovec process",
              statistics.median(startup) if startup else None, 1.0, unit=" s", at_most=True,
              per_repeat=startup or ()),
        Check(f"start-up ({STARTUP_ENVS} CartPole envs to first step), aiovec auto (measures "
              "first)", statistics.median(auto_startup) if auto_startup else None, 1.0,
              unit=" s", at_most=True, per_repeat=auto_startup or ()),
    ]
    return [check.line() for check in checks + auto_checks(results)]


def auto_checks(results: Results) -> list[Check]:
    """``backend="auto"`` against the fastest of the backends it picks from, per cell."""
    checks = []
    for workload, num_envs in sorted({(c.workload, c.num_envs) for c in results.timings
                                      if c.contender == AUTO}):
        medians = {name: results.median(workload, num_envs, name) for name in AUTO_CHOICES}
        known = {name: value for name, value in medians.items() if value}
        auto = results.median(workload, num_envs, AUTO)
        if not known or auto is None:
            continue
        best = max(known, key=known.__getitem__)
        per_repeat = []
        for timing in results.timings.get(Cell(workload, num_envs, AUTO), []):
            rates = [t.steps_per_second for name in AUTO_CHOICES
                     for t in results.timings.get(Cell(workload, num_envs, name), [])
                     if t.repeat == timing.repeat]
            if rates:
                per_repeat.append(timing.steps_per_second / max(rates))
        picked = ", ".join(sorted(AUTO_PICKS.get((workload, num_envs), ()))) or "?"
        checks.append(Check(f"{workload} n={num_envs}, aiovec auto (picked {picked}) vs the "
                            f"best backend ({best.split()[1]})", auto / known[best], 0.9,
                            per_repeat=per_repeat))
    return checks


def report(workloads: Sequence[Workload], results: Results, header: list[str],
           runtime: float, companions: Sequence[CompanionRun] = ()) -> str:
    lines = [*header, f"- total runtime: {runtime:.0f} s", ""]
    order = list(results.timings) + [c for c in results.errors if c not in results.timings]
    for workload in workloads:
        cells = sorted((c for c in order if c.workload == workload.name),
                       key=lambda c: (c.contender not in (RAW, RAW_PAIR), c.num_envs,
                                      CONTENDER_ORDER.index(c.contender)))
        lines += [*workload_table(workload, cells, results), ""]
    lines += [*extra_metrics(results), "", "## Target checks (reported, never asserted)", "",
              "Ratios of medians; *per repeat*: the same ratio within each repeat.", "",
              "```", *target_checks(results),
              *(line for run in companions for line in run.target_lines), "```", ""]
    if companions:
        lines += ["The lines after the start-up and auto ones come from the companion scripts "
                  "below, each run right after this table, one at a time.", ""]
    lines += ["## Notes", "", *(f"- {note}" for note in dict.fromkeys(results.notes)), ""]
    lines += report_lines(companions)
    return "\n".join(lines).rstrip("\n") + "\n"


CONTENDER_ORDER = [RAW, RAW_PAIR, SYNC, GYM_ASYNC, INLINE, THREAD, PROCESS, PROCESS_VIEW, AUTO,
                   PROCESS_PER_ENV, SHIM, ENVPOOL]


def plot(workloads: Sequence[Workload], results: Results, path: Path) -> None:
    """Log-scale grouped bars: one panel per workload, a group per size, a bar per contender."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    colors = {name: plt.get_cmap("tab10")(index) for index, name in enumerate(CONTENDER_ORDER)}
    figure, axes = plt.subplots(2, 2, figsize=(15, 10))
    for axis, workload in zip(axes.flat, workloads):
        groups: list[tuple[str, list[tuple[str, float]]]] = []
        for label, sizes, names in [("reference", None, (RAW, RAW_PAIR)),
                                    *((f"{n} envs", n, CONTENDER_ORDER[2:])
                                      for n in workload.sizes)]:
            bars = [(name, value) for name in names for cell in results.timings
                    if cell.workload == workload.name and cell.contender == name
                    and (sizes is None or cell.num_envs == sizes)
                    and (value := results.median(workload.name, cell.num_envs, name))]
            if bars:
                groups.append((label, bars))
        width = 0.8 / max((len(bars) for _, bars in groups), default=1)
        for position, (_, bars) in enumerate(groups):
            for slot, (name, value) in enumerate(bars):
                x = position + width * (slot - (len(bars) - 1) / 2)
                axis.bar(x, value, width * 0.9, color=colors[name])
        axis.set_xticks(range(len(groups)))
        axis.set_xticklabels([label for label, _ in groups])
        axis.set_yscale("log")
        axis.set_ylabel("sub-env steps/s (median, log scale)")
        axis.set_title(f"{workload.name}: {workload.description}", fontsize=10)
        axis.grid(axis="y", which="both", alpha=0.3)
    for axis in list(axes.flat)[len(workloads):]:
        axis.set_visible(False)
    shown = [name for name in CONTENDER_ORDER if any(c.contender == name for c in results.timings)]
    handles = [Patch(color=colors[name]) for name in shown]
    figure.legend(handles, shown, loc="lower center", ncol=4)
    figure.tight_layout(rect=(0, 0.08, 1, 1))
    figure.savefig(path, dpi=110)
    plt.close(figure)

