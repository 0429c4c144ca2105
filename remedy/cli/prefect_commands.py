"""`remedy serve`, `remedy deploy`, `remedy server` and `remedy automation`: run remedy with a
Prefect server."""

from __future__ import annotations

import argparse
import importlib.resources
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from remedy.cli.errors import UsageError


def require_api(doing: str) -> None:
    from remedy.cli.main import configure_prefect_environment

    configure_prefect_environment()
    if not os.environ.get("PREFECT_API_URL"):
        from prefect.settings import PREFECT_API_URL

        if not PREFECT_API_URL.value():
            raise UsageError(
                f"no Prefect API to {doing}: start one with `remedy server` and set "
                "PREFECT_API_URL=http://127.0.0.1:4200/api (or select a Prefect profile)"
            )


def cmd_serve(args: argparse.Namespace) -> int:
    require_api("serve against")
    from remedy.flows.deployments import serve_deployments

    parameters = search_parameters(args.search_config)
    try:
        from prefect.schedules import Cron

        Cron(args.search_cron, timezone=args.search_timezone)
    except ValueError as error:
        raise UsageError(f"--search-cron/--search-timezone: {error}") from None
    defaults = remediate_parameters(args.remediate_config)
    allow_sources(args.allow_source or [])
    if args.reports_port >= 0:
        serve_reports(args.reports_host, args.reports_port)
    serve_deployments(args.limit, args.search_cron, args.search_timezone, parameters, defaults)
    return 0


def allow_sources(folders: list[str]) -> None:
    """--allow-source DIR: runs served here (subprocesses, which inherit the environment)
    may run code under DIR, besides REMEDY_ALLOWED_SOURCE_DIRS (tasks/allowed_code.py)."""
    from remedy.tasks.allowed_code import ALLOWED_SOURCE_DIRS_ENV

    for folder in folders:
        if not Path(folder).is_dir():
            raise UsageError(f"--allow-source {folder}: no such folder")
    listed = [os.environ.get(ALLOWED_SOURCE_DIRS_ENV, ""), *map(os.path.abspath, folders)]
    os.environ[ALLOWED_SOURCE_DIRS_ENV] = os.pathsep.join(filter(None, listed))


def serve_reports(host: str, port: int) -> None:
    """The runs' HTML reports over HTTP, for the report links of the runs served here."""
    from remedy.outlets.report_server import REPORTS_URL_ENV, reports_url, start_report_server
    from remedy.records.run_folder import runs_root

    runs = runs_root()
    runs.mkdir(parents=True, exist_ok=True)
    try:
        server = start_report_server(runs, host, port)
    except OSError as error:
        raise UsageError(
            f"--reports-port {port}: cannot listen on {host}:{port} ({error.strerror}); "
            "choose another port, 0 for any free one, or -1 for no report server"
        ) from None
    os.environ[REPORTS_URL_ENV] = reports_url(server)  # the flow runs started here inherit it
    print(f"remedy: reports of {runs.resolve()} at {os.environ[REPORTS_URL_ENV]}", flush=True)


def cmd_deploy(args: argparse.Namespace) -> int:
    """Register remediate on a work pool; workers on any machine run its flow runs."""
    require_api("deploy to")
    from remedy.flows.deployments import deploy_to_pool

    defaults = remediate_parameters(args.remediate_config)
    try:
        deployment_id = deploy_to_pool(args.pool, args.name, defaults)
    except ValueError as error:
        raise UsageError(str(error)) from None
    print(
        f"remedy: deployment remediate/{args.name} ({deployment_id}) on work pool "
        f"{args.pool!r}; on every machine that trains (remedy installed): "
        f"prefect worker start --pool {args.pool} --type process",
        flush=True,
    )
    return 0


# Package data, so that `remedy automation` works from a plain install (no checkout).
AUTOMATION_FILE = "remedy/cli/automations/gave_up.yaml"


def shipped_automation() -> str:
    """The path of the automation file the package ships."""
    return str(importlib.resources.files("remedy.cli") / "automations" / "gave_up.yaml")


