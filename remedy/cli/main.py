"""remedy's command line: a thin front door over the flows and libraries.

remedy demo                       the original scenario on CPU, embedded defaults
remedy run FILE                   remediate from a run_spec JSON or a state payload
remedy resume RUN_DIR             continue a stopped or crashed flow
remedy status RUN_DIR             the attempt table and state of a run
remedy logs RUN_DIR               the training log of the latest (or --job) job
remedy plan STATE.json --finding RULE    the next state the policy would produce
remedy schema                     the payload's JSON Schema
remedy report RUN_DIR / compare RUN_DIR...   HTML report with plots / runs side by side
remedy repro BUNDLE               replay a captured non-finite step and localise it
remedy rules / trial PATH / check PATH --rule NAME    the tensor debugger offline
remedy server / serve             a Prefect server with its UI / serve the deployments
remedy deploy --pool POOL         the remediate deployment on a work pool, for workers
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType

from pydantic import ValidationError

from remedy.cli.errors import UsageError
from remedy.state_schema import (
    Attempt,
    Budgets,
    Finding,
    NextAction,
    PayloadError,
    RuleStatus,
    State,
    load_state,
    payload_json,
    save_state,
)
from remedy.state_schema.io import describe_validation_error, schema_text

EXIT_OK, EXIT_NOT_COMPLETED, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130

# Modules that add subcommands: each has register(commands) adding parsers whose
# handler(args) returns an exit status and raises UsageError for bad input.
COMMAND_MODULES: list[str] = [
    "remedy.cli.repro_commands",
    "remedy.cli.prefect_commands",
    "remedy.cli.debugger_commands",
    "remedy.cli.report_commands",
]


def configure_prefect_environment() -> None:
    """Defaults that make a one-command local run work offline on a small machine."""
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("DO_NOT_TRACK", "1")


def default_run_dir(state: State) -> Path:
    from remedy.records.run_folder import runs_root

    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    return runs_root() / f"{state.run_spec.base_job_name}-{stamp}"


def new_run_dir(path: str | None, state: State) -> Path:
    from remedy.records.run_folder import state_path

    run_dir = Path(path) if path else default_run_dir(state)
    if state_path(run_dir).exists():
        raise UsageError(
            f"{run_dir}: already holds a run (state.json); use `remedy resume {run_dir}` "
            "or choose another --run-dir"
        )
    return run_dir


def check_state_out(path: str | None) -> None:
    if path and not Path(path).resolve().parent.is_dir():
        raise UsageError(f"--state-out {path}: folder {Path(path).parent} does not exist")


def run_flow(state: State, run_dir: Path, args: argparse.Namespace) -> int:
    configure_prefect_environment()
    from remedy.outlets.notifications import notifier
    from remedy.tasks.allowed_code import allow_for_this_shell
    from remedy.tasks.train import check_spec

    # A person at their own shell runs their spec's own code: said in-process, never
    # through a flow parameter (tasks/allowed_code.py).
    allow_for_this_shell(state.run_spec)
    try:
        # The flow's own first check, here before a server starts: bad input fails now.
        check_spec.fn(state, str(run_dir), holder(args))
        notifier(args.notify_config)
    except ValueError as error:
        raise UsageError(str(error)) from None
    with prefect_server(keep_server=args.keep_server):
        return launch_and_report(state, run_dir, args)


def holder(args: argparse.Namespace) -> str:
    """Who holds a run's lock, as its .lock file says."""
    return f"remedy {args.command}"


