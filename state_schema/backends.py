"""The backend names run_spec.backend accepts, and each backend's own fields.

This package imports nothing of ours, so it does not import the backends (jobs/). It knows
their names from three places, none of which needs an edit here to add a backend:

- the built-in backends, whose own fields are models of this package (BUILTIN_BACKENDS);
- backends registered at runtime: jobs/registry.py registers every package under jobs/ by
  name when it is imported, and each backend class when @register_backend decorates it;
- installed packages that declare a backend as a Python entry point of the group
  `remedy.backends` (name = "package.module:BackendClass"): only the names are read here,
  no code of theirs is imported.

An unknown name is refused when the payload is read, naming run_spec.backend and the known
backends, before anything launches.
"""

from __future__ import annotations

from importlib import metadata

from pydantic import BaseModel

from remedy.state_schema.local_spec import LocalSpec
from remedy.state_schema.sagemaker_spec import SageMakerSpec
from remedy.state_schema.slurm_spec import SlurmSpec

ENTRY_POINT_GROUP = "remedy.backends"
BACKEND_NAME = r"^[a-z][a-z0-9_]{0,39}$"

# name -> the model of its own fields (a run_spec field of the same name); None: none.
BUILTIN_BACKENDS: dict[str, type[BaseModel] | None] = {
    "local": LocalSpec,
    "sagemaker": SageMakerSpec,
    "slurm": SlurmSpec,
}
_registered: dict[str, type[BaseModel] | None] = {}


def register_backend_name(name: str, options: type[BaseModel] | None = None) -> None:
    """Make `name` a backend run_spec.backend accepts (options: the model of its own fields,
    if it has any; a name registered again keeps the model it was first given one)."""
    if name in BUILTIN_BACKENDS:
        return
    if options is not None or name not in _registered:
        _registered[name] = options


def unregister_backend_name(name: str) -> None:
    """Forget a name registered at runtime (tests); the built-in ones stay."""
    _registered.pop(name, None)


def installed_backends() -> set[str]:
    """The names installed packages declare in the entry point group `remedy.backends`."""
    return {entry.name for entry in metadata.entry_points(group=ENTRY_POINT_GROUP)}


def backend_names() -> list[str]:
    """Every backend run_spec.backend accepts here, sorted."""
    return sorted({*BUILTIN_BACKENDS, *_registered, *installed_backends()})


def is_backend_name(name: str) -> bool:
    return name in BUILTIN_BACKENDS or name in _registered or name in installed_backends()


def check_backend_name(name: str) -> str:
    """The name, when it names a known backend; ValueError listing the known ones."""
    if not is_backend_name(name):
        raise ValueError(
            f"unknown backend {name!r} (run_spec.backend names a registered backend); "
            f"known: {', '.join(backend_names())}"
        )
    return name


def backend_options(name: str) -> type[BaseModel] | None:
    """The model of the backend's own fields (run_spec.<name>); None: it has none, or its
    name is not registered here with one."""
    if name in BUILTIN_BACKENDS:
        return BUILTIN_BACKENDS[name]
    return _registered.get(name)