def cmd_automation(args: argparse.Namespace) -> int:
    """Create (or replace, by name) the Prefect automations of a file, their notification
    actions sending through the block named by --block; --print writes the file instead."""
    path = args.from_file or shipped_automation()
    if args.print:
        print(Path(path).read_text(), end="")
        return 0
    if not args.block:
        raise UsageError("remedy automation: --block BLOCK_TYPE_SLUG/NAME is required")
    require_api("create automations on")
    try:
        ids = apply_automations(path, args.block)
    except ValueError as error:
        raise UsageError(str(error)) from None
    for name, automation_id in ids.items():
        print(f"remedy: automation {name!r} ({automation_id}) notifies through {args.block}")
    return 0


def apply_automations(path: str, block: str) -> dict[str, Any]:
    """The automations of a YAML/JSON file (one, a list, or {automations: [...]}, as
    `prefect automation create --from-file` reads them) on the Prefect API, each
    send-notification action pointed at the block BLOCK_TYPE_SLUG/NAME; an automation of
    the same name is replaced. Returns {name: id}."""
    import yaml
    from prefect.client.orchestration import get_client
    from prefect.events.schemas.automations import AutomationCore

    slug, _, name = block.partition("/")
    if not slug or not name:
        raise ValueError(
            f"--block {block!r}: expected BLOCK_TYPE_SLUG/NAME, e.g. slack-webhook/alerts"
        )
    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as error:
        raise ValueError(f"{path}: {error}") from None
    if isinstance(data, dict) and "automations" in data:
        data = data["automations"]
    items = data if isinstance(data, list) else [data]
    created: dict[str, Any] = {}
    with get_client(sync_client=True) as client:
        try:
            document = client.read_block_document_by_name(name, slug, include_secrets=False)
        except Exception:  # ObjectNotFound, or an unknown block type
            raise ValueError(
                f"--block {block!r}: no such notification block on the server (create it "
                "in the UI under Blocks, or list them with `prefect block ls`)"
            ) from None
        for item in items:
            for action in item.get("actions", []):
                if action.get("type") == "send-notification":
                    action["block_document_id"] = str(document.id)
            try:
                automation = AutomationCore.model_validate(item)
            except Exception as error:
                raise ValueError(f"{path}: {error}") from None
            existing = client.read_automations_by_name(automation.name)
            if existing:
                client.update_automation(existing[0].id, automation)
                for duplicate in existing[1:]:
                    client.delete_automation(duplicate.id)
                created[automation.name] = existing[0].id
            else:
                created[automation.name] = client.create_automation(automation)
    return created


def remediate_parameters(path: str | None) -> dict[str, Any]:
    """The remediate form's defaults from a run_spec or state payload file: what a person
    chooses (run_spec, budgets, policy, policy_config), never a run's own state."""
    if path is None:
        return {}
    from remedy.state_schema import History, NextAction, PayloadError, load_state

    try:
        state = load_state(path)
    except PayloadError as error:
        raise UsageError(str(error)) from None
    if state.history != History() or state.next_action is not NextAction.launch_new:
        raise UsageError(
            f"{path}: holds a run under way (history, next_action "
            f"{state.next_action.value}); the form's defaults start a run: give a run_spec "
            "or a state that has not started (`remedy resume RUN_DIR` goes on with a run)"
        )
    defaults = state.model_dump(
        mode="json", include={"run_spec", "budgets", "policy", "policy_config"}
    )
    refuse_private(defaults, path)
    return defaults


def refuse_private(parameters: dict[str, Any], path: str) -> None:
    """A deployment's defaults show in the Prefect UI: never the role ARN or bucket."""
    from remedy.state_schema.private import PRIVATE_FIELDS, hide_private

    if hide_private(parameters) != parameters:
        fields = " and ".join(PRIVATE_FIELDS)
        variables = " and ".join(PRIVATE_FIELDS.values())
        raise UsageError(
            f"{path}: sets {fields}, which the Prefect UI would show with the deployment; "
            f"leave them out and set {variables} on the machines that run flows"
        )


