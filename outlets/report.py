"""The report of a run directory as an experiment: every attempt, its curve, its findings.

    build_report(run_dir)  -> RUN_DIR/report/index.html (self-contained, plots as base64 PNG)
                              RUN_DIR/report/summary.md
                              RUN_DIR/report/report.md (summary.md and the plots inline)
    run_figures(run_dir)   -> the numbers `remedy compare` puts side by side

Curves come from each job's metric records (its backend's metrics()): the training loss per
step, and each metric of the job (the built-in job's test accuracy per epoch, a script's own
metrics from its log) beside it; the tables show the metrics the run has (metric_columns.py);
and how much consecutive updates' gradients agreed (the figure the verdict asks on).
Per-layer gradient norms come from each job's tensor store (the debugger's "gradients"
collection, saved every debugger_save_interval steps).
Everything shown passes through outlets.messages.redact: no role ARN or bucket appears.
"""

from __future__ import annotations

import base64
import html
import io
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display on a server
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from remedy.jobs import backend_for  # noqa: E402
from remedy.outlets.messages import (  # noqa: E402
    attempt_rows,
    fmt,
    markdown_table,
    metrics_text,
    redact,
    strategy_cell,
)
from remedy.outlets.metric_columns import metric_names  # noqa: E402
from remedy.records.best_model import best_model  # noqa: E402
from remedy.records.run_folder import REPORT_DIR, REPORT_MARKDOWN, state_path  # noqa: E402
from remedy.records.verdict import (  # noqa: E402
    AGREEING,
    attempt_is_clean,
    run_is_clean,
    start_loss,
)
from remedy.state_schema import Attempt, AttemptKind, State, load_state  # noqa: E402
from remedy.state_schema.gradient_agreement import AGREEMENT_FIELDS, LAGS  # noqa: E402


class ReportError(ValueError):
    pass


# ----------------------------------------------------------------------------------------
# reading a run


@dataclass
class Series:
    steps: list[int] = field(default_factory=list)
    values: list[float] = field(default_factory=list)  # NaN where the job logged null


@dataclass
class Curve:
    steps: list[int] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)  # NaN where the job logged null
    metrics: dict[str, Series] = field(default_factory=dict)  # metric name -> its values
    agreement: dict[int, Series] = field(default_factory=dict)  # lag -> its measurements

    def add(self, name: str, step: object, value: object) -> None:
        series = self.metrics.setdefault(name, Series())
        series.steps.append(step if isinstance(step, int) else 0)  # logged before any step
        series.values.append(float(value) if isinstance(value, int | float) else math.nan)


def read_curve(run_dir: Path, attempt: Attempt) -> Curve:
    curve = Curve()
    for record in backend_for(attempt.spec.backend, run_dir).metrics(attempt.job_name):
        kind = record.get("type")
        if kind == "step":
            curve.steps.append(int(record["step"]))
            curve.loss.append(math.nan if record.get("loss") is None else record["loss"])
            for lag, key in AGREEMENT_FIELDS.items():
                if isinstance(value := record.get(key), int | float):
                    series = curve.agreement.setdefault(lag, Series())
                    series.steps.append(int(record["step"]))
                    series.values.append(float(value))
        elif kind == "epoch" and record.get("test_accuracy") is not None:  # the built-in job
            curve.add("test:accuracy", record.get("step"), record["test_accuracy"])
        elif kind == "metric" and isinstance(record.get("name"), str):  # the job's own
            curve.add(record["name"], record.get("step"), record.get("value"))
    return curve


def layer_grad_norms(run_dir: Path, attempt: Attempt) -> dict[str, dict[int, float]]:
    """Tensor name -> {step: L2 norm (inf when non-finite)} from the job's tensor store."""
    try:
        trial = backend_for(attempt.spec.backend, run_dir).trial(attempt.job_name)
        if trial is None:
            return {}
        names = trial.collection_order("gradients") or trial.tensor_names(regex="gradient/")
        norms: dict[str, dict[int, float]] = {}
        for name in names:
            for step, value in trial.tensor(name).values().items():
                data = np.asarray(value, dtype=np.float64)
                norm = float(np.linalg.norm(data)) if np.isfinite(data).all() else math.inf
                norms.setdefault(name, {})[step] = norm
        return norms
    except Exception:  # noqa: BLE001  (a store cut short by a kill: report without it)
        return {}


