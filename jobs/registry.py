"""Backends by name: run_spec.backend "local" is the module remedy.jobs.local, and so on.

Adding a backend is adding one module (or package) under jobs/ whose class is decorated
with @register_backend; it is imported only when a run names it.
"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path
from typing import TypeVar

from remedy.jobs.base import JobBackend

B = TypeVar("B", bound=type[JobBackend])

BACKENDS: dict[str, type[JobBackend]] = {}
NOT_BACKENDS = {"base", "registry"}


def register_backend(cls: B) -> B:
    BACKENDS[cls.name] = cls
    return cls


def known_backends() -> list[str]:
    package = Path(__file__).parent
    return sorted(
        m.name for m in pkgutil.iter_modules([str(package)]) if m.name not in NOT_BACKENDS
    )


def backend_class(name: str) -> type[JobBackend]:
    """The class of the backend named by run_spec.backend."""
    if name not in BACKENDS and name in known_backends():
        importlib.import_module(f"{__package__}.{name}")
    if name not in BACKENDS:
        raise ValueError(f"run_spec.backend: unknown backend {name!r}; known: {known_backends()}")
    return BACKENDS[name]


def backend_for(name: str, run_dir: str | Path) -> JobBackend:
    """The backend named by run_spec.backend, keeping its jobs under run_dir."""
    return backend_class(name)(run_dir)
