"""The report's PNG: six panels drawn from a ``RunReport`` with matplotlib, headless.

Return against env steps and against wall time (mean of each evaluation round, its
min-max band, the target), env steps/s per rollout worker (and what the trainer
consumed), the policy-lag histogram, the trainer's consumer lag over time, and the text
summary, so the PNG alone says whether the run learned. The figure is drawn on the Agg
canvas directly (no ``pyplot``): no display, no global state, whatever ``MPLBACKEND`` says.
"""

from __future__ import annotations

from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from coach_stream.observability.report import RunReport, lag_total, series

PANELS = (
    "return vs env steps",
    "return vs wall time",
    "env steps/s per worker",
    "policy lag",
    "consumer lag",
    "summary",
)
"""The panels, row by row (3 rows of 2)."""

SIZE_IN = (14.0, 13.0)
DPI = 100
_MAX_PARTITION_LINES = 8  # more partitions: only the total is drawn


def _no_data(ax: Axes, why: str) -> None:
    ax.text(0.5, 0.5, why, ha="center", va="center", transform=ax.transAxes, color="0.4", wrap=True)


def _returns(ax: Axes, report: RunReport, by_steps: bool) -> None:
    points = report.evaluations
    ax.set_title("Evaluation return vs " + ("env steps" if by_steps else "wall time"))
    ax.set_xlabel("env steps consumed by the trainer" if by_steps else "wall time (s)")
    ax.set_ylabel("greedy return per episode")
    ax.grid(alpha=0.3)
    if not points:
        _no_data(ax, "no evaluation reports on the control topic")
        return
    xs = [float(p.env_steps) if by_steps else report.wall(p.time) for p in points]
    ax.fill_between(
        xs, [p.min_return for p in points], [p.max_return for p in points],
        alpha=0.2, color="tab:blue", label="min-max of the round",
    )  # fmt: skip
    ax.plot(xs, [p.mean_return for p in points], "o-", ms=3, color="tab:blue", label="mean")
    target = report.target_return
    if target is not None and target < 1e9:  # the "never stop" presets set an absurd target
        ax.axhline(target, color="tab:green", ls="--", label=f"target {target:g}")
    ax.legend(loc="lower right", fontsize=8)


def _rates(ax: Axes, report: RunReport) -> None:
    ax.set_title("Env steps/s per rollout worker")
    ax.set_xlabel("wall time (s)")
    ax.set_ylabel("env steps/s")
    ax.grid(alpha=0.3)
    if not report.worker_rates and not report.trainer_rates:
        _no_data(ax, "no progress events on the telemetry topic")
        return
    styles = ("-", "--", "-.", ":")
    markers = "os^Dv<>ph*"  # workers with equal rates (SYNC) overlap: the markers still show
    for i, task in enumerate(sorted(report.worker_rates, key=_task_order)):
        xs, ys = series(report.worker_rates[task], report)
        style = styles[(i // 10) % len(styles)]
        ax.plot(xs, ys, style, marker=markers[i % 10], ms=4, mfc="none", lw=1.2, alpha=0.85,
                label=task)  # fmt: skip
    if report.trainer_rates:
        xs, ys = series(report.trainer_rates, report)
        ax.plot(xs, ys, "--", color="black", lw=1.0, label="trainer (consumed)")
    ax.legend(loc="upper right", fontsize=8, ncol=2)


def _policy_lag(ax: Axes, report: RunReport) -> None:
    ax.set_ylabel("chunks")
    ax.grid(alpha=0.3, axis="y")
    lags, when = report.policy_lags
    if lags:
        total = sum(lags.values())
        ax.set_title(f"Policy lag of {total:,} chunks")
        ax.set_xlabel(
            "versions behind the trainer's when it read the chunk"
            if when == "read"
            else "versions behind the newest announced when the chunk was written"
        )
        values = sorted(lags)
        bars = ax.bar(values, [lags[v] for v in values], color="tab:orange", width=0.8)
        ax.bar_label(bars, [f"{lags[v] / total:.1%}" for v in values], fontsize=8)
        ax.set_xticks(values if len(values) <= 20 else values[:: max(1, len(values) // 20)])
        return
    samples = [s.value for s in report.trainer_policy_lag]
    ax.set_title("Policy lag (trainer's mean per interval)")
    ax.set_xlabel("mean versions behind when read")
    if not samples:
        _no_data(ax, "no chunks read and no lag in the trainer's progress events")
        return
    ax.hist(samples, bins=min(20, max(5, len(samples) // 3)), color="tab:orange")
    ax.set_ylabel("progress intervals")


def _consumer_lag(ax: Axes, report: RunReport) -> None:
    ax.set_title("Consumer lag of the trainer (records not yet read)")
    ax.set_xlabel("wall time (s)")
    ax.set_ylabel("records")
    ax.grid(alpha=0.3)
    points = report.consumer_lag
    if not points:
        _no_data(ax, "the trainer's progress events carry no consumer lag")
        return
    xs = [report.wall(t) for t, _ in points]
    ax.plot(xs, [lag_total(p) for _, p in points], "-", color="tab:red", lw=1.8, label="total")
    partitions = sorted({p for _, counts in points for p in counts})
    if 1 < len(partitions) <= _MAX_PARTITION_LINES:
        for partition in partitions:
            ys = [counts.get(partition, 0) for _, counts in points]
            ax.plot(xs, ys, "-", lw=0.8, alpha=0.7, label=f"partition {partition}")
    ax.set_ylim(bottom=0)
    ax.legend(loc="upper right", fontsize=8, ncol=2)


def _summary(ax: Axes, report: RunReport) -> None:
    ax.set_title("Summary")
    ax.axis("off")
    colour = "tab:green" if report.solved else ("tab:red" if report.reason else "0.3")
    lines = report.summary_lines()
    ax.text(0.0, 1.0, lines[0], va="top", family="monospace", fontsize=9, weight="bold",
            transform=ax.transAxes, wrap=True)  # fmt: skip
    ax.text(0.0, 0.92, lines[1], va="top", family="monospace", fontsize=10, weight="bold",
            color=colour, transform=ax.transAxes, wrap=True)  # fmt: skip
    ax.text(0.0, 0.82, "\n".join(lines[2:]), va="top", family="monospace", fontsize=9,
            linespacing=1.6, transform=ax.transAxes, wrap=True)  # fmt: skip


def _task_order(task: str) -> tuple[str, int]:
    name, _, index = task.rpartition("-")
    return (name, int(index)) if index.isdigit() else (task, -1)


def draw_report(report: RunReport) -> Figure:
    """The report's figure (3x2 panels, ``PANELS`` in order)."""
    figure = Figure(figsize=SIZE_IN, dpi=DPI, layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(3, 2)
    _returns(axes[0][0], report, by_steps=True)
    _returns(axes[0][1], report, by_steps=False)
    _rates(axes[1][0], report)
    _policy_lag(axes[1][1], report)
    _consumer_lag(axes[2][0], report)
    _summary(axes[2][1], report)
    figure.suptitle(f"coach-stream report: {report.run_id}", fontsize=14, weight="bold")
    return figure


def save_report(report: RunReport, path: Path) -> Path:
    """Draw the report and write it to ``path`` as a PNG; the path written."""
    figure = draw_report(report)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png", dpi=DPI)
    return path
