"""Runs triggered through the Prefect API, as the UI does, against `remedy serve`."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.objects import StateType
from prefect.deployments import run_deployment
from prefect.settings import PREFECT_API_URL
from prefect.states import Cancelling

from remedy.jobs.local import LocalBackend
from remedy.state_schema import JobStatus, load_state
from tests.conftest import Served


def wait_for(condition: Callable[[], bool], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.3)


def spec(entry: str) -> dict:
    return {"entry_point": f"tests.jobs.entry_points.{entry}", "rules": []}


@pytest.mark.slow
def test_a_whole_payload_started_through_the_api_completes(served: Served, tmp_path: Path) -> None:
    """The form holds what a person chooses; the API still takes a whole state payload
    (the seed format), which wins over the deployment's run_spec default."""
    run_dir = tmp_path / "from-ui"
    flow_run = run_deployment(
        "remediate/remediate",
        parameters={
            "state": {"run_spec": spec("quick"), "history": {}, "next_action": "launch_new"},
            "run_dir": str(run_dir),
            "settings": {"poll_interval_s": 0.3},
        },
        timeout=180,
    )
    assert flow_run.state.type is StateType.COMPLETED, flow_run.state
    final = load_state(run_dir / "state.json")
    assert final.history.attempts[0].outcome is JobStatus.Completed
    assert final.run_spec.entry_point == "tests.jobs.entry_points.quick"


@pytest.mark.slow
def test_a_deployment_run_that_gives_up_ends_failed_with_its_reason(
    served: Served, tmp_path: Path
) -> None:
    """run_deployment callers, the Failed filter and state automations see the truth: a
    job that dies (AlgorithmError) ends the run Failed, its end reason the state's message."""
    run_dir = tmp_path / "crashes"
    flow_run = run_deployment(
        "remediate/remediate",
        parameters={
            "run_spec": spec("crashes"),
            "run_dir": str(run_dir),
            "settings": {"poll_interval_s": 0.3, "report": False},
        },
        timeout=180,
    )
    assert flow_run.state.type is StateType.FAILED, flow_run.state
    final = load_state(run_dir / "state.json")  # the attempt history stays in the folder
    assert final.history.attempts[0].outcome is JobStatus.Failed
    assert "AlgorithmError" in (final.end_reason or "")
    assert flow_run.state.message == final.end_reason


@pytest.mark.slow
def test_a_deployment_run_refuses_a_missing_script_before_launching(
    served: Served, tmp_path: Path
) -> None:
    """The preflight `remedy run` uses is every flow run's first step: a run from the UI or
    the API whose script is not there fails naming the field, before a run folder or a job
    exists."""
    run_dir = tmp_path / "no-script"
    flow_run = run_deployment(
        "remediate/remediate",
        parameters={"run_spec": {"entry_point": "no_such_train.py", "rules": []}}
        | {"run_dir": str(run_dir)},
        timeout=180,
    )
    assert flow_run.state.type is StateType.FAILED, flow_run.state
    message = flow_run.state.message or ""
    assert "run_spec.entry_point: no script 'no_such_train.py'" in message, message
    assert not run_dir.exists()


@pytest.mark.slow
def test_cancelling_a_deployment_run_stops_its_job(served: Served, tmp_path: Path) -> None:
    run_dir = tmp_path / "cancel-me"
    flow_run = run_deployment(
        "remediate/remediate",
        parameters={
            "run_spec": spec("gated"),
            "run_dir": str(run_dir),
            "settings": {"poll_interval_s": 0.3},
        },
        timeout=0,
    )

    def training() -> bool:
        path = run_dir / "state.json"
        job = load_state(path).history.latest_job_name if path.exists() else None
        return bool(job) and (run_dir / "jobs" / job / "progress.json").exists()

    wait_for(training)
    with get_client(sync_client=True) as client:
        client.set_flow_run_state(flow_run.id, Cancelling(message="from the UI"))
        wait_for(lambda: client.read_flow_run(flow_run.id).state.type is StateType.CANCELLED)
    job = load_state(run_dir / "state.json").history.latest_job_name
    backend = LocalBackend(run_dir)
    wait_for(lambda: backend.describe(job).status == "Stopped", timeout=60)