@dataclass
class RunFigures:
    run_dir: str
    policy: str
    attempts: int
    clean: bool
    total_steps: int
    final_steps: int
    final_accuracy: float | None
    duration_s: float | None
    end_reason: str
    queue_wait_s: float | None = None  # of duration_s, in a scheduler's queue (Slurm)
    requeues: int = 0  # times a scheduler requeued the run's jobs (Slurm)
    metric_names: list[str] = field(default_factory=list)  # the run's metric columns
    final_metrics: dict[str, float] = field(default_factory=dict)  # of the last attempt
    best_model: str | None = None  # a run not clean: the best model it trained, if any

    @property
    def overhead(self) -> float | None:
        return self.total_steps / self.final_steps if self.final_steps else None


def load_run_state(run_dir: str | Path) -> State:
    path = state_path(run_dir)
    if not path.is_file():
        raise ReportError(f"{run_dir}: no state.json here (not a run directory)")
    return load_state(path)


def run_figures(run_dir: str | Path) -> RunFigures:
    state = load_run_state(run_dir)
    attempts = state.history.attempts
    last = attempts[-1] if attempts else None
    durations = [a.duration_s for a in attempts if a.duration_s is not None]
    waits = [a.queue_wait_s for a in attempts if a.queue_wait_s is not None]
    return RunFigures(
        run_dir=str(run_dir),
        policy=state.policy,
        attempts=len(attempts),
        clean=run_is_clean(state),
        total_steps=state.history.updates_spent,
        final_steps=last.steps_run if last else 0,
        final_accuracy=last.final_accuracy if last else None,
        duration_s=sum(durations) if durations else None,
        queue_wait_s=sum(waits) if waits else None,
        requeues=sum(a.requeues or 0 for a in attempts),
        end_reason=redact(state.end_reason or "running"),
        metric_names=metric_names(state),
        final_metrics=dict(last.metrics) if last else {},
        best_model=best_model(state),
    )


# ----------------------------------------------------------------------------------------
# plots


def png(figure: plt.Figure) -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=90, bbox_inches="tight")
    plt.close(figure)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def label(number: int, attempt: Attempt) -> str:
    return f"#{number} {strategy_cell(attempt)}"


MAX_METRIC_PLOTS = 5  # beside the loss; a run with more metrics plots the first ones


def plot_losses(attempts: list[Attempt], curves: list[Curve], names: list[str]) -> str:
    """The training loss, and each metric of the run's columns that has values, per attempt
    (one chart each: a perplexity and an accuracy do not share a scale)."""
    found = {name for curve in curves for name in curve.metrics}
    plotted = [n for n in names if n in found] + sorted(found - set(names))
    plotted = plotted[:MAX_METRIC_PLOTS]
    columns = min(len(plotted) + 1, 3)
    rows = math.ceil((len(plotted) + 1) / columns)
    figure, axes = plt.subplots(rows, columns, figsize=(6 * columns, 4 * rows), squeeze=False)
    loss_ax, *metric_axes = axes.flat
    for number, (attempt, curve) in enumerate(zip(attempts, curves, strict=True), start=1):
        if curve.steps:
            (line,) = loss_ax.plot(curve.steps, curve.loss, label=label(number, attempt))
            bad = [s for s, v in zip(curve.steps, curve.loss, strict=True) if not math.isfinite(v)]
            if bad:  # where the loss stopped being a number
                loss_ax.axvline(bad[0], color=line.get_color(), linestyle=":", linewidth=1)
        for name, ax in zip(plotted, metric_axes, strict=False):
            if name in curve.metrics:
                series = curve.metrics[name]
                ax.plot(series.steps, series.values, marker="o", label=label(number, attempt))
    loss_ax.set(title="training loss per attempt", xlabel="step", ylabel="loss", yscale="log")
    for name, ax in zip(plotted, metric_axes, strict=False):
        ax.set(title=f"{name} per attempt", xlabel="step", ylabel=name)
    for ax in metric_axes[len(plotted) :]:
        ax.set_visible(False)  # the grid's unused places
    for ax in (loss_ax, *metric_axes):
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    return png(figure)