def launch_and_report(state: State, run_dir: Path, args: argparse.Namespace) -> int:
    """The flow on a checked state, then its table; the exit status."""
    from remedy.flows.remediate import RemediateSettings, remediate
    from remedy.outlets.messages import attempt_rich_table, attempt_table, payload_for_people
    from remedy.records.run_folder import REPORT_DIR, RunBusy, load_run, state_path, unlock_run
    from remedy.records.verdict import run_is_clean
    from remedy.state_schema.private import hidden_state
    from remedy.tasks.allowed_code import allow_for_this_shell
    from remedy.tasks.record import open_run

    settings = RemediateSettings(
        poll_interval_s=args.poll_interval, notify_config=args.notify_config
    )
    # A person at their own shell runs their spec's own code: said in-process, never
    # through a flow parameter (tasks/allowed_code.py).
    allow_for_this_shell(state.run_spec)
    # The flow's own opening of the run folder, here first: the folder keeps the role and
    # bucket, while the flow's parameters, which the UI shows, hide them (the flow takes
    # them from the folder, and its lock again in this process).
    try:
        _, state = open_run.fn(state, str(run_dir), holder(args))
    except (RunBusy, ValueError) as error:
        raise UsageError(str(error)) from None
    except OSError as error:  # a full disk at start: said plainly, nothing launched
        raise UsageError(f"{run_dir}: cannot write the run folder: {error}") from None
    print(f"remedy: run directory {run_dir}", flush=True)
    previous = signal.signal(signal.SIGTERM, interrupt)  # SIGTERM stops the job, as Ctrl-C
    try:
        with live_progress():
            remediate(
                state=hidden_state(state),
                run_dir=str(run_dir),
                settings=settings,
                return_state=True,
            )
    except KeyboardInterrupt:
        stop_after_interrupt(run_dir)
        return EXIT_INTERRUPTED
    finally:
        signal.signal(signal.SIGTERM, previous)
        unlock_run(run_dir)
    if not state_path(run_dir).exists():
        print(f"remedy: the flow ended before writing {state_path(run_dir)}", file=sys.stderr)
        return EXIT_NOT_COMPLETED
    final = load_run(run_dir)
    from rich.console import Console

    console = Console(highlight=False)
    print()
    if console.is_terminal:
        console.print(attempt_rich_table(final))  # fitted to the terminal
    else:
        print(attempt_table(final))  # a pipe or a file: never wrapped
    print(f"\n{ending(final)}")
    report = run_dir / REPORT_DIR / "index.html"
    if report.is_file():
        print(f"report: {report}")
    if args.json:  # the payload on the screen only when asked: it is long
        print("\n" + payload_for_people(final), flush=True)
    if args.state_out:
        save_state(args.state_out, final)
    return EXIT_OK if run_is_clean(final) else EXIT_NOT_COMPLETED


class LiveLine(logging.Handler):
    """Shows each INFO record of the flow on one live status line."""

    def __init__(self, update: object) -> None:
        super().__init__(logging.INFO)
        self.update = update

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno < logging.WARNING and record.name.startswith(
            ("prefect.flow_runs", "prefect.task_runs")
        ):
            self.update(record.getMessage())  # type: ignore[operator]


@contextmanager
def live_progress() -> Iterator[None]:
    """On a terminal: one live status line (the latest thing the flow reported) in place of
    Prefect's INFO lines on the console; warnings and errors still print, and the flow
    run's logs in the UI are complete. Elsewhere (a pipe, a log file) the lines as before."""
    from rich.console import Console

    console = Console(stderr=True)
    if not console.is_terminal:
        yield
        return
    from prefect.logging.handlers import PrefectConsoleHandler

    loggers = [logging.getLogger()] + [
        logger for logger in logging.Logger.manager.loggerDict.values()
        if isinstance(logger, logging.Logger)
    ]  # fmt: skip
    consoles = [h for lg in loggers for h in lg.handlers if isinstance(h, PrefectConsoleHandler)]
    levels = [handler.level for handler in consoles]
    with console.status("starting ...") as status:
        live = LiveLine(lambda text: status.update(text.splitlines()[0][: console.width - 4]))
        logging.getLogger("prefect").addHandler(live)
        for handler in consoles:
            handler.setLevel(max(handler.level, logging.WARNING))
        try:
            yield
        finally:
            logging.getLogger("prefect").removeHandler(live)
            for handler, level in zip(consoles, levels, strict=True):
                handler.setLevel(level)


