"""Backends are found by name: run_spec.backend names a module under remedy.jobs."""

from __future__ import annotations

from pathlib import Path

import pytest

from remedy.jobs import JobBackend, backend_for, known_backends
from remedy.jobs.local import LocalBackend


def test_the_local_backend_is_found_by_its_name(tmp_path: Path) -> None:
    backend = backend_for("local", tmp_path)
    assert isinstance(backend, LocalBackend) and isinstance(backend, JobBackend)
    assert backend.run_dir == tmp_path
    assert "local" in known_backends()
    assert not {"base", "registry"} & set(known_backends())


def test_an_unknown_backend_is_refused_naming_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"run_spec.backend: unknown backend 'kubernetes'.*local"):
        backend_for("kubernetes", tmp_path)