def plot_agreement(attempts: list[Attempt], curves: list[Curve]) -> str:
    """Per attempt, how much consecutive updates' gradients agreed (each lag a chart),
    with the bar above which the verdict asks a completed run (both lags over its last
    third)."""
    figure, axes = plt.subplots(1, len(LAGS), figsize=(6 * len(LAGS), 4), squeeze=False)
    for number, (attempt, curve) in enumerate(zip(attempts, curves, strict=True), start=1):
        for lag, ax in zip(LAGS, axes.flat, strict=True):
            if lag in curve.agreement:
                series = curve.agreement[lag]
                ax.plot(series.steps, series.values, marker=".", label=label(number, attempt))
    for lag, ax in zip(LAGS, axes.flat, strict=True):
        ax.axhline(AGREEING, color="grey", linestyle="--", linewidth=1, label="asked above")
        ax.set(
            title=f"cosine of the gradients of updates {lag} apart",
            xlabel="step",
            ylabel="cosine similarity",
            ylim=(-1.05, 1.05),
        )
        ax.legend(fontsize=7)
    return png(figure)


def plot_grad_norms(attempt_label: str, norms: dict[str, dict[int, float]]) -> str:
    figure, ax = plt.subplots(figsize=(12, 4))
    colours = plt.cm.viridis(np.linspace(0, 1, max(len(norms), 1)))
    for colour, by_step in zip(colours, norms.values(), strict=False):
        steps = sorted(by_step)
        values = [by_step[s] for s in steps]
        finite = [(s, v) for s, v in zip(steps, values, strict=True) if math.isfinite(v)]
        if finite:
            ax.plot(*zip(*finite, strict=True), color=colour, linewidth=0.8)
        broken = [s for s, v in zip(steps, values, strict=True) if not math.isfinite(v)]
        if broken:
            ax.scatter(broken, [ax.get_ylim()[1]] * len(broken), color="red", marker="x")
    first, last = next(iter(norms)), list(norms)[-1]
    ax.set(
        title=f"{attempt_label}: gradient L2 norm per layer ({first} dark .. {last} light; "
        "x = non-finite)",
        xlabel="step (debugger hook)",
        ylabel="L2 norm",
        yscale="log",
    )
    return png(figure)


def plot_timeline(state: State) -> str:
    return png(timeline_figure(state))


def timeline_figure(state: State) -> plt.Figure:
    """Attempts as bars over the steps consumed in the run, with what ended each."""
    attempts, loss_at_start = state.history.attempts, start_loss(state)
    figure, ax = plt.subplots(figsize=(12, 0.6 * len(attempts) + 1.2))
    continued = {a.continues for a in state.history.runs if a.continues}
    start = 0
    for number, attempt in enumerate(attempts, start=1):
        width = max(attempt.steps_run, 1)
        done = attempt_is_clean(attempt, loss_at_start)
        ax.barh(number, width, left=start, color="tab:green" if done else "tab:red")
        finding = attempt.findings[0] if attempt.findings else None
        ended = f"{finding.rule} @ {finding.step}" if finding else (attempt.outcome or "running")
        if attempt.kind is AttemptKind.probe and attempt.job_name in continued and not finding:
            ended = "went on as the run"
        ax.text(
            start + width, number, f"  {label(number, attempt)} -> {ended}", va="center", fontsize=8
        )
        if attempt.kind is AttemptKind.run or attempt.job_name not in continued:
            start += attempt.steps_run  # a probe a run went on from is that run's start
    ax.set(
        title="timeline: steps consumed per attempt (green: clean), strategy -> what ended it",
        xlabel="training steps consumed in the run",
        ylabel="attempt",
    )
    ax.set_yticks(range(1, len(attempts) + 1))  # attempts are whole numbers
    ax.invert_yaxis()
    ax.set_xlim(0, max(start, 1) * 1.6)
    return figure


# ----------------------------------------------------------------------------------------
# tables and documents


def report_rows(state: State) -> list[list[str]]:
    """The detailed attempt table, its header first, secrets taken out (a strategy's
    reason may quote a spec value)."""
    return [[redact(cell) for cell in row] for row in attempt_rows(state, detailed=True)]


def summary_lines(figures: RunFigures) -> list[str]:
    overhead = f"{figures.overhead:.2f}x" if figures.overhead else "-"
    return [
        f"- policy: `{figures.policy}`; attempts: {figures.attempts}; "
        f"clean completed run: {'yes' if figures.clean else 'no'}",
        f"- training steps: {figures.total_steps} in all, {figures.final_steps} in the final "
        f"run (total / final = {overhead})",
        f"- final metrics: {metrics_text(figures.final_metrics, figures.metric_names)}; "
        f"job time: {fmt(figures.duration_s, 4)} s",
        *queue_lines(figures),
        f"- ended: {figures.end_reason}",
        *([f"- best model trained: {figures.best_model}"] if figures.best_model else []),
    ]