@pytest.mark.slow
def test_a_served_run_links_its_report_on_the_report_server(served: Served) -> None:
    # No run_dir: the run goes under the runs directory that `remedy serve` serves.
    flow_run = run_deployment(
        "remediate/remediate",
        parameters={"run_spec": spec("quick"), "settings": {"poll_interval_s": 0.3}},
        timeout=180,
    )
    assert flow_run.state.type is StateType.COMPLETED, flow_run.state
    folder = f"complex-resnet-model-{flow_run.name}"  # named after the job (its default name)
    response = httpx.post(
        f"{PREFECT_API_URL.value()}/artifacts/filter",
        json={"artifacts": {"key": {"any_": [f"remedy-{folder}-report"]}}}
        | {"sort": "CREATED_DESC", "limit": 1, "offset": 0},
    )
    response.raise_for_status()
    [artifact] = response.json()
    # the report itself, and the link to its HTML on the report server
    assert artifact["type"] == "markdown" and "![plot](data:image/png;base64," in artifact["data"]
    url = re.search(r"\*\*Report:\*\* \[report/index.html\]\((.+)\)", artifact["data"]).group(1)
    assert url.startswith("http://127.0.0.1:")
    assert url.endswith(f"/{folder}/report/index.html")
    page = httpx.get(url, timeout=30)
    assert page.status_code == 200 and "<html" in page.text.lower()
    assert (served.runs_dir / folder / "report" / "index.html").read_text() == page.text
    # only reports: the run's state, tensors and checkpoints are not served
    for private in ("state.json", "transitions.jsonl", "report/../state.json"):
        assert httpx.get(url.replace("report/index.html", private)).status_code == 404


def test_the_overnight_search_is_scheduled_at_one(served: Served) -> None:
    with get_client(sync_client=True) as client:
        deployment = client.read_deployment_by_name("search/overnight")
    (schedule,) = deployment.schedules
    assert schedule.schedule.cron == "0 1 * * *"
    assert schedule.schedule.timezone == "UTC"
    assert schedule.active


CLOUD_FIELDS = ("sm_role", "bucket", "region", "instance_type", "image_uri", "instance_count",
                "volume_size_gb", "max_run_s", "spot", "max_wait_s")  # fmt: skip


def cloud_run_spec(**fields: object) -> dict:
    """The form's built-in job on the cloud backend (placeholder role and bucket), its
    fields at the top of run_spec as earlier payloads give them."""
    return {
        "backend": "sagemaker",
        "sm_role": "arn:aws:iam::123456789012:role/remedy-training",
        "bucket": "remedy-form-test",
        "region": "us-west-2",
        "instance_type": "ml.g5.xlarge",
    } | fields


def test_the_run_form_takes_a_cloud_run_spec(served: Served) -> None:
    """The deployment's parameter schema as the server keeps it (the UI's form, a pool
    deployment's enforced schema) and the flow's own parameter model take backend
    sagemaker with its fields: as the form's group, or flat (an earlier payload)."""
    from prefect.utilities.schema_tools import validate

    from remedy.flows.remediate import remediate

    with get_client(sync_client=True) as client:
        schema = client.read_deployment_by_name("remediate/remediate").parameter_openapi_schema
    fields = schema["definitions"]["RunSpec"]["properties"]
    assert "sagemaker" in fields["backend"]["enum"]
    cloud = schema["definitions"]["SageMakerSpec"]["properties"]
    assert set(cloud) == set(CLOUD_FIELDS)
    flat = cloud_run_spec(spot=True, max_run_s=3600)
    grouped = {name: value for name, value in flat.items() if name not in CLOUD_FIELDS}
    grouped["sagemaker"] = {name: value for name, value in flat.items() if name in CLOUD_FIELDS}
    for given in (flat, grouped):
        parameters = {"run_spec": given}
        assert validate(parameters, schema) == []
        run_spec = remediate.validate_parameters(parameters)["run_spec"]
        assert run_spec.sagemaker is not None
        assert (run_spec.backend, run_spec.sagemaker.instance_type, run_spec.sagemaker.spot) == (
            "sagemaker",
            "ml.g5.xlarge",
            True,
        )


@pytest.mark.slow
def test_a_deployment_run_refuses_a_cloud_spec_it_cannot_launch_naming_the_field(
    served: Served, tmp_path: Path
) -> None:
    """The flow's first step is the backend's check (remedy run's preflight for the cloud):
    the run fails naming the field, before a run folder, an upload or a job exists."""
    cases = {
        "missing": (
            {"sm_role": None, "bucket": None, "region": None, "instance_type": None},
            "the sagemaker backend needs sm_role, bucket, region, instance_type",
        ),
        "typo": (
            {"instance_type": "ml.g5.xlarg"},
            "run_spec.sagemaker.instance_type: 'ml.g5.xlarg' is not a training instance",
        ),
    }
    for name, (fields, expected) in cases.items():
        flow_run = run_deployment(
            "remediate/remediate",
            parameters={"run_spec": cloud_run_spec(**fields), "run_dir": str(tmp_path / name)},
            timeout=180,
        )
        assert flow_run.state.type is StateType.FAILED, flow_run.state
        message = flow_run.state.message or ""
        assert expected in message, message
        assert "remedy-form-test" not in message and "role/remedy-training" not in message
        assert not (tmp_path / name).exists()


