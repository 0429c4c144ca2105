"""Reading and writing payload and hyperparameter files, with errors naming file and field."""

from __future__ import annotations

import difflib
import json
import os
import tempfile
from pathlib import Path
from types import UnionType
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from remedy.state_schema.hyperparameters import Hyperparameters
from remedy.state_schema.models import Payload, RunSpec, State

SCHEMA_PATH = Path(__file__).with_name("state.schema.json")


class PayloadError(ValueError):
    """A payload or run_spec file that cannot be used; the message says where and why."""


def describe_validation_error(error: ValidationError, where: str) -> str:
    """One line per invalid field; an unknown field gets a did-you-mean when a known one
    at its place is close (`leaning_rate`: did you mean learning_rate?)."""
    lines = [f"{where}: {error.error_count()} invalid field(s)"]
    root = ROOT_MODELS.get(error.title)
    for item in error.errors():
        field = ".".join(str(part) for part in item["loc"]) or "(top level)"
        hint = ""
        if item["type"] == "extra_forbidden" and root is not None:
            close = closest_field(root, tuple(item["loc"]))
            hint = f"; did you mean {close}?" if close else ""
        lines.append(f"  {field}: {item['msg']}{hint}")
    return "\n".join(lines)


ROOT_MODELS: dict[str, type[BaseModel]] = {
    model.__name__: model for model in (Payload, State, RunSpec, Hyperparameters)
}


def closest_field(root: type[BaseModel], loc: tuple[Any, ...]) -> str | None:
    """The known field name closest to an unknown one at `loc` (below the model `root`)."""
    *parents, name = loc
    place: Any = root
    for part in parents:
        place = inner_type(place, part)
    place = model_in(place)
    if place is None:
        return None
    known = [info.alias or key for key, info in place.model_fields.items()]
    matches = difflib.get_close_matches(str(name), known, n=1, cutoff=0.7)
    return matches[0] if matches else None


def model_in(annotation: Any) -> type[BaseModel] | None:
    """The model an annotation holds (X, X | None), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if get_origin(annotation) in (Union, UnionType):
        models = [model_in(arg) for arg in get_args(annotation)]
        return next((model for model in models if model is not None), None)
    return None


def inner_type(annotation: Any, part: Any) -> Any:
    """What is at `part` (a field, an index, a key) inside a value of `annotation`."""
    model = model_in(annotation)
    if model is not None:
        fields = {info.alias or key: info for key, info in model.model_fields.items()}
        found = fields.get(part)
        return found.annotation if found else None
    for arg in get_args(annotation) if get_origin(annotation) in (Union, UnionType) else ():
        if arg is not type(None):
            annotation = arg
    origin, args = get_origin(annotation), get_args(annotation)
    if origin in (list, tuple, set, frozenset) and args:
        return args[0]
    if origin is dict and len(args) == 2:
        return args[1]
    return None


def state_from_document(document: Any, where: str = "input") -> State:
    """Accept a whole payload {"state": ...}, a bare state, or a bare run_spec."""
    if not isinstance(document, dict):
        raise PayloadError(f"{where}: expected a JSON object, got {type(document).__name__}")
    try:
        if "state" in document:
            return Payload.model_validate(document).state
        if {"history", "next_action", "run_spec"} & document.keys():
            return State.model_validate(document)
        return State(run_spec=RunSpec.model_validate(document))
    except ValidationError as error:
        raise PayloadError(describe_validation_error(error, where)) from None


def read_json(path: str | Path) -> Any:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as error:
        raise PayloadError(f"{path}: cannot read ({error.strerror})") from None
    except UnicodeDecodeError as error:
        why = f"{error.reason} at byte {error.start}"
        raise PayloadError(f"{path}: not UTF-8 text ({why})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise PayloadError(f"{path}: not valid JSON ({error})") from None
    except RecursionError:
        raise PayloadError(f"{path}: JSON nested too deeply to be a payload") from None
    except ValueError as error:  # e.g. an integer of more than 4300 digits
        raise PayloadError(f"{path}: a value cannot be read ({error})") from None


def load_state(path: str | Path) -> State:
    return state_from_document(read_json(path), where=str(path))


def hyperparameters_from_document(document: Any, where: str = "hyperparameters") -> Hyperparameters:
    """The training contract from a JSON object, as the job receives it (values may be text)."""
    if not isinstance(document, dict):
        raise PayloadError(f"{where}: expected a JSON object, got {type(document).__name__}")
    try:
        return Hyperparameters.model_validate(document)
    except ValidationError as error:
        raise PayloadError(describe_validation_error(error, where)) from None


def load_hyperparameters(path: str | Path) -> Hyperparameters:
    """The job's hyperparameters file; PayloadError names the file and each bad field."""
    return hyperparameters_from_document(read_json(path), where=str(path))


def payload_json(state: State) -> str:
    return Payload(state=state).model_dump_json(indent=2)


def write_atomic(path: str | Path, text: str) -> None:
    """Write then rename, so a reader or a crash never leaves half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def save_state(path: str | Path, state: State) -> None:
    write_atomic(path, payload_json(state) + "\n")


def payload_schema() -> dict[str, Any]:
    return Payload.model_json_schema()


def schema_text() -> str:
    return json.dumps(payload_schema(), indent=2, sort_keys=True) + "\n"


def write_schema_file() -> Path:
    """Regenerate state.schema.json (python -m remedy.state_schema)."""
    SCHEMA_PATH.write_text(schema_text())
    return SCHEMA_PATH