def queue_lines(figures: RunFigures) -> list[str]:
    """A scheduler's jobs (Slurm): the queue wait apart from the run time."""
    if figures.queue_wait_s is None or figures.duration_s is None:
        return []
    ran = figures.duration_s - figures.queue_wait_s
    lines = [f"- of the job time: {fmt(figures.queue_wait_s, 4)} s queued, {fmt(ran, 4)} s run"]
    if figures.requeues:
        lines.append(
            f"- requeued by the scheduler {figures.requeues}x, each time going on from the "
            "job's last checkpoint"
        )
    return lines


def markdown(state: State, figures: RunFigures) -> str:
    """The summary and the attempt table; each strategy's why (a sentence) is listed under
    the table, not in it, so the table fits a page (the UI's artifact view cuts it off)."""
    columns, *rows = report_rows(state)
    why = columns.index("why")
    narrow = [[c for i, c in enumerate(row) if i != why] for row in [columns, *rows]]
    lines = [f"# remedy run {Path(figures.run_dir).name}", "", *summary_lines(figures), ""]
    lines += markdown_table(narrow)
    reasons = [f"- {row[0]}. {row[1]}: {row[why]}" for row in rows if row[why]]
    if reasons:
        lines += ["", "Why each strategy:", "", *reasons]
    return "\n".join(lines) + "\n"


def html_document(state: State, figures: RunFigures, images: list[tuple[str, str]]) -> str:
    e = html.escape
    columns, *rows = report_rows(state)
    head = "".join(f"<th>{e(h)}</th>" for h in columns)
    body = "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>" for row in rows)
    summary = "".join(f"<li>{code_spans(e(line[2:]))}</li>" for line in summary_lines(figures))
    plots = "".join(
        f'<h2>{e(title)}</h2><img alt="{e(title)}" src="data:image/png;base64,{data}">'
        for title, data in images
    )
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>remedy report {e(Path(figures.run_dir).name)}</title><style>"
        "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;font-size:90%}"
        "td,th{border:1px solid #ccc;padding:3px 6px;vertical-align:top}img{max-width:100%}"
        "</style></head><body>"
        f"<h1>remedy run {e(Path(figures.run_dir).name)}</h1><ul>{summary}</ul>"
        f"<h2>attempts</h2><table><tr>{head}</tr>{body}</table>{plots}</body></html>\n"
    )


def code_spans(text: str) -> str:
    """Markdown's `code` as HTML's <code>: no literal backticks in the HTML report."""
    return re.sub(r"`([^`]*)`", r"<code>\1</code>", text)


def build_report(run_dir: str | Path) -> Path:
    """Write RUN_DIR/report/index.html and summary.md; return the report folder."""
    run_dir = Path(run_dir)
    state = load_run_state(run_dir)
    figures = run_figures(run_dir)
    attempts, names = state.history.attempts, figures.metric_names
    images: list[tuple[str, str]] = []
    if attempts:
        curves = [read_curve(run_dir, attempt) for attempt in attempts]
        images.append(("loss and metrics per attempt", plot_losses(attempts, curves, names)))
        if any(len(s.steps) >= 2 for curve in curves for s in curve.agreement.values()):
            title = "gradient agreement per attempt (what the verdict asks on)"
            images.append((title, plot_agreement(attempts, curves)))
        images.append(("timeline of findings and strategies", plot_timeline(state)))
        for number, attempt in enumerate(attempts, start=1):
            norms = layer_grad_norms(run_dir, attempt)
            if any(len(by_step) >= 2 for by_step in norms.values()):  # a curve, not a dot
                name = label(number, attempt)
                images.append((f"gradient norm per layer, {name}", plot_grad_norms(name, norms)))
    out = run_dir / REPORT_DIR
    out.mkdir(exist_ok=True)
    (out / "index.html").write_text(html_document(state, figures, images))
    (out / "summary.md").write_text(markdown(state, figures))
    (out / REPORT_MARKDOWN).write_text(markdown_with_plots(markdown(state, figures), images))
    return out


def markdown_with_plots(text: str, images: list[tuple[str, str]]) -> str:
    """The report as markdown with its plots inline (PNG data URIs, one image per line,
    alt text "plot"): what the Prefect UI shows as the run's report artifact, from any
    machine that ran it."""
    plots = "".join(
        f"\n## {title}\n\n![plot](data:image/png;base64,{data})\n" for title, data in images
    )
    return text + plots
