"""Backends by name: run_spec.backend "local" is the module remedy.jobs.local, and so on.

Adding a backend is adding one module (or package) under jobs/ whose class is decorated
with @register_backend; it is imported only when a run names it. Its name is registered
with the payload's schema (state_schema/backends.py) as this module is imported, so a
run_spec naming it validates with no edit of the schema. A backend of another installed
package declares itself as an entry point of the group `remedy.backends`
("name = package.module:BackendClass"), loaded when a run names it.
"""

from __future__ import annotations

import importlib
import pkgutil
from importlib import metadata
from pathlib import Path
from typing import TypeVar

from remedy.jobs.base import JobBackend
from remedy.state_schema.backends import ENTRY_POINT_GROUP, backend_names, register_backend_name

B = TypeVar("B", bound=type[JobBackend])

BACKENDS: dict[str, type[JobBackend]] = {}
NOT_BACKENDS = {"base", "registry"}


def register_backend(cls: B) -> B:
    """Register the backend class under its name, here and with the payload's schema."""
    BACKENDS[cls.name] = cls
    register_backend_name(cls.name, cls.options)
    return cls


def package_backends() -> list[str]:
    """The backends under jobs/, by their module's name (none is imported)."""
    package = Path(__file__).parent
    return sorted(
        m.name for m in pkgutil.iter_modules([str(package)]) if m.name not in NOT_BACKENDS
    )


def known_backends() -> list[str]:
    """Every backend a run may name: those under jobs/, those installed packages declare
    and those registered at runtime (the names run_spec.backend accepts)."""
    return backend_names()


def backend_class(name: str) -> type[JobBackend]:
    """The class of the backend named by run_spec.backend."""
    if name not in BACKENDS and name in package_backends():
        importlib.import_module(f"{__package__}.{name}")
    if name not in BACKENDS:
        for entry in metadata.entry_points(group=ENTRY_POINT_GROUP, name=name):
            cls = entry.load()
            if isinstance(cls, type) and issubclass(cls, JobBackend) and cls.name == name:
                register_backend(cls)
    if name not in BACKENDS:
        raise ValueError(f"run_spec.backend: unknown backend {name!r}; known: {known_backends()}")
    return BACKENDS[name]


def backend_for(name: str, run_dir: str | Path) -> JobBackend:
    """The backend named by run_spec.backend, keeping its jobs under run_dir."""
    return backend_class(name)(run_dir)


for _name in package_backends():
    register_backend_name(_name)
