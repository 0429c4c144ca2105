import json
import os
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from remedy.cli.errors import UsageError
from remedy.cli.prefect_commands import remediate_parameters, search_parameters
from tests.conftest import healthy, start_remedy_server


def test_search_config_is_validated_before_serving(tmp_path: Path) -> None:
    path = tmp_path / "search.json"
    path.write_text(json.dumps({"space": {"activation": ["swish"]}}))
    with pytest.raises(UsageError, match="activation"):
        search_parameters(str(path))
    path.write_text(json.dumps({"spaces": {}}))
    with pytest.raises(UsageError, match="unknown key"):
        search_parameters(str(path))
    good = {"space": {"add_batch_norm": [0, 1]}, "settings": {"concurrency": 2}}
    path.write_text(json.dumps(good))
    assert search_parameters(str(path)) == good


@pytest.mark.adversarial("secrets and access", fails_as="leaked")
def test_deployment_defaults_never_hold_the_role_or_bucket(tmp_path: Path) -> None:
    """The deployment's defaults show in the Prefect UI (issue 13)."""
    path = tmp_path / "defaults.json"
    role = "arn:aws:iam::111111111111:role/r"
    path.write_text(json.dumps({"sm_role": role, "learning_rate": 0.1}))
    with pytest.raises(UsageError, match="sets sm_role and bucket.*REMEDY_SM_ROLE"):
        remediate_parameters(str(path))
    path.write_text(json.dumps({"base_spec": {"bucket": "my-bucket"}}))
    with pytest.raises(UsageError, match="which the Prefect UI would show"):
        search_parameters(str(path))
    path.write_text(json.dumps({"learning_rate": 0.1}))
    assert "sagemaker" not in remediate_parameters(str(path))["run_spec"]


PROBE_FLOW = """
from prefect import flow

@flow(name="sqlite-default-probe")
def probe() -> int:
    return 1

assert probe() == 1
"""


@pytest.mark.slow
def test_remedy_server_keeps_its_state_in_sqlite_by_default(tmp_path: Path) -> None:
    """`remedy server` with no --database-url: PREFECT_HOME/prefect.db; SIGTERM stops it."""
    home = tmp_path / "prefect-home"
    # A profile pointing at another server (the default port): the UI of this one must
    # still call its own API, on its own port.
    home.mkdir()
    (home / "profiles.toml").write_text(
        'active = "elsewhere"\n[profiles.elsewhere]\n'
        'PREFECT_API_URL = "http://127.0.0.1:4200/api"\n'
    )
    server, url = start_remedy_server(home)
    try:
        assert httpx.get(url.removesuffix("/api") + "/ui-settings").json()["api_url"] == url
        flow_run = subprocess.run(
            [sys.executable, "-c", PROBE_FLOW],
            cwd=tmp_path,
            env={**os.environ, "PREFECT_API_URL": url, "PREFECT_HOME": str(tmp_path / "client")},
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert flow_run.returncode == 0, flow_run.stdout + flow_run.stderr
        with sqlite3.connect(home / "prefect.db") as connection:
            names = connection.execute(
                "SELECT flow.name FROM flow_run JOIN flow ON flow.id = flow_run.flow_id"
            ).fetchall()
        assert names == [("sqlite-default-probe",)]

        server.terminate()  # remedy server is the Prefect server (exec): this stops it
        server.wait(timeout=30)
        assert not healthy(url)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


def test_the_ui_of_remedy_server_calls_its_own_api(prefect_api_url: str) -> None:
    """`remedy server --port P` (the session's, on a free port, no UI setting given)
    serves a UI whose settings name the API on port P, not Prefect's default 4200."""
    settings = httpx.get(prefect_api_url.removesuffix("/api") + "/ui-settings").json()
    assert settings["api_url"] == prefect_api_url


def test_prefect_clients_default_queries_are_accepted(prefect_api_url: str) -> None:
    # prefect 3.8.8's clients send limit/offset/sort as explicit nulls; fastapi 0.151+ answers
    # HTTP 422 (pyproject.toml pins below it). `prefect deploy` and `prefect worker` use these.
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        assert isinstance(client.read_flow_runs(), list)
        assert isinstance(client.read_work_pools(), list)
        assert isinstance(client.read_artifacts(), list)


def test_serve_refuses_a_report_port_that_is_taken(prefect_api_url: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        out = subprocess.run(
            [sys.executable, "-m", "remedy", "serve", "--reports-port", port],
            env={**os.environ, "PREFECT_API_URL": prefect_api_url},
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert out.returncode == 2, out.stdout + out.stderr
    assert f"--reports-port {port}: cannot listen on 127.0.0.1:{port}" in out.stderr


@pytest.mark.adversarial("secrets and access", fails_as="leaked")
def test_the_server_listens_beyond_loopback_only_with_authentication() -> None:
    """Whoever reaches the API can create flow runs, which choose hyperparameters on the
    machines that serve them: `remedy server --host 0.0.0.0` needs Prefect's auth string
    (or an authenticating proxy, said with --behind-auth-proxy)."""
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_SERVER_API_AUTH_STRING"}
    refused = subprocess.run(
        [sys.executable, "-m", "remedy", "server", "--host", "0.0.0.0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert refused.returncode == 2, refused.stderr
    assert "--host 0.0.0.0" in refused.stderr and "PREFECT_SERVER_API_AUTH_STRING" in refused.stderr


def test_serve_allow_source_extends_what_served_runs_may_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from remedy.cli.prefect_commands import allow_sources
    from remedy.tasks.allowed_code import ALLOWED_SOURCE_DIRS_ENV, allowed_source_dirs

    monkeypatch.setenv(ALLOWED_SOURCE_DIRS_ENV, "/opt/team-code")
    allow_sources([str(tmp_path)])  # the served runs (subprocesses) inherit it
    assert allowed_source_dirs()[:2] == [Path("/opt/team-code"), tmp_path.resolve()]
    with pytest.raises(UsageError, match="--allow-source .*: no such folder"):
        allow_sources([str(tmp_path / "missing")])
