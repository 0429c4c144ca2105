"""Requests checked against the service's published model (botocore's), before they go out.

botocore's own validator (the one its Stubber and every client call apply) checks types,
required members and minimums; it leaves out what the service checks on arrival: maximum
lengths (a hyperparameter value: 2500 characters), patterns, enums and the number of entries
of a map (HyperParameters: 100, Environment: 100). Both are applied here, so a request the
service would refuse is refused here first, naming the member.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

SERVICE = "sagemaker"


class RequestError(ValueError):
    """A request the service's model refuses; the message names each member."""


@cache
def service_model() -> Any:
    import botocore.session

    return botocore.session.get_session().get_service_model(SERVICE)


def instance_types() -> list[str]:
    """TrainingInstanceType's values: the instance types a training job may name."""
    return list(service_model().shape_for("TrainingInstanceType").enum)


def check_request(operation: str, params: dict[str, Any]) -> None:
    """Raise RequestError when `params` is not a valid `operation` request."""
    from botocore.validate import ParamValidator

    shape = service_model().operation_model(operation).input_shape
    problems = []
    report = ParamValidator().validate(params, shape)
    if report.has_errors():
        problems.append(report.generate_report())
    problems += constraint_problems(params, shape, operation)
    if problems:
        raise RequestError(f"{operation}: " + "; ".join(problems))


def constraint_problems(value: Any, shape: Any, where: str) -> list[str]:
    """Patterns, enums and map sizes, which botocore does not check."""
    found: list[str] = []
    kind = shape.type_name
    if kind == "structure" and isinstance(value, dict):
        for name, member in shape.members.items():
            if name in value:
                found += constraint_problems(value[name], member, f"{where}.{name}")
    elif kind == "list" and isinstance(value, list):
        most = shape.metadata.get("max")
        if most is not None and len(value) > most:
            found.append(f"{where}: {len(value)} items, at most {most}")
        for index, item in enumerate(value):
            found += constraint_problems(item, shape.member, f"{where}[{index}]")
    elif kind == "map" and isinstance(value, dict):
        most = shape.metadata.get("max")
        if most is not None and len(value) > most:
            found.append(f"{where}: {len(value)} entries, at most {most}")
        for key, item in value.items():
            found += constraint_problems(key, shape.key, f"{where} key {key!r}")
            found += constraint_problems(item, shape.value, f"{where}[{key!r}]")
    elif kind == "string" and isinstance(value, str):
        least, most = shape.metadata.get("min", 0), shape.metadata.get("max")
        if len(value) < least or (most is not None and len(value) > most):
            found.append(f"{where}: {len(value)} characters, {least} to {most} allowed")
        pattern = shape.metadata.get("pattern")
        compiled = python_pattern(pattern) if pattern else None
        if compiled is not None and not compiled.fullmatch(value):
            found.append(f"{where}: {shown(value, where)} does not match {pattern}")
        if shape.enum and value not in shape.enum:
            found.append(f"{where}: {shown(value, where)} is not one of the service's values")
    return found


@cache
def python_pattern(pattern: str) -> re.Pattern[str] | None:
    """The model's pattern in Python's syntax; None for the few in Java's alone (\\p{L}:
    the tags'), which the service checks on arrival."""
    try:
        return re.compile(pattern)
    except re.error:
        return None


# Members whose values name the account's resources: never shown in a message.
PRIVATE_MEMBERS = ("RoleArn", "S3", "Uri")


def shown(value: str, where: str, most: int = 60) -> str:
    if any(word in where for word in PRIVATE_MEMBERS) or "://" in value:
        return "(value not shown)"
    return repr(value if len(value) <= most else value[:most] + "...")
