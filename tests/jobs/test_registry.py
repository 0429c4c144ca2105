"""Backends are found by name: run_spec.backend names a module under remedy.jobs."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from pydantic import Field, ValidationError

from remedy.jobs import JobBackend, JobNotFound, JobSnapshot, backend_for, known_backends
from remedy.jobs.local import LocalBackend
from remedy.jobs.registry import BACKENDS, package_backends, register_backend
from remedy.state_schema import Checkpoint, PayloadError, RunSpec, state_from_document
from remedy.state_schema.backends import (
    ENTRY_POINT_GROUP,
    backend_names,
    unregister_backend_name,
)
from remedy.state_schema.base import Strict


def test_the_local_backend_is_found_by_its_name(tmp_path: Path) -> None:
    backend = backend_for("local", tmp_path)
    assert isinstance(backend, LocalBackend) and isinstance(backend, JobBackend)
    assert backend.run_dir == tmp_path
    assert "local" in known_backends()
    assert not {"base", "registry"} & set(known_backends())


def test_an_unknown_backend_is_refused_naming_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"run_spec.backend: unknown backend 'kubernetes'.*local"):
        backend_for("kubernetes", tmp_path)


def test_an_unknown_backend_is_refused_when_the_payload_is_read() -> None:
    with pytest.raises(PayloadError) as refused:
        state_from_document({"run_spec": {"backend": "kubernetes"}})
    message = str(refused.value)
    assert "run_spec.backend: " in message and "unknown backend 'kubernetes'" in message
    assert "known: local, sagemaker, slurm" in message


class ToyBackend(JobBackend):
    """A backend a test adds at runtime: the schema takes its name with no edit."""

    name = "toy"

    def launch(self, job_name: str, spec: RunSpec) -> None: ...
    def exists(self, job_name: str) -> bool: return False  # fmt: skip

    def describe(self, job_name: str) -> JobSnapshot: raise JobNotFound(job_name)  # fmt: skip

    def stop(self, job_name: str) -> None: ...
    def logs(self, job_name: str, tail: int = 50) -> str: return ""  # fmt: skip

    def metrics(self, job_name: str) -> list[dict[str, Any]]: return []  # fmt: skip

    def metrics_location(self, job_name: str) -> str: return ""  # fmt: skip

    def checkpoints(self, job_name: str) -> list[Checkpoint]: return []  # fmt: skip

    def tensor_store(self, job_name: str) -> str | None: return None  # fmt: skip


@contextmanager
def registered(cls: type[JobBackend]) -> Iterator[type[JobBackend]]:
    """The backend registered for the test only (here and with the payload's schema)."""
    register_backend(cls)
    try:
        yield cls
    finally:
        BACKENDS.pop(cls.name, None)
        unregister_backend_name(cls.name)


@pytest.fixture
def toy_registered() -> Iterator[type[JobBackend]]:
    with registered(ToyBackend) as cls:
        yield cls


def test_a_backend_registered_at_runtime_is_taken_with_no_schema_edit(
    toy_registered: type[JobBackend], tmp_path: Path
) -> None:
    assert RunSpec(backend="toy").backend == "toy"
    assert "toy" in known_backends()
    assert isinstance(backend_for("toy", tmp_path), ToyBackend)
    state = state_from_document({"run_spec": {"backend": "toy"}})
    assert state.run_spec.backend == "toy"


def test_a_backend_is_unknown_before_it_is_registered() -> None:
    with pytest.raises(ValidationError, match=r"unknown backend 'toy'"):
        RunSpec(backend="toy")


def test_every_package_under_jobs_is_a_name_the_schema_takes() -> None:
    # jobs/registry.py registers them by their folder's name, none imported
    assert set(package_backends()) <= set(backend_names())
    assert {"local", "sagemaker", "slurm"} <= set(package_backends())


class PluginBackend(ToyBackend):
    name = "plugin"


def test_a_backend_an_installed_package_declares_is_taken_and_loaded_when_named(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    declared = metadata.EntryPoint(
        name="plugin", value=f"{__name__}:PluginBackend", group=ENTRY_POINT_GROUP
    )

    def entry_points(group: str, **select: str) -> metadata.EntryPoints:
        found = metadata.EntryPoints([declared] if group == ENTRY_POINT_GROUP else [])
        return found.select(**select) if select else found

    monkeypatch.setattr(metadata, "entry_points", entry_points)
    try:
        assert RunSpec(backend="plugin").backend == "plugin"  # its code not imported
        assert "plugin" not in BACKENDS
        assert isinstance(backend_for("plugin", tmp_path), PluginBackend)
    finally:
        BACKENDS.pop("plugin", None)
        unregister_backend_name("plugin")


class ToyOptions(Strict):
    queue: str = "default"
    slots: int = Field(1, ge=1)


class ToyWithFields(ToyBackend):
    name = "toyf"
    options = ToyOptions


@pytest.fixture
def toy_with_fields() -> Iterator[type[JobBackend]]:
    with registered(ToyWithFields) as cls:
        yield cls


def test_a_registered_backend_s_own_fields_go_under_its_name(
    toy_with_fields: type[JobBackend],
) -> None:
    spec = RunSpec.model_validate({"backend": "toyf", "toyf": {"queue": "fast"}})
    fields = spec.backend_fields()
    assert isinstance(fields, ToyOptions) and (fields.queue, fields.slots) == ("fast", 1)
    dumped = spec.model_dump(mode="json")
    assert dumped["toyf"] == {"queue": "fast", "slots": 1} and "other_backends" not in dumped
    assert RunSpec.model_validate(dumped) == spec
    state = state_from_document({"run_spec": dumped})
    assert state.run_spec == spec
    with pytest.raises(PayloadError, match=r"run_spec\.toyf\.slots"):
        state_from_document({"run_spec": {"backend": "toyf", "toyf": {"slots": 0}}})
    assert RunSpec(backend="toyf").backend_fields() is None  # its defaults
    assert "toyf" not in RunSpec.model_json_schema()["properties"]


def test_fields_of_a_backend_that_is_not_registered_are_refused() -> None:
    with pytest.raises(ValidationError, match="toyf"):
        RunSpec.model_validate({"toyf": {"queue": "fast"}})
    with pytest.raises(ValidationError, match="other_backends"):
        RunSpec.model_validate({"other_backends": {"local": {"gpus_per_job": 1}}})