@contextmanager
def prefect_server(keep_server: bool = False) -> Iterator[None]:
    """The Prefect server the run reports to: PREFECT_API_URL's (it must answer); else a
    `remedy server` running on this machine at its default address, reused (no start-up;
    it runs until stopped, Ctrl-C or SIGTERM); else, with keep_server, such a server started
    in the background for this run and the next ones (remedy/local_server.py); else
    Prefect's temporary server, started for this run alone (seconds to a minute on a small
    machine) and ended with it."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from remedy.cli.local_server import (
        ServerError,
        local_server_api,
        server_answers,
        start_background_server,
    )

    if PREFECT_API_URL.value():
        check_server(PREFECT_API_URL.value())
        yield
        return
    try:
        local_api = local_server_api()
        if server_answers(local_api):
            print(f"remedy: Prefect server at {local_api} (a running `remedy server`)")
        elif keep_server:
            print(f"remedy: starting a Prefect server in the background at {local_api}")
            pid = start_background_server()
            print(
                f"remedy: Prefect server at {local_api} (pid {pid}), kept for later runs; "
                "stop it with `remedy server --stop`"
            )
        else:
            start_temporary_server()
            yield
            return
    except ServerError as error:
        raise UsageError(str(error)) from None
    with temporary_settings(updates={PREFECT_API_URL: local_api}):
        yield


def start_temporary_server() -> None:
    """Start Prefect's temporary server here (Prefect then uses this one) so that a
    watchdog ends it even if remedy is killed."""
    from prefect.server.api.server import SubprocessASGIServer

    from remedy.cli.watchdog import start_watchdog

    server = SubprocessASGIServer()  # the instance Prefect's client takes in ephemeral mode
    server.start()
    assert server.server_process is not None  # start() raises when it cannot start one
    start_watchdog(server.server_process.pid)
    print(f"remedy: temporary Prefect server at {server.address} (pid {server.server_process.pid})")


def check_server(api_url: str) -> None:
    """A server named by PREFECT_API_URL that does not answer is refused in one line,
    before anything is written or launched."""
    import httpx

    try:
        httpx.get(f"{api_url.rstrip('/')}/health", timeout=10).raise_for_status()
    except httpx.HTTPError as error:
        raise UsageError(unreachable(api_url, error)) from None


def unreachable(api_url: str, error: object) -> str:
    return (
        f"cannot reach the Prefect server at {api_url} (PREFECT_API_URL): {error}; start it "
        "(`remedy server`), or unset PREFECT_API_URL for a temporary one"
    )


def interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


def stop_after_interrupt(run_dir: Path) -> None:
    from remedy.jobs import backend_for
    from remedy.records.run_folder import load_run, state_path

    if not state_path(run_dir).exists():
        return
    state = load_run(run_dir)
    job = state.history.latest_job_name
    if job and state.next_action is not NextAction.end:
        print(f"\nremedy: interrupted; stopping job {job} ...", file=sys.stderr, flush=True)
        backend_for(state.run_spec.backend, str(run_dir)).stop(job)
    print(f"remedy: continue with `remedy resume {run_dir}`", file=sys.stderr)


def demo_state() -> State:
    from remedy.training.demo import DEMO_RUN_SPEC

    # The demo shows the original ladder, its seven launches, whatever the default policy.
    return State(run_spec=DEMO_RUN_SPEC.model_copy(deep=True), policy="seed")


def cmd_demo(args: argparse.Namespace) -> int:
    state = demo_state()
    check_state_out(args.state_out)
    return run_flow(state, new_run_dir(args.run_dir, state), args)


def cmd_run(args: argparse.Namespace) -> int:
    state = load_state(args.file)
    if args.policy:
        state = state.model_copy(update={"policy": args.policy})
    if args.probe_steps is not None:
        budgets = state.budgets.model_copy(update={"probe_steps": args.probe_steps})
        state = state.model_copy(update={"budgets": Budgets.model_validate(budgets.model_dump())})
    if args.policy_config:
        state = with_policy_config(state, args.policy_config)
    check_policy(state.policy)
    check_state_out(args.state_out)
    return run_flow(state, new_run_dir(args.run_dir, state), args)


def cmd_resume(args: argparse.Namespace) -> int:
    from remedy.outlets.messages import attempt_table, payload_for_people
    from remedy.records.run_folder import is_finished, state_path
    from remedy.records.verdict import run_is_clean

    run_dir = Path(args.run_dir)
    path = state_path(run_dir)
    if not path.exists():
        raise UsageError(f"{run_dir}: no state.json here (not a run directory)")
    state = load_state(path)
    check_state_out(args.state_out)
    if state.next_action is NextAction.end and is_finished(run_dir):
        print(f"remedy: {run_dir} has already ended")
        print(attempt_table(state))
        print(f"\n{ending(state)}")
        if args.json:
            print(payload_for_people(state))
        if args.state_out:
            save_state(args.state_out, state)
        return EXIT_OK if run_is_clean(state) else EXIT_NOT_COMPLETED
    return run_flow(state, run_dir, args)


def cmd_status(args: argparse.Namespace) -> int:
    from remedy.outlets.messages import attempt_table, why_lines
    from remedy.records.run_folder import load_run

    state = load_run(args.run_dir)
    print(attempt_table(state))
    if args.why:
        print("\n" + "\n".join(why_lines(state)))
    for number, attempt in enumerate(state.history.attempts, start=1):
        if attempt.backend_job_id is not None:  # a scheduler's job: its queue wait apart
            print(f"attempt {number}: {queue_line(attempt)}")
    print(
        f"\nnext_action: {state.next_action.value}; job {state.history.latest_job_name}: "
        f"{state.job_status and state.job_status.value}; ended: {state.end_reason}"
    )
    return EXIT_OK


def ending(state: State) -> str:
    """`ended: <reason>`, and for a run not clean the best model it trained, if any."""
    from remedy.records.best_model import best_model

    best = best_model(state)
    return f"ended: {state.end_reason}" + (f"\nbest model trained: {best}" if best else "")


def queue_line(attempt: Attempt) -> str:
    """A scheduler's job: its id, the time it waited in the queue and the time it ran."""
    wait = attempt.queue_wait_s
    ran = None if attempt.duration_s is None or wait is None else attempt.duration_s - wait
    waited = "-" if wait is None else f"{wait:.0f} s"
    running = "-" if ran is None else f"{ran:.0f} s"
    requeued = (
        f"; requeued {attempt.requeues}x, each from its last checkpoint" if attempt.requeues else ""
    )
    return f"job id {attempt.backend_job_id}; queue wait {waited}; run time {running}{requeued}"


