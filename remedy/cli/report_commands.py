"""remedy report RUN_DIR / remedy compare RUN_DIR...: runs as experiments.

remedy report RUN_DIR             RUN_DIR/report/index.html (plots) + summary.md
remedy compare RUN_DIR...         runs side by side (--markdown FILE writes the table too)
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from remedy.cli.errors import UsageError

ROWS = [
    ("policy", lambda f: f.policy),
    ("attempts", lambda f: str(f.attempts)),
    ("clean run", lambda f: "yes" if f.clean else "no"),
    ("total steps", lambda f: str(f.total_steps)),
    ("final run steps", lambda f: str(f.final_steps)),
    ("total / final", lambda f: f"{f.overhead:.2f}x" if f.overhead else "-"),
    ("job time (s)", lambda f: "-" if f.duration_s is None else f"{f.duration_s:.0f}"),
]


def cmd_report(args: argparse.Namespace) -> int:
    from remedy.outlets.report import ReportError, build_report

    try:
        out = build_report(args.run_dir)
    except ReportError as error:
        raise UsageError(str(error)) from None
    print(f"remedy: wrote {out / 'index.html'} and {out / 'summary.md'}")
    return 0


def comparison(figures: list[Any]) -> list[list[str]]:
    """ROWS, then a row per final metric any run has (its own metric names: a language
    model's perplexity, the built-in job's test:accuracy), "-" for a run without it."""
    header = ["", *(Path(f.run_dir).name or f.run_dir for f in figures)]
    metrics = list(dict.fromkeys(name for f in figures for name in f.metric_names))
    return (
        [header]
        + [[name, *(get(f) for f in figures)] for name, get in ROWS]
        + [[name, *(metric(f.final_metrics.get(name)) for f in figures)] for name in metrics]
    )


def metric(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def cmd_compare(args: argparse.Namespace) -> int:
    from remedy.outlets.messages import markdown_table, text_table
    from remedy.outlets.report import ReportError, run_figures

    try:
        figures = [run_figures(run_dir) for run_dir in args.run_dirs]
    except ReportError as error:
        raise UsageError(str(error)) from None
    rows = comparison(figures)
    print(text_table(rows))
    for f in figures:
        print(f"{Path(f.run_dir).name}: ended: {f.end_reason}")
    if args.markdown:
        if not Path(args.markdown).resolve().parent.is_dir():
            raise UsageError(f"--markdown {args.markdown}: folder does not exist")
        Path(args.markdown).write_text("\n".join(markdown_table(rows)) + "\n")
    return 0


def register(commands: Any) -> None:
    report = commands.add_parser("report", help="write an HTML report and markdown summary")
    report.add_argument("run_dir")
    report.set_defaults(handler=cmd_report)

    compare = commands.add_parser("compare", help="put runs side by side")
    compare.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    compare.add_argument("--markdown", help="also write the table as markdown to this file")
    compare.set_defaults(handler=cmd_compare)
