"""Checks of a run_spec against this machine, before the flow launches anything."""

from __future__ import annotations

import importlib.util

from remedy.state_schema import RunSpec


class PreflightError(ValueError):
    pass


def preflight(spec: RunSpec) -> None:
    """Raise PreflightError naming the field when a local job could not start."""
    if spec.backend != "local":
        return
    try:
        found = importlib.util.find_spec(spec.entry_point) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise PreflightError(f"run_spec.entry_point: no module named {spec.entry_point!r}")
    if spec.dataset == "cifar10" and spec.data_path:
        from remedy.training.data import CifarFormatError, check_cifar10_folder

        try:
            check_cifar10_folder(spec.data_path)
        except CifarFormatError as error:
            raise PreflightError(f"run_spec.data_path: {error}") from None