def search_parameters(path: str | None) -> dict[str, Any]:
    """{space, base_spec, settings} from a JSON file, validated before anything is served."""
    if path is None:
        return {}
    from pydantic import BaseModel, ValidationError

    from remedy.flows.search import SearchSettings, SearchSpace
    from remedy.state_schema import RunSpec
    from remedy.state_schema.io import describe_validation_error, read_json

    document = read_json(path)
    models: dict[str, type[BaseModel]] = {
        "space": SearchSpace,
        "base_spec": RunSpec,
        "settings": SearchSettings,
    }
    unknown = set(document) - set(models)
    if unknown:
        raise UsageError(f"{path}: unknown key(s) {sorted(unknown)}; expected {sorted(models)}")
    try:
        for key, model in models.items():
            if key in document:
                model.model_validate(document[key])
        if "space" in document:
            base = RunSpec.model_validate(document.get("base_spec", {}))
            SearchSpace.model_validate(document["space"]).candidates(base)
    except ValidationError as error:
        raise UsageError(describe_validation_error(error, path)) from None
    refuse_private(document, path)
    return document


def cmd_server(args: argparse.Namespace) -> int:
    """A local Prefect server with its UI: SQLite by default, PostgreSQL by one URL."""
    from remedy.cli.local_server import ServerError, local_server_port, stop_background_server

    try:
        if args.stop:
            print(stop_background_server())
            return 0
        if args.port is None:
            args.port = local_server_port()
    except ServerError as error:
        raise UsageError(str(error)) from None
    env = dict(os.environ)
    if not is_loopback(args.host) and not (env.get(AUTH_STRING_ENV) or args.behind_auth_proxy):
        # Whoever can create a flow run chooses the code a served deployment runs.
        raise UsageError(
            f"--host {args.host}: the API would answer anyone who reaches this machine, and "
            "whoever can create flow runs chooses hyperparameters on the machines that "
            f"serve them; set {AUTH_STRING_ENV} (Prefect's own authentication) or put an "
            "authenticating proxy in front and pass --behind-auth-proxy"
        )
    env.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    env.setdefault("DO_NOT_TRACK", "1")
    if args.database_url:
        if not args.database_url.startswith(("postgresql+asyncpg://", "sqlite+aiosqlite://")):
            raise UsageError(
                "--database-url: expected postgresql+asyncpg://USER:PASSWORD@HOST/DB "
                "or sqlite+aiosqlite:///PATH"
            )
        env["PREFECT_SERVER_DATABASE_CONNECTION_URL"] = args.database_url
    # The UI's browser calls the API at PREFECT_UI_API_URL, which Prefect otherwise takes
    # from PREFECT_API_URL (a profile's, often :4200) or its default port, not --port.
    ui_api_url = args.ui_api_url or ui_api_url_for(args.host, args.port)
    env["PREFECT_UI_API_URL"] = ui_api_url
    env.pop("PREFECT_SERVER_UI_API_URL", None)  # it would win over PREFECT_UI_API_URL
    prefect = shutil.which("prefect", path=os.path.dirname(sys.executable)) or "prefect"
    command = [prefect, "server", "start", "--host", args.host, "--port", str(args.port)]
    ui_url = ui_api_url.removesuffix("/api")
    print(f"remedy: {' '.join(command)}; UI at {ui_url} (its API: {ui_api_url})", flush=True)
    # Become the server rather than wait on it, so that a SIGTERM (a service manager, a
    # container stop) stops the server instead of leaving it running without its parent.
    os.execvpe(command[0], command, env)


AUTH_STRING_ENV = "PREFECT_SERVER_API_AUTH_STRING"