def cmd_logs(args: argparse.Namespace) -> int:
    from remedy.jobs import backend_for
    from remedy.records.run_folder import load_run

    state = load_run(args.run_dir)
    job = args.job or state.history.latest_job_name
    if job is None:
        raise UsageError(f"{args.run_dir}: no job has been launched yet")
    backend = backend_for(state.run_spec.backend, args.run_dir)
    if not backend.exists(job):
        raise UsageError(f"{args.run_dir}: no job named {job!r}")
    sys.stdout.write(backend.logs(job, tail=args.tail))
    return EXIT_OK


def with_policy_config(state: State, path: str) -> State:
    """The state with its policy_config read from `path` and checked like the payload's."""
    try:
        return State.model_validate(state.model_dump(mode="json") | {"policy_config": path})
    except ValidationError as error:
        raise UsageError(describe_validation_error(error, f"--policy-config {path}")) from None


def check_policy(name: str) -> None:
    """Refuse an unknown policy before launch; a module:Class one is read, not imported."""
    from remedy.strategies import check_policy_name

    try:
        check_policy_name(name)
    except ValueError as error:
        raise UsageError(f"policy: {error}") from None


def cmd_plan(args: argparse.Namespace) -> int:
    from remedy.decisions.plan import plan_next

    state = load_state(args.state)
    check_policy(state.policy)
    finding = Finding(rule=args.finding, step=args.step, tensor=args.tensor)
    state = state.model_copy(update={"rule_status": RuleStatus.IssuesFound})
    # The next payload in full (role and bucket too): it is meant to be fed to remedy run.
    print(payload_json(plan_next(state, [finding])))
    return EXIT_OK


def cmd_schema(args: argparse.Namespace) -> int:
    sys.stdout.write(schema_text())
    return EXIT_OK