def test_the_run_form_shows_the_job_then_the_backend_then_its_fields() -> None:
    """The form (the remediate deployment's schema): the job's fields, the backend, then
    each backend's fields as one group; nothing a strategy sets; descriptions without raw
    tags; nullable fields open typeable. A payload through the API may still carry the
    fields left out, the cloud fields flat as earlier payloads and nulls (the flow
    validates run_spec itself)."""
    from prefect.utilities.schema_tools import validate

    from remedy.flows.deployments import remediate_deployment
    from remedy.flows.remediate import remediate
    from remedy.flows.run_form import FORM_LEFT_OUT
    from remedy.state_schema import RunSpec

    schema = remediate_deployment()._parameter_openapi_schema.model_dump(exclude_unset=True)
    properties = schema["definitions"]["RunSpec"]["properties"]
    fields = sorted(properties, key=lambda name: properties[name]["position"])
    assert fields == list(properties)
    assert fields[-4:] == ["backend", "local", "sagemaker", "slurm"]
    assert properties["backend"]["enum"] == ["local", "sagemaker", "slurm"]
    assert fields.index("entry_point") < fields.index("backend") and fields[0] == "base_job_name"
    assert not (set(FORM_LEFT_OUT) | set(CLOUD_FIELDS)) & set(fields)
    group, null = properties["sagemaker"]["anyOf"]
    assert group == {"$ref": "#/definitions/SageMakerSpec"} and null == {"type": "null"}
    cloud = schema["definitions"]["SageMakerSpec"]
    assert list(cloud["properties"]) == list(CLOUD_FIELDS)
    assert properties["sagemaker"]["title"] == "SageMaker"
    assert properties["sagemaker"]["default"] is None  # collapsed until chosen
    # a nullable field: its typed input first, null an option of its own, no null default
    unset = {"enum": [None], "title": "unset"}
    assert properties["source_dir"]["anyOf"] == [{"type": "string"}, unset]
    assert "default" not in properties["source_dir"]
    # the run folder: a plain text field, empty for the default folder (no type toggle)
    run_dir = schema["properties"]["run_dir"]
    assert (run_dir["type"], run_dir["default"], "anyOf" in run_dir) == ("string", "", False)
    text = str(schema)
    assert "<hidden>" not in text and "&lt;hidden&gt;" in text
    # one page of the form: no two inputs with the same label (two "Max Wait S" were)
    page = [properties, cloud["properties"], schema["definitions"]["SlurmSpec"]["properties"]]
    page += [schema["definitions"]["LocalSpec"]["properties"]]
    page += [schema["definitions"][name]["properties"] for name in ("RemediateSettings", "Budgets")]
    titles = [field.get("title") for group in page for field in group.values()]
    assert len(titles) == len(set(titles)), sorted(t for t in titles if titles.count(t) > 1)

    for parameters in (
        {"run_spec": {"init_checkpoint": "/ckpt", "start_epoch": 2}},
        {"run_spec": RunSpec().model_dump(mode="json")},  # flat, nulls included (a search)
        {"run_spec": {"sagemaker": {"sm_role": "arn:role", "spot": True}}},  # the form's
    ):
        assert validate(parameters, schema) == [], parameters
    # the form's group wins over flat defaults (an earlier deployment's)
    form = {"run_spec": {"region": None, "sagemaker": {"region": "eu-west-1", "spot": True}}}
    run_spec = remediate.validate_parameters(form)["run_spec"]
    assert run_spec.sagemaker is not None
    assert (run_spec.sagemaker.region, run_spec.sagemaker.spot) == ("eu-west-1", True)
    with pytest.raises(Exception, match=r"sagemaker\.depth"):
        remediate.validate_parameters({"run_spec": {"sagemaker": {"depth": 3}}})
    # the flow run's parameters as the form sent them: the group's role hidden too
    from remedy.state_schema.private import HIDDEN, hide_private

    sent = {"run_spec": {"sagemaker": {"sm_role": "arn:aws:iam::1:role/r", "bucket": "b"}}}
    assert hide_private(sent)["run_spec"]["sagemaker"] == {"sm_role": HIDDEN, "bucket": HIDDEN}


def test_the_search_form_orders_its_fields_and_opens_nullables_typeable() -> None:
    """The search's own models get the run form's treatment (flows/run_form.py): ordered,
    titled, a nullable field on its typed input with null as "unset"."""
    from remedy.flows.deployments import search_deployment

    schema = search_deployment()._parameter_openapi_schema.model_dump(exclude_unset=True)
    for name in ("SearchSpace", "SearchSettings"):
        fields = schema["definitions"][name]["properties"]
        assert [field["position"] for field in fields.values()] == list(range(len(fields)))
        assert all(field.get("title") for field in fields.values())
    timeout = schema["definitions"]["SearchSettings"]["properties"]["worker_timeout_s"]
    assert timeout["anyOf"][1] == {"enum": [None], "title": "unset"}
    search_dir = schema["properties"]["search_dir"]  # as the run form's run_dir
    shown = (search_dir["type"], search_dir["default"], "anyOf" in search_dir)
    assert shown == ("string", "", False)