def is_loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def ui_api_url_for(host: str, port: int) -> str:
    """Where a browser reaches the API of a server listening on host:port: that address,
    or this machine's name when it listens on every address."""
    if host in ("0.0.0.0", "::", ""):
        import socket

        host = socket.getfqdn()
    if ":" in host:  # an IPv6 address
        host = f"[{host}]"
    return f"http://{host}:{port}/api"


def register(commands: Any) -> None:
    serve = commands.add_parser(
        "serve", help="serve remedy's deployments to the Prefect API (trigger runs from the UI)"
    )
    serve.add_argument("--limit", type=int, help="most flow runs at once (default: no limit)")
    serve.add_argument(
        "--search-cron", default="0 1 * * *", help="overnight search schedule (default 01:00)"
    )
    serve.add_argument("--search-timezone", default="UTC", help="timezone of the schedule")
    serve.add_argument(
        "--remediate-config",
        help="run_spec or state JSON whose values become the remediate form's defaults",
    )
    serve.add_argument(
        "--search-config", help="JSON file {space, base_spec, settings} for the overnight search"
    )
    serve.add_argument(
        "--reports-port",
        type=int,
        default=4201,
        help="serve the runs' HTML reports on this port, linked from each run in the UI "
        "(default 4201; 0: any free port; -1: none, links are file:// URLs)",
    )
    serve.add_argument("--reports-host", default="127.0.0.1", help="address of the report server")
    serve.add_argument(
        "--allow-source",
        action="append",
        metavar="DIR",
        help="runs served here may run scripts, modules, rule files and policy modules "
        "under DIR (repeatable; adds to REMEDY_ALLOWED_SOURCE_DIRS). Without one, only the "
        "built-in job runs",
    )
    serve.set_defaults(handler=cmd_serve)

    deploy = commands.add_parser(
        "deploy", help="register the remediate deployment on a work pool (for workers)"
    )
    deploy.add_argument("--pool", default="remedy", help="process work pool (default remedy)")
    deploy.add_argument(
        "--name", default="workers", help="deployment name (default workers: remediate/workers)"
    )
    deploy.add_argument(
        "--remediate-config",
        help="run_spec or state JSON whose values become the remediate form's defaults",
    )
    deploy.set_defaults(handler=cmd_deploy)

    automation = commands.add_parser(
        "automation",
        help="create the Prefect automation that notifies when remedy gives up "
        f"({AUTOMATION_FILE}) through one of your notification blocks",
    )
    automation.add_argument(
        "--block",
        help="notification block as BLOCK_TYPE_SLUG/NAME (e.g. slack-webhook/remedy-alerts)",
    )
    automation.add_argument(
        "--from-file",
        help="automation file, YAML or JSON as `prefect automation create --from-file` "
        f"reads it (default: the one remedy ships, {AUTOMATION_FILE})",
    )
    automation.add_argument(
        "--print",
        action="store_true",
        help="write the automation file to stdout (for `prefect automation create`) and exit",
    )
    automation.set_defaults(handler=cmd_automation)

    server = commands.add_parser("server", help="start a local Prefect server with its UI")
    server.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default loopback; another needs "
        f"{AUTH_STRING_ENV} or --behind-auth-proxy)",
    )
    server.add_argument(
        "--behind-auth-proxy",
        action="store_true",
        help="--host other than loopback without Prefect's auth string: an authenticating "
        "proxy in front answers for who may reach the API",
    )
    server.add_argument(
        "--port", type=int, help="default: REMEDY_SERVER_PORT, else 4200 (where runs look)"
    )
    server.add_argument(
        "--stop",
        action="store_true",
        help="stop the server `remedy run --keep-server` started in the background",
    )
    server.add_argument(
        "--database-url",
        help="PostgreSQL (postgresql+asyncpg://...) instead of the default SQLite",
    )
    server.add_argument(
        "--ui-api-url",
        help="where browsers reach this server's API (PREFECT_UI_API_URL; default "
        "http://HOST:PORT/api, this machine's name for --host 0.0.0.0): behind a proxy "
        "or another name",
    )
    server.set_defaults(handler=cmd_server)