def add_flow_options(parser: argparse.ArgumentParser, new_run: bool = True) -> None:
    if new_run:
        parser.add_argument("--run-dir", help="where state, jobs and logs go (default runs/...)")
    parser.add_argument("--state-out", help="also write the final payload to this JSON file")
    parser.add_argument(
        "--json",
        action="store_true",
        help="also print the final payload (private fields hidden) after the table",
    )
    parser.add_argument(
        "--poll-interval",
        type=float,
        default=2.0,
        help="seconds between job status polls (default 2)",
    )
    parser.add_argument("--notify-config", help="apprise config file with notification targets")
    parser.add_argument(
        "--keep-server",
        action="store_true",
        help="without PREFECT_API_URL and a running `remedy server`: start one in the "
        "background for this run and the next ones (stop it with `remedy server --stop`) "
        "instead of a temporary server for this run alone",
    )


def installed_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("remedy-train")  # the distribution's name (pyproject.toml)
    except PackageNotFoundError:
        return "(not installed: run from a source tree)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="remedy", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"remedy {installed_version()}")
    commands = parser.add_subparsers(dest="command", required=True)

    demo = commands.add_parser("demo", help="reproduce the original scenario on CPU")
    add_flow_options(demo)
    demo.set_defaults(handler=cmd_demo)

    run = commands.add_parser("run", help="remediate from a run_spec or state payload file")
    run.add_argument("file", help='run_spec JSON, a bare state, or {"state": ...}')
    run.add_argument("--policy", help="remediation policy (default: the file's, else adaptive)")
    run.add_argument(
        "--policy-config",
        metavar="FILE",
        help="JSON file: finding -> ordered strategies with limits (policy 'config', or "
        "'adaptive' for the findings it names); replaces the file's policy_config",
    )
    run.add_argument(
        "--probe-steps",
        type=int,
        metavar="N",
        help="updates each probe of candidate learning rates runs before the full relaunch "
        f"(default: the file's budgets, else {Budgets.model_fields['probe_steps'].default}; "
        "0: no probes)",
    )
    add_flow_options(run)
    run.set_defaults(handler=cmd_run)

    resume = commands.add_parser("resume", help="continue a run from its last persisted state")
    resume.add_argument("run_dir")
    add_flow_options(resume, new_run=False)
    resume.set_defaults(handler=cmd_resume)

    status = commands.add_parser("status", help="show a run's attempts and state")
    status.add_argument("run_dir")
    status.add_argument(
        "--why", action="store_true", help="each attempt's reason and what its outcome taught"
    )
    status.set_defaults(handler=cmd_status)

    logs = commands.add_parser("logs", help="print the training log of a run's job")
    logs.add_argument("run_dir")
    logs.add_argument("--job", help="job name (default: the latest)")
    logs.add_argument("--tail", type=int, default=50, help="lines from the end (default 50)")
    logs.set_defaults(handler=cmd_logs)

    plan = commands.add_parser("plan", help="print the next state for a finding; launch nothing")
    plan.add_argument("state", help="state payload JSON")
    plan.add_argument("--finding", required=True, help="rule that reported IssuesFound")
    plan.add_argument("--step", type=int, help="step at which it fired")
    plan.add_argument("--tensor", help="tensor that fired")
    plan.set_defaults(handler=cmd_plan)

    schema = commands.add_parser("schema", help="print the payload's JSON Schema")
    schema.set_defaults(handler=cmd_schema)

    for module in COMMAND_MODULES:  # further command groups, one module each
        importlib.import_module(module).register(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except (PayloadError, UsageError) as error:
        print(f"remedy: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except Exception as error:  # a server lost on the way: one line, not Prefect's traceback
        import httpx

        reason = str(error)
        if not isinstance(error, httpx.ConnectError) and not reason.startswith(
            "Failed to reach API"
        ):
            raise
        from prefect.settings import PREFECT_API_URL

        print(f"remedy: {unreachable(str(PREFECT_API_URL.value()), reason)}", file=sys.stderr)
        return EXIT_NOT_COMPLETED
