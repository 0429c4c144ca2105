"""The run form: how the remediate flow's parameters show in the Prefect UI.

Prefect derives a deployment's form from the flow's signature, wherever it is registered
(`remedy serve`, `remedy deploy`, `prefect deploy` with infra/prefect.yaml). So the form's
shape lives here, on the parameters' types (`RunSpecForm`: `Annotated[RunSpec, ...]`), not in
one registration route:

- the job's fields first, then the backend (a choice of the registered ones), then each
  backend's own fields, its group in RunSpec (`local`, `sagemaker`, `slurm`), collapsed
  until chosen (Prefect shows a nullable object as a section whose fields open when its
  type is picked);
- "position" orders every field (the UI sorts by it; a server on PostgreSQL stores the
  keys re-sorted);
- no field a strategy sets, nor the deprecated one;
- a nullable field opens on its typed input, null being its option "unset" (still valid
  for API callers that send null), not on "null" behind Prefect's type toggle;
- `<` and `>` in descriptions escaped (the UI renders them as markdown: a tag vanishes).

The payload's own schema (`remedy schema`, state.schema.json) is not changed by any of it.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import core_schema

from remedy.state_schema import Budgets, RunSpec
from remedy.state_schema.backends import backend_names

# run_spec fields a person does not set in the form: a strategy sets them on a relaunch
# (a warm start, a dropped record or step), or they are deprecated. A payload through the
# API may still give them: the flow validates run_spec itself.
FORM_LEFT_OUT = ("start_epoch", "init_checkpoint", "skip_steps", "exclude_samples",
                 "max_updates", "hyperparameters_understood")  # fmt: skip
# Each backend's own fields, a group of RunSpec's shown after the backend choice, in this
# order (a backend registered elsewhere, with its group in RunSpec, comes after them).
BACKEND_GROUPS = ("local", "sagemaker", "slurm")
SCALAR_TYPES = ("string", "integer", "number", "boolean")


class FormSchema:
    """Pydantic metadata that turns a model's JSON schema into its form (see the module)."""

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        reference = handler(schema)
        definition = handler.resolve_ref_schema(reference)
        self.shape(definition)
        for model in [definition, *referenced(definition, handler)]:  # nested models too
            typeable(model)
            escape_descriptions(model)
        return reference

    def shape(self, definition: dict[str, Any]) -> None:
        """Order (and group) the model's fields; this one keeps them as they are."""
        positioned(definition)


class RunSpecFormSchema(FormSchema):
    """RunSpec's form: the job, the backend, each backend's group; FORM_LEFT_OUT left out."""

    def shape(self, definition: dict[str, Any]) -> None:
        fields = definition["properties"]
        # a choice of the backends registered where the form is made (the payload's schema
        # takes any registered name, so it gives them as examples)
        fields["backend"]["enum"] = backend_names()
        fields["backend"].pop("examples", None)
        groups = [n for n in BACKEND_GROUPS if n in fields]
        groups += [n for n in backend_names() if n in fields and n not in groups]
        job = [n for n in fields if n not in ("backend", *groups)]
        order = [n for n in (*job, "backend", *groups) if n not in FORM_LEFT_OUT]
        definition["properties"] = {name: fields[name] for name in order}
        positioned(definition)
        # the fields left out, and the backends' fields flat as earlier payloads give them,
        # from the API
        definition["additionalProperties"] = True
        if "required" in definition:
            definition["required"] = [n for n in definition["required"] if n in order]


def referenced(
    node: Any, handler: GetJsonSchemaHandler, seen: set[str] | None = None
) -> list[dict[str, Any]]:
    """The definitions of the models `node` refers to, and theirs, each once."""
    seen = set() if seen is None else seen
    found: list[dict[str, Any]] = []
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref not in seen:
            seen.add(ref)
            definition = handler.resolve_ref_schema({"$ref": ref})
            found += [definition, *referenced(definition, handler, seen)]
        for value in node.values():
            found += referenced(value, handler, seen)
    elif isinstance(node, list):
        for item in node:
            found += referenced(item, handler, seen)
    return found


def positioned(definition: dict[str, Any]) -> None:
    """Each field's "position", and a title for every one (pydantic gives none to a field
    of a model or enum type, and the UI then shows no label)."""
    for index, (name, field) in enumerate(definition.get("properties", {}).items()):
        field["position"] = index
        field.setdefault("title", name.replace("_", " ").title())


def typeable(definition: dict[str, Any]) -> None:
    """A nullable scalar field opens on its typed input. The UI opens an anyOf on its
    {"type": "null"} option whenever the value is null (the flow's defaults are), so null
    is offered as the option "unset" ({"enum": [null]}: still valid for API callers that
    send null), and the null default goes (left empty, the field keeps the model's null)."""
    for field in definition.get("properties", {}).values():
        options = field.get("anyOf", [])
        types = [option.get("type") for option in options]
        if "null" in types and set(types) - {"null"} <= set(SCALAR_TYPES):
            options[types.index("null")] = {"enum": [None], "title": "unset"}
            if field.get("default", 0) is None:
                del field["default"]


def escape_descriptions(node: Any) -> Any:
    """`<` and `>` in every description escaped, in place."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "description" and isinstance(value, str):
                node[key] = value.replace("<", "&lt;").replace(">", "&gt;")
            else:
                escape_descriptions(value)
    elif isinstance(node, list):
        for item in node:
            escape_descriptions(item)
    return node


MODEL_FORM = FormSchema()
# The remediate flow's parameter types: the payload's models, shown as their forms.
RunSpecForm = Annotated[RunSpec, RunSpecFormSchema()]
BudgetsForm = Annotated[Budgets, MODEL_FORM]
