"""A real two-process DDP script (gloo, CPU) under the local backend: torchrun, one store
part per rank, rules over every rank, and a stop that ends every rank.

examples/ddp/train.py is an unmodified user script (torch.distributed, DistributedSampler,
DistributedDataParallel); it diverges for real at a huge --learning-rate.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

from remedy.debugger import create_trial, store
from remedy.jobs.local import LocalBackend
from remedy.state_schema import JobStatus, RunSpec
from remedy.state_schema.run_spec import exploding_tensor_rule
from tests.conftest import REPO
from tests.helpers.local_jobs import wait_final

pytestmark = pytest.mark.slow
TWO_PROCESSES = {"torch_distributed": {"processes_per_host": 2}}


def ddp_spec(**flags: object) -> RunSpec:
    return RunSpec(
        source_dir=str(REPO / "examples" / "ddp"),
        entry_point="train.py",
        hyperparameters=flags,
        distribution=TWO_PROCESSES,
        debugger_save_interval=1,  # gradients at every step: rules see each rank's
        rules=[exploding_tensor_rule()],  # one rule, the seed's: the tests count its steps
    )


def job_processes(job_dir: Path) -> list[int]:
    """Live processes (not zombies) whose environment points at this job: the supervisor,
    torchrun, the ranks, the evaluator."""
    marker = f"REMEDY_OUTPUT_DIR={job_dir}".encode()
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            environ = (proc / "environ").read_bytes()
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:  # gone, or not ours
            continue
        if marker in environ.split(b"\0") and state != "Z":
            found.append(int(proc.name))
    return found


def wait_no_processes(job_dir: Path, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while job_processes(job_dir) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert job_processes(job_dir) == [], "processes of the job outlived it"


def test_a_ddp_script_runs_unmodified_on_two_processes(tmp_path: Path) -> None:
    backend = LocalBackend(tmp_path / "run")
    backend.launch("ddp", ddp_spec(epochs=2))
    paths = backend.paths("ddp")
    snapshot = wait_final(backend, "ddp", timeout=300.0)
    log = backend.logs("ddp", tail=200)
    assert snapshot.status is JobStatus.Completed, log
    command = json.loads(paths.job.read_text())["command"]
    assert command[1:4] == ["-m", "torch.distributed.run", "--standalone"]
    assert "--nproc-per-node=2" in command
    assert "worker_0 of 2" in log and "worker_1 of 2" in log
    # torchrun's own folder is the job's, not a torchelastic_* left in the temporary one
    assert f"--log-dir={paths.logs / 'torchrun'}" in command
    assert (paths.logs / "torchrun").is_dir()

    # Each rank wrote its own part of the store; the trial reads both.
    assert store.has_ended(paths.tensors)
    trial = create_trial(paths.tensors)
    assert trial.workers() == ["worker_0", "worker_1"]
    steps = 1024 // 2 // 32 * 2  # each rank: its half of the data, 2 epochs
    assert trial.steps() == list(range(steps))
    loss = trial.tensor("loss")
    # Each rank sees its own shard: different losses; DDP averages the gradients: the same.
    assert loss.value(0, worker="worker_0") != loss.value(0, worker="worker_1")
    grad = trial.tensor("gradient/0.weight")
    for step in (0, steps - 1):
        np.testing.assert_allclose(
            grad.value(step, worker="worker_0"), grad.value(step, worker="worker_1"), rtol=1e-5
        )

    # The rule saw every step of both ranks; rank 0 alone wrote the progress files.
    (rule,) = snapshot.rules
    assert rule.status == "NoIssuesFound"
    assert rule.details == f"No issues found in {steps} steps (2 workers)"
    assert snapshot.progress is not None and snapshot.progress.step == steps
    assert json.loads(paths.result.read_text())["status"] == "Completed"
    assert len(paths.metrics.read_text().splitlines()) == steps
    assert (paths.model / "model.pt").is_file()
    wait_no_processes(paths.root)


def test_a_rule_firing_on_the_ranks_stops_every_rank(tmp_path: Path) -> None:
    backend = LocalBackend(tmp_path / "run")
    # The guard off, so the debugger's rule (beside the job) is what stops it; without a
    # stop the script would train for minutes.
    spec = ddp_spec(epochs=500, **{"learning-rate": 100}).model_copy(
        update={"nan_guard": "off", "rules": [exploding_tensor_rule()]}
    )
    backend.launch("diverges", spec)
    paths = backend.paths("diverges")
    snapshot = wait_final(backend, "diverges", timeout=300.0)
    log = backend.logs("diverges", tail=300)
    assert snapshot.status is JobStatus.Stopped, log
    (rule,) = snapshot.rules
    assert rule.status == "IssuesFound"
    assert rule.tensor is not None and rule.tensor.startswith("gradient/")
    status = json.loads((paths.rule_status / "ExplodingTensor.json").read_text())
    assert status["worker"] in ("worker_0", "worker_1")
    assert rule.details.endswith(f", on {status['worker']}")
    request = json.loads(paths.stop_request.read_text())
    assert request["rule"] == "ExplodingTensor"  # the evaluator asked, not the backend

    # Every rank stopped long before its 500 epochs, and nothing is left running.
    trial = create_trial(paths.tensors)
    assert trial.workers() == ["worker_0", "worker_1"]
    for worker in trial.workers():
        assert trial.worker(worker).steps(), f"{worker} wrote no step"
        assert len(trial.worker(worker).steps()) < 500 * 16
    wait_no_processes(paths.root)


def test_sigterm_to_torchrun_stops_every_rank(tmp_path: Path) -> None:
    backend = LocalBackend(tmp_path / "run")
    # No grace: the supervisor sends SIGTERM to torchrun as soon as the stop is asked for.
    spec = ddp_spec(epochs=500).model_copy(update={"stop_grace_s": 0.0, "rules": []})
    backend.launch("sigterm", spec)
    paths = backend.paths("sigterm")
    deadline = time.monotonic() + 120
    while not (paths.progress.exists() and backend.describe("sigterm").progress):
        assert time.monotonic() < deadline, backend.logs("sigterm", tail=100)
        time.sleep(0.2)
    backend.stop("sigterm")
    snapshot = backend.describe("sigterm")
    log = backend.logs("sigterm", tail=300)
    assert snapshot.status is JobStatus.Stopped, log
    # Both ranks' launchers ended: cleanly, or, for a rank left waiting in an all-reduce
    # for one that had already stopped, with the collective's error (job-contract.md).
    stopped, failed = log.count("remedy launch: stopped after"), log.count("remedy launch: failed")
    assert stopped >= 1 and stopped + failed == 2, log
    assert store.has_ended(paths.tensors)  # each rank closed its part of the store
    wait_no_processes(paths.root)
