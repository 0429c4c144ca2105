"""RunSpec: what to run and how; the training contract plus the backend's fields.

The built-in job (entry_point remedy.training.train) receives the contract's fields
(Hyperparameters). Any other entry point, a user's script or module in source_dir, is
started with its own flags (`hyperparameters`, after the fixed `arguments`, rendered in its
`hyperparameter_style`, see flags.py), and `hyperparameter_roles` says which of them the
strategies may change (see roles.py), `coupled_flags` which follow them. The job contract a
user reads is docs/job-contract.md.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import Any, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    StrictStr,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic.json_schema import SkipJsonSchema
from pydantic_core import InitErrorDetails, PydanticCustomError

from remedy.state_schema.backends import BUILTIN_BACKENDS, backend_options, check_backend_name
from remedy.state_schema.base import Strict
from remedy.state_schema.config_keys import (
    config_edits,
    is_config_key,
    names_file,
    split_config_key,
)
from remedy.state_schema.entry_points import (
    BUILTIN_ENTRY_POINT,
    check_entry_point,
    check_source_dir,
    is_script,
)
from remedy.state_schema.flags import (
    DEFAULT_STYLE,
    HYDRA_STYLE,
    FlagValue,
    HyperparameterStyle,
    check_hyperparameters,
    command_line,
    flag_label,
)
from remedy.state_schema.hyperparameters import (
    BUILTIN_NUM_CLASSES,
    Hyperparameters,
    is_number,
    takes_none,
)
from remedy.state_schema.job_traits import BUILTIN_JOB, SCRIPT_JOB, JobTraits
from remedy.state_schema.local_spec import LocalSpec
from remedy.state_schema.metric_definitions import MAX_METRIC_DEFINITIONS, MetricDefinition
from remedy.state_schema.roles import (
    LENGTH_ROLE,
    PATH_ROLES,
    check_mapped_role_name,
    check_role_name,
    length_value,
    role_value,
    script_value,
)
from remedy.state_schema.sagemaker_spec import SageMakerSpec
from remedy.state_schema.slurm_spec import SlurmSpec

# Contract fields every job uses, the built-in one or not: the rest are the built-in job's.
FIELDS_OF_EVERY_JOB = frozenset({"base_job_name", "nan_guard", "init_checkpoint", "start_epoch"})
# Fields only the built-in job reads: a script run's payload leaves them out (it never got them).
BUILTIN_ONLY_FIELDS = frozenset(Hyperparameters.model_fields) - FIELDS_OF_EVERY_JOB
# Fields only a script reads (their JSON names): a built-in run's payload leaves out the new
# ones, so it dumps as it always did.
SCRIPT_ONLY_NEW_FIELDS = (
    "hyperparameter_style",
    "arguments",
    "bare_flags",
    "coupled_flags",
    "updates_per_epoch",
)


# Fields earlier payloads give at the top of run_spec -> the backend whose fields they are
# now (run_spec.<backend>.<field>): still read there, written nested.
LEGACY_FIELDS: dict[str, str] = {
    **dict.fromkeys(SageMakerSpec.model_fields, "sagemaker"),
    **dict.fromkeys(LocalSpec.model_fields, "local"),
}


# The rules of a run_spec that names none (debugger/rule_presets.py defines the sets).
DEFAULT_RULE_PRESET = "recommended"

# A rule's name becomes its status file's name (<name>.json): a safe alphabet, no path.
RULE_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,254}$"


RuleAction = Literal["StopTraining", "Notify"]


def _stop_training() -> list[RuleAction]:
    return ["StopTraining"]


class RuleSpec(Strict):
    """One debugger rule to evaluate beside the job (DebugRuleConfiguration), or a preset:
    a named rule set of the debugger (debugger/rule_presets.py).

        {"name": "Spike", "rule": "LossSpike", "parameters": {"window": 100}}
        {"preset": "recommended"}                      every rule of the preset
        {"name": "Overfit", "rule": "Overfit", "preset": "managed"}
                                  one rule of the preset, its parameters over the preset's

    Whether the class or preset exists and takes these parameters is checked by the
    preflight, which knows the debugger's registry (this package imports nothing of ours)."""

    name: str | None = Field(
        None,
        exclude_if=lambda value: value is None,
        description="RuleConfigurationName: how the rule's status is reported; it names a "
        "file, so letters, digits, '_', '-' and '.', not starting with '.', no '..'. "
        "Required with rule; absent for a whole preset.",
    )
    rule: str | None = Field(
        None,
        min_length=1,
        exclude_if=lambda value: value is None,
        description="Rule class name in the debugger's registry, or in rule_file. Required "
        "with name; absent for a whole preset.",
    )
    preset: str | None = Field(
        None,
        min_length=1,
        exclude_if=lambda value: value is None,  # a plain rule dumps as it always did
        description="A rule set of the debugger: 'recommended' (the default rules) or "
        "'managed' (the managed service's rules with its documented defaults). Alone: "
        "every rule of the set (with these actions). With name and rule: that rule of the "
        "set, with the set's parameters under these parameters.",
    )
    parameters: dict[str, Any] = Field(default_factory=dict, description="Rule parameters.")
    actions: list[RuleAction] = Field(
        default_factory=_stop_training,
        description="What the evaluator does itself when the rule fires.",
    )
    rule_file: str | None = Field(
        None,
        min_length=1,
        exclude_if=lambda value: value is None,  # a built-in rule dumps as it always did
        description="A Python file defining the rule class (a custom rule); relative to "
        "source_dir, else to the current directory. null: a built-in rule.",
    )

    @field_validator("name")
    @classmethod
    def _name_is_a_file_name(cls, name: str | None) -> str | None:
        if name is not None and (not re.match(RULE_NAME_PATTERN, name) or ".." in name):
            raise ValueError(
                f"{name!r} cannot name a status file: use letters, digits, '_', '-' and '.' "
                "(1-255, not starting with '.', no '..', no '/')"
            )
        return name

    @model_validator(mode="after")
    def _a_rule_or_a_preset(self) -> Self:
        if self.preset is not None and self.name is None and self.rule is None:
            if self.parameters or self.rule_file is not None:
                raise ValueError(
                    f"preset {self.preset!r} alone takes only actions; to change a rule of "
                    "it, name that rule (name, rule, preset, parameters)"
                )
            return self
        missing = [key for key in ("name", "rule") if getattr(self, key) is None]
        if missing:
            raise ValueError(
                f"a rule needs name and rule (missing: {', '.join(missing)}), or is a whole "
                'preset such as {"preset": "recommended"}'
            )
        if self.preset is not None and self.rule_file is not None:
            raise ValueError("a preset's rule is a built-in one: preset and rule_file exclude")
        return self

    @property
    def is_whole_preset(self) -> bool:
        return self.name is None


def exploding_tensor_rule() -> RuleSpec:
    """The original workflow's only rule: NaN or +-inf in any gradient."""
    return RuleSpec(
        name="ExplodingTensor",
        rule="ExplodingTensor",
        parameters={"tensor_regex": ".*gradient", "only_nan": False},
    )


def field_error(loc: tuple[str, ...], message: str, value: Any) -> InitErrorDetails:
    return InitErrorDetails(type=PydanticCustomError("run_spec", message), loc=loc, input=value)


class CoupledFlag(Strict):
    """A flag that moves with a role's flag, so settings that belong together stay together
    (a schedule's min_lr with its learning rate)."""

    follows: str = Field(
        description="The flag it follows: one that hyperparameter_roles maps to a role."
    )
    relation: Literal["ratio", "equal"] = Field(
        "ratio",
        description="ratio: scaled by the same factor as the flag it follows (min_lr 0.1 "
        "-> 0.01 when learning_rate goes 1.0 -> 0.1); equal: always the same value.",
    )


class TorchDistributed(Strict):
    """torchrun on one host, as the cloud estimator's distribution={"torch_distributed":
    {"enabled": True}} starts a job; processes_per_host is the count its mpi option takes."""

    enabled: bool = Field(True, description="false: one process, as without distribution.")
    processes_per_host: int | None = Field(
        None,
        ge=1,
        description="Processes torchrun starts (--nproc-per-node). null: one per GPU the "
        "job gets, as the toolkit does; one on a machine without GPUs.",
    )


class Distribution(Strict):
    """How a job is spread over processes (the cloud estimator's `distribution` argument)."""

    torch_distributed: TorchDistributed = Field(
        description="Start the job with torchrun: one process per rank, each with RANK, "
        "LOCAL_RANK and WORLD_SIZE in its environment."
    )

    @property
    def enabled(self) -> bool:
        return self.torch_distributed.enabled


class SuccessCriterion(Strict):
    """A final metric a clean run must reach (metric names as the job reports them:
    test:accuracy, test:loss, train:loss, or the script's own)."""

    metric: str = Field(description="Name of a final metric of the job, e.g. test:accuracy.")
    op: Literal[">", ">=", "<", "<="] = Field(description="How the metric compares to value.")
    value: float = Field(allow_inf_nan=False)

    def holds(self, measured: float) -> bool:
        return {
            ">": measured > self.value,
            ">=": measured >= self.value,
            "<": measured < self.value,
            "<=": measured <= self.value,
        }[self.op]

    def __str__(self) -> str:
        return f"{self.metric} {self.op} {self.value:g}"


class RunSpec(Hyperparameters):
    """A run's parameters: the training contract (Hyperparameters, what the built-in job
    receives) plus what only the backends, the rule evaluator and the policy read."""

    # The script's flags are `hyperparameters` in JSON; in Python `script_hyperparameters`,
    # since hyperparameters() is the contract's method (what the built-in job receives).
    model_config = ConfigDict(serialize_by_alias=True)

    # --- fields of the original run_spec -------------------------------------------
    debugger_save_interval: int = Field(
        100, gt=0, le=10**9, description="Gradients are saved every this many steps."
    )

    # --- ours ----------------------------------------------------------------------
    # Any registered backend (state_schema/backends.py): adding one needs no edit here.
    backend: str = Field(
        "local",
        examples=sorted(BUILTIN_BACKENDS),
        description="Where jobs run, a registered backend: local (processes here), "
        "sagemaker (the cloud training service; sm_role, bucket, region and instance_type "
        "needed), slurm (sbatch on a Slurm cluster; its fields in slurm), or one an "
        "installed package adds. An unknown name is refused, listing the known ones.",
    )
    max_updates: int | None = Field(
        None,
        ge=1,
        exclude_if=lambda value: value is None,  # set on probes only
        description="The job stops itself after this many updates of its launch (a probe's "
        "bound: kept by the job even when the flow that watches it is gone), or holds "
        "there where its backend can continue it. null: the job's own length.",
    )
    hold_by_epochs: int | None = Field(
        None,
        ge=1,
        exclude_if=lambda value: value is None,  # set on a launch held by its epochs only
        description="Once the job measured its epoch, it holds at the first share of its "
        "length to be asked past that epoch (an eighth, a quarter or half of this many "
        "epochs, its num_epochs role's, of the updates its first DataLoader pass made), "
        "saying where in its progress file (hold_at), until its backend continues or "
        "stops it. Set by the flow on a cold start whose length only the job can measure, "
        "to ask there whether its model has begun to learn. null: no such hold.",
    )
    # Each backend's own fields, under its name (state_schema/backends.py).
    local: LocalSpec | None = Field(
        None,
        exclude_if=lambda value: value is None,  # absent unless given
        description="Local backend: each job's GPUs and a TensorBoard copy of its tensors "
        "(tensorboard, gpus_per_job). null: the defaults.",
    )
    sagemaker: SageMakerSpec | None = Field(
        None,
        title="SageMaker",
        exclude_if=lambda value: value is None,  # absent unless given
        description="Cloud backend: the training job of each attempt (sm_role, bucket, "
        "region, instance_type, image_uri, instance_count, volume_size_gb, max_run_s, spot, "
        "max_wait_s). Earlier payloads give these fields at the top of run_spec; they are "
        "read from there too.",
    )
    slurm: SlurmSpec | None = Field(
        None,
        exclude_if=lambda value: value is None,  # absent from every other backend's spec
        description="Slurm backend: the allocation each attempt asks for (partition, "
        "account, qos, time limit, nodes, GPUs, CPUs and memory, extra sbatch options) and "
        "the shared folder for the jobs' files. null: the cluster's defaults, one node.",
    )
    # The own fields of a backend registered elsewhere (its class's options): given and
    # written as run_spec.<its name>, as the three above; not in the schema, which cannot
    # know them.
    other_backends: SkipJsonSchema[dict[str, Any]] = Field(default_factory=dict, exclude=True)
    source_dir: str | None = Field(
        None,
        description="Folder of the user's code: the job's working directory, first on its "
        "import path. null: the current directory.",
    )
    entry_point: str = Field(
        BUILTIN_ENTRY_POINT,
        description="The job: a script path ending in .py, relative to source_dir (python "
        "SCRIPT), or a module (python -m MODULE). Default: the built-in ResNet job.",
    )
    script_hyperparameters: dict[str, FlagValue] = Field(
        default_factory=dict,
        alias="hyperparameters",
        description="The script's own flags, passed as --name value (true: bare --name; "
        "false, null: omitted; a list: --name v1 v2); a name FILE:dotted.key is a key of a "
        "YAML or JSON file the command line names, set in each attempt's copy of the file. "
        "Empty for the built-in job, whose hyperparameters are the fields above.",
    )
    hyperparameter_roles: dict[str, str] = Field(
        default_factory=dict,
        description='Role -> the script\'s flag name, e.g. {"learning_rate": "lr"}: which '
        "flags the remediation strategies may change. A strategy applies only when the "
        "roles it changes are mapped. output_dir: the flag that gets the attempt's own "
        "output folder; resume: the flag that gets a warm start's checkpoint folder; "
        "max_steps: the flag that says how many updates the job runs (read, never "
        "changed: a run is asked at a quarter and at half of them whether its model has "
        "begun to learn); "
        "num_epochs, for a script that counts epochs, gives that length with the updates "
        "of an epoch the launcher measures on its DataLoader.",
    )
    hyperparameter_style: HyperparameterStyle = Field(
        DEFAULT_STYLE,
        description="How the script reads its flags: '--name value' (argparse), "
        "'--name=value' (a configurator of --key=value overrides), 'name=value' (Hydra / "
        "OmegaConf overrides, dotted names allowed). Booleans are explicit: --flag True, "
        "--flag=True, flag=true.",
    )
    arguments: list[StrictStr] = Field(
        default_factory=list,
        description="Fixed arguments before the flags, e.g. a config file: "
        '["config/train_small.py"].',
    )
    bare_flags: list[str] = Field(
        default_factory=list,
        description="store_true switches among hyperparameters: true passes the bare flag "
        "(--tied), false nothing. Not in the name=value style.",
    )
    coupled_flags: dict[str, CoupledFlag] = Field(
        default_factory=dict,
        description='Flag -> the role flag it follows, e.g. {"min_lr": {"follows": "lr", '
        '"relation": "ratio"}}: when a strategy changes lr, min_lr changes by the same factor.',
    )
    distribution: Distribution | None = Field(
        None,
        description='Several processes: {"torch_distributed": {"enabled": true, '
        '"processes_per_host": 2}} starts the script with torchrun. null: one process.',
    )
    rules: list[RuleSpec] = Field(
        default_factory=lambda: [RuleSpec(preset=DEFAULT_RULE_PRESET)],
        description="Debugger rules evaluated beside the job: rules and presets (named rule "
        'sets, {"preset": "recommended"}). Default: the recommended preset. []: none.',
    )
    success_criteria: list[SuccessCriterion] = Field(
        default_factory=list,
        description='What a clean run must reach, e.g. [{"metric": "test:accuracy", '
        '"op": ">=", "value": 0.9}]. Empty: the final training loss is finite and clearly '
        "below the loss at the start (the model trained).",
    )
    metric_definitions: list[MetricDefinition] = Field(
        default_factory=list,
        max_length=MAX_METRIC_DEFINITIONS,
        description="The job's own metrics, found in its log (the cloud service's "
        'MetricDefinitions), e.g. [{"name": "test:perplexity", "regex": '
        '"test ppl\\\\s+([0-9.eE+-]+)"}]: each matching line is a value, the last one the '
        "final value; success_criteria and the reports name them.",
    )
    # What an untrained model scores, for "the model trained" without success_criteria.
    untrained_loss: float | None = Field(
        None,
        gt=0,
        allow_inf_nan=False,
        description="The loss of the model before any training, e.g. ln(10) = 2.303 for a "
        "10-class cross-entropy, ln(vocabulary size) for a language model: a clean run's "
        "final training loss must be clearly below it (and below the loss measured over "
        "the run's first steps). null: the measured one alone (the built-in job: ln 10 too).",
    )
    num_classes: int | None = Field(
        None,
        ge=2,
        le=10_000_000,
        description="Classes the model chooses among: a clean run's test:accuracy must be "
        "clearly above chance (1/num_classes). null: the built-in job's 10; a script's "
        "accuracy is then not judged.",
    )
    # A script's epoch where the launcher cannot measure one (training/epoch_length.py).
    updates_per_epoch: int | None = Field(
        None,
        ge=1,
        le=10**9,  # a number of updates, not a typo's billions
        description="Updates (optimizer steps) in one epoch of a script that batches its "
        "data by hand, where the launcher measures no epoch (it measures one on a torch "
        "DataLoader): e.g. the batches an epoch its log shows, over its gradient "
        "accumulation. With its epochs flag mapped to the num_epochs role, its length is "
        "this times the epochs, and the run is asked at a quarter and at half of it whether "
        "its model has "
        "begun to learn. null: measured on its DataLoader, where it has one.",
    )
    stop_grace_s: float = Field(
        10.0,
        ge=0,
        description="Seconds a job has to honour the stop file before it gets SIGTERM.",
    )
    kill_after_s: float = Field(
        20.0, gt=0, description="Seconds from SIGTERM to SIGKILL for a job that does not end."
    )
    progress_timeout_s: float | None = Field(
        1800.0,
        gt=0,
        description="A job whose progress file and log stay unchanged this long is frozen "
        "(a stopped or deadlocked process): it is ended and fails, naming that. null: never.",
    )
    progress_timeout: Literal["adaptive", "fixed"] = Field(
        "adaptive",
        description="adaptive: a local job is also frozen once still for 20 x its slowest "
        "interval between progress so far (at least 300 s; after 5 intervals), below "
        "progress_timeout_s; fixed: progress_timeout_s alone.",
    )
    # --- deprecated ------------------------------------------------------------------
    hyperparameters_understood: list[str] | None = Field(
        None,
        description="Deprecated, use hyperparameter_roles. Roles the entry point honours; "
        "strategies changing others are skipped. null: no restriction.",
    )

    @model_validator(mode="after")
    def _named_after_the_script(self) -> Self:
        """A script's jobs are named after it (fit.py: fit-<launch time>) unless
        base_job_name is given; the seed's name stays the built-in job's."""
        if "base_job_name" not in self.model_fields_set and self.is_script:
            stem = re.sub(r"[^A-Za-z0-9]+", "-", PurePosixPath(self.entry_point).stem).strip("-")
            if stem:
                self.base_job_name = stem[:40]
        return self

    @model_validator(mode="before")
    @classmethod
    def _other_backends(cls, data: Any) -> Any:
        """run_spec.<name> of a backend registered elsewhere with fields of its own: checked
        by its model, kept in other_backends."""
        if not isinstance(data, dict):
            return data
        names = [n for n in data if n not in cls.model_fields and backend_options(n)]
        if not names:
            return data
        data = dict(data)
        other = dict(data.get("other_backends") or {})
        errors: list[InitErrorDetails] = []
        for name in names:
            options, value = backend_options(name), data.pop(name)
            assert options is not None
            try:
                other[name] = value if isinstance(value, options) else options.model_validate(value)
            except ValidationError as error:
                for item in error.errors():
                    where = (name, *item["loc"])
                    errors.append(field_error(where, item["msg"], item["input"]))
        if errors:
            raise ValidationError.from_exception_data(cls.__name__, errors)
        data["other_backends"] = other
        return data

    @field_validator("other_backends")
    @classmethod
    def _other_backends_checked(cls, other: dict[str, Any]) -> dict[str, Any]:
        for name, value in other.items():
            options = backend_options(name)
            if name in BUILTIN_BACKENDS or options is None or not isinstance(value, options):
                raise ValueError(
                    f"{name}: not the fields of a backend registered elsewhere; give a "
                    f"backend's fields as run_spec.<its name>"
                )
        return other

    @model_validator(mode="before")
    @classmethod
    def _legacy_places(cls, data: Any) -> Any:
        """Backend fields at the top of run_spec (the original payload's sm_role, bucket,
        region, instance_type, ...) moved under their backend's name; one given in both
        places with two values is refused. A top-level default says nothing: dropped."""
        if not isinstance(data, dict) or not LEGACY_FIELDS.keys() & data.keys():
            return data
        data = dict(data)
        errors = []
        for name in [name for name in data if name in LEGACY_FIELDS]:
            value, group = data.pop(name), LEGACY_FIELDS[name]
            model = BUILTIN_BACKENDS[group]
            assert model is not None
            default = model.model_fields[name].get_default()
            if value == default and type(value) is type(default):
                continue
            given = data.get(group)
            if isinstance(given, BaseModel):
                given = given.model_dump(exclude_unset=True)
            if given is None:
                given = {}
            if not isinstance(given, dict):
                continue  # the group's own error says what is wrong
            if name in given and given[name] != value:
                message = (
                    f"{name} is given twice, at the top of run_spec (where earlier payloads kept "
                    f"it) and as run_spec.{group}.{name}, with two values: give it once, "
                    f"in run_spec.{group}"
                )
                errors.append(field_error((name,), message, value))
                continue
            data[group] = {**given, name: given.get(name, value)}
        if errors:
            raise ValidationError.from_exception_data(cls.__name__, errors)
        return data

    @field_validator("backend")
    @classmethod
    def _registered_backend(cls, backend: str) -> str:
        return check_backend_name(backend)

    @field_validator("entry_point")
    @classmethod
    def _entry_point_shape(cls, entry_point: str) -> str:
        return check_entry_point(entry_point)

    @field_validator("source_dir")
    @classmethod
    def _source_dir_shape(cls, source_dir: str | None) -> str | None:
        return check_source_dir(source_dir)

    @field_validator("metric_definitions")
    @classmethod
    def _metric_names_unique(cls, definitions: list[MetricDefinition]) -> list[MetricDefinition]:
        names = [definition.name for definition in definitions]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise ValueError(f"each metric is defined once; defined twice: {', '.join(twice)}")
        return definitions

    @field_validator("rules")
    @classmethod
    def _rule_names_unique(cls, rules: list[RuleSpec]) -> list[RuleSpec]:
        # Each name is one status file: a second rule of the same name would overwrite it.
        names = [rule.name for rule in rules if rule.name is not None]
        presets = [rule.preset for rule in rules if rule.is_whole_preset]
        names += [f"preset {preset}" for preset in presets]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise ValueError(f"each rule name is used once; used twice: {', '.join(twice)}")
        return rules

    @field_validator("script_hyperparameters", mode="before")
    @classmethod
    def _flags_shape(cls, values: Any) -> Any:
        if isinstance(values, dict):  # anything else: pydantic's own error
            check_hyperparameters(values)
        return values

    @model_validator(mode="after")
    def _script_or_builtin(self) -> Self:
        errors = self._builtin_errors() if self.is_builtin else self._script_errors()
        if errors:
            raise ValidationError.from_exception_data(type(self).__name__, errors)
        return self

    def _builtin_errors(self) -> list[InitErrorDetails]:
        why = (
            f"the built-in job ({BUILTIN_ENTRY_POINT}) takes its hyperparameters as run_spec "
            "fields (learning_rate, batch_size, ...); {field} is for a script's own flags"
        )
        errors = [
            field_error((alias,), why.format(field=alias), value)
            for alias, value in (
                ("hyperparameters", self.script_hyperparameters),
                ("hyperparameter_roles", self.hyperparameter_roles),
                ("arguments", self.arguments),
                ("bare_flags", self.bare_flags),
                ("coupled_flags", self.coupled_flags),
            )
            if value
        ]
        if self.hyperparameter_style != DEFAULT_STYLE:
            message = why.format(field="hyperparameter_style")
            style = self.hyperparameter_style
            errors.append(field_error(("hyperparameter_style",), message, style))
        if self.updates_per_epoch is not None:
            message = (
                f"the built-in job ({BUILTIN_ENTRY_POINT}) knows its own epoch (its "
                "train_samples and batch_size); updates_per_epoch is for a script"
            )
            errors.append(field_error(("updates_per_epoch",), message, self.updates_per_epoch))
        if self.distribution is not None and self.distribution.enabled:
            # Under torchrun every rank would train its own copy and write the same files.
            message = (
                f"the built-in job ({BUILTIN_ENTRY_POINT}) runs as one process; "
                "distribution is for a script that uses torch.distributed"
            )
            errors.append(field_error(("distribution",), message, self.distribution))
        return errors

    def _script_errors(self) -> list[InitErrorDetails]:
        errors = []
        for name in sorted(set(Hyperparameters.model_fields) - FIELDS_OF_EVERY_JOB):
            value = getattr(self, name)
            if value != Hyperparameters.model_fields[name].get_default(call_default_factory=True):
                message = (
                    f"a field of the built-in job ({BUILTIN_ENTRY_POINT}); "
                    f"{self.entry_point} takes its own flags in hyperparameters "
                    "(and hyperparameter_roles says which play which role)"
                )
                errors.append(field_error((name,), message, value))
        taken: dict[str, str] = {}  # flag -> role
        for role, flag in self.hyperparameter_roles.items():
            try:
                self._check_role(role, flag, taken)
            except ValueError as error:
                errors.append(field_error(("hyperparameter_roles", role), str(error), flag))
            else:
                taken[flag] = role
        errors += self._command_line_errors()
        if (stated := self.updates_per_epoch) is not None:
            if LENGTH_ROLE in self.hyperparameter_roles:
                message = (
                    f"hyperparameter_roles.{LENGTH_ROLE} states the job's length already; "
                    "state it one way (remove updates_per_epoch, or that role)"
                )
                errors.append(field_error(("updates_per_epoch",), message, stated))
            elif "num_epochs" not in self.hyperparameter_roles:
                message = (
                    "the updates of an epoch say nothing without the epochs: map the flag "
                    "that counts them to the num_epochs role (hyperparameter_roles: "
                    '{"num_epochs": "<flag>"})'
                )
                errors.append(field_error(("updates_per_epoch",), message, stated))
        for flag, coupled in self.coupled_flags.items():
            try:
                self._check_coupled(flag, coupled, taken)
            except ValueError as error:
                errors.append(field_error(("coupled_flags", flag), str(error), flag))
        percent = {d.name for d in self.metric_definitions if d.percent}
        for index, criterion in enumerate(self.success_criteria):
            if criterion.metric in percent and not 0 <= criterion.value <= 1:
                message = (
                    f"{criterion.metric} is read as a fraction (its metric definition says "
                    f'"percent": true): {criterion.value:g} is never between 0 and 1; '
                    f"state it as one (e.g. {criterion.value / 100:g})"
                )
                errors.append(field_error(("success_criteria", str(index)), message, criterion))
        return errors

    def _command_line_errors(self) -> list[InitErrorDetails]:
        errors = []
        hydra = self.hyperparameter_style == HYDRA_STYLE
        for name in self.bare_flags:
            value = self.script_hyperparameters.get(name)
            if hydra:
                why = "name=value overrides have no bare flag: give the value (name=true)"
            elif not isinstance(value, bool):
                why = f"a bare flag is a true/false entry of hyperparameters; {name} is " + (
                    "not there" if name not in self.script_hyperparameters else repr(value)
                )
            else:
                continue
            errors.append(field_error(("bare_flags",), f"{name}: {why}", name))
        if not hydra:
            for name in self.script_hyperparameters:
                if name.startswith("+"):
                    why = "a + prefix is Hydra's: only in hyperparameter_style 'name=value'"
                    errors.append(field_error(("hyperparameters", name), why, name))
        for index, argument in enumerate(self.arguments):
            if "\0" in argument or not argument:
                why = "an argument is non-empty text without NUL characters"
                errors.append(field_error(("arguments", str(index)), why, argument))
        return errors + self._config_key_errors()

    def _config_key_errors(self) -> list[InitErrorDetails]:
        """Each config file a key names must be named on the command line too: the job
        reads the attempt's copy only where it is told the file's path."""
        errors = []
        named = [*self.arguments]
        named += [value for name, value in self.script_hyperparameters.items()
                  if isinstance(value, str) and not is_config_key(name)]  # fmt: skip
        keys = [*self.script_hyperparameters, *self.path_role_flags()]
        for name in filter(is_config_key, keys):
            file, _ = split_config_key(name)
            if name in self.bare_flags:
                why = "a key of a config file is no flag: it cannot be a bare flag"
                errors.append(field_error(("bare_flags",), f"{name}: {why}", name))
            if not any(names_file(argument, file) for argument in named):
                why = (
                    f"the job is never told of {file} (no argument or flag value names it), "
                    "so it would never read the attempt's copy: name it where the script "
                    f'takes it, e.g. "arguments": ["--config", "{file}"]'
                )
                errors.append(field_error(("hyperparameters", name), why, name))
        return errors

    def path_role_flags(self) -> list[str]:
        """The flags (or config keys) of the output_dir and resume roles, which get each
        attempt's folders."""
        return [flag for role, flag in self.hyperparameter_roles.items() if role in PATH_ROLES]

    def _check_coupled(self, flag: str, coupled: CoupledFlag, taken: Mapping[str, str]) -> None:
        leader_role = taken.get(coupled.follows)
        if leader_role is None or leader_role in PATH_ROLES or leader_role == LENGTH_ROLE:
            raise ValueError(
                f"follows {coupled.follows!r}, which hyperparameter_roles does not map to a "
                "role: only a flag a strategy changes moves others"
            )
        if flag not in self.script_hyperparameters:
            raise ValueError(f'is not in hyperparameters (add "{flag}": its current value)')
        if flag in taken:
            raise ValueError(f"already plays {taken[flag]}: a flag follows or leads, not both")
        if coupled.relation == "ratio":
            annotation = Hyperparameters.model_fields[leader_role].annotation
            value = self.script_hyperparameters[flag]
            if not is_number(annotation) or takes_none(annotation):
                raise ValueError(
                    f"ratio needs a leader that is always a number; {leader_role} is not "
                    "(use relation 'equal')"
                )
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"ratio scales a number; hyperparameters.{flag} is {value!r}")

    def _check_role(self, role: str, flag: str, taken: Mapping[str, str]) -> None:
        check_mapped_role_name(role)
        if flag in taken:
            raise ValueError(f"the flag {flag!r} already plays {taken[flag]}")
        if role == LENGTH_ROLE:
            if flag not in self.script_hyperparameters:
                raise ValueError(
                    f"maps to the flag {flag!r}, which hyperparameters lacks (add "
                    f'"{flag}": the updates the job runs)'
                )
            try:
                length_value(self.script_hyperparameters[flag])
            except ValueError as error:
                raise ValueError(f"hyperparameters.{flag} {error}") from None
            return
        if role in PATH_ROLES:
            if flag in self.script_hyperparameters:
                raise ValueError(
                    f"remedy passes each attempt's own folder as {flag!r}: remove it from "
                    "hyperparameters"
                )
            return
        if flag not in self.script_hyperparameters:
            raise ValueError(
                f"maps to the flag {flag!r}, which hyperparameters lacks: a strategy would "
                f'have nothing to change (add "{flag}": <its current value>)'
            )
        try:
            role_value(role, self.script_hyperparameters[flag])
        except ValueError as error:
            raise ValueError(f"hyperparameters.{flag} {error}") from None

    # --- the backend's own fields --------------------------------------------------
    def backend_fields(self, name: str | None = None) -> BaseModel | None:
        """The own fields of the backend `name` (default: the run's), run_spec.<name>;
        None when the spec gives none (its backend's defaults)."""
        name = self.backend if name is None else name
        if name in BUILTIN_BACKENDS:
            value = getattr(self, name)
            return value if isinstance(value, BaseModel) else None
        found = self.other_backends.get(name)
        return found if isinstance(found, BaseModel) else None

    # --- what the job receives ------------------------------------------------------
    @property
    def is_builtin(self) -> bool:
        """The built-in ResNet job: it receives the contract's fields, not flags."""
        return self.entry_point == BUILTIN_ENTRY_POINT

    @property
    def job(self) -> JobTraits:
        """What is known of the job before it runs (job_traits.py): ask it, not the name."""
        return BUILTIN_JOB if self.is_builtin else SCRIPT_JOB

    @property
    def writes_into_job_folder(self) -> bool:
        """Each attempt's outputs go to its own job folder: the job does so itself, or its
        output_dir role's flag gets the folder."""
        return self.job.writes_into_job_folder or "output_dir" in self.hyperparameter_roles

    @property
    def classes(self) -> int | None:
        """Classes the job's model chooses among (num_classes, or the built-in job's);
        None: not known."""
        if self.num_classes is not None:
            return self.num_classes
        return BUILTIN_NUM_CLASSES if self.is_builtin else None

    @property
    def stated_length(self) -> int | None:
        """The updates a script's job runs in all, as its max_steps role's flag says; None
        where it maps none (the built-in job reports its own length as it runs)."""
        flag = None if self.job.reads_fields else self.hyperparameter_roles.get(LENGTH_ROLE)
        return None if flag is None else length_value(self.script_hyperparameters[flag])

    def known_length(self, measured_epoch: int | None = None) -> int | None:
        """The updates a launch runs in all where known: its stated_length, or its
        num_epochs role times the updates of an epoch, as the spec states them
        (steps_per_epoch) or as the job measured them (`measured_epoch`:
        training/epoch_length.py); None otherwise."""
        if (stated := self.stated_length) is not None:
            return stated
        per_epoch = self.steps_per_epoch or measured_epoch
        epochs = self.role("num_epochs") if self.has_role("num_epochs") else None
        if not per_epoch or not isinstance(epochs, int) or epochs <= 0:
            return None
        return epochs * per_epoch

    @property
    def steps_per_epoch(self) -> int | None:
        """Updates per epoch where known before the job runs: the built-in job's, a
        script's updates_per_epoch; None for a script that states none (its data and
        batching are its own; the launcher measures a DataLoader's epoch as it runs)."""
        return super().steps_per_epoch if self.is_builtin else self.updates_per_epoch

    @property
    def num_test_samples(self) -> int | None:
        """Test samples where known: the built-in job's; None for a script."""
        return super().num_test_samples if self.is_builtin else None

    @property
    def is_script(self) -> bool:
        """A script path (python SCRIPT); otherwise a module (python -m MODULE)."""
        return is_script(self.entry_point)

    def job_hyperparameters(
        self, output_dir: str | None = None, resume: str | None = None
    ) -> dict[str, Any]:
        """The hyperparameters the job receives, as JSON values (the toolkit's SM_HPS): a
        script's flags, with the attempt's output folder and warm start's checkpoint folder
        for the flags of the output_dir and resume roles (None: no such flag)."""
        if self.job.reads_fields:  # its warm start is a field: the copy placed for it
            fields = self.hyperparameters()
            return fields if resume is None else fields | {"init_checkpoint": resume}
        values = self._job_values(output_dir, resume)
        return {name: value for name, value in values.items() if not is_config_key(name)}

    def config_edits(
        self, output_dir: str | None = None, resume: str | None = None
    ) -> dict[str, dict[str, object]]:
        """What the job's launcher writes into its copies of the config files the command
        line names: {FILE: {key: value}} (config_keys.py); empty for a job with none."""
        if self.job.reads_fields:
            return {}
        return config_edits(self._job_values(output_dir, resume))

    def _job_values(self, output_dir: str | None, resume: str | None) -> dict[str, Any]:
        values = dict(self.script_hyperparameters)
        for role, path in (("output_dir", output_dir), ("resume", resume)):
            flag = self.hyperparameter_roles.get(role)
            if flag is not None and path is not None:
                values[flag] = path
        return values

    def job_arguments(self, output_dir: str | None = None, resume: str | None = None) -> list[str]:
        """A script's command line after its entry point: arguments, then its flags."""
        return command_line(
            self.job_hyperparameters(output_dir, resume),
            self.hyperparameter_style,
            self.arguments,
            self.bare_flags,
        )

    @model_serializer(mode="wrap")
    def _what_applies(
        self, handler: SerializerFunctionWrapHandler, info: SerializationInfo
    ) -> dict[str, Any]:
        """A script run's payload leaves out the built-in job's fields (it never received
        them: learning_rate 0.1 would mislead); a built-in run's the script's new fields.
        Either reads back as the same spec: the left-out fields hold their defaults."""
        data = handler(self)
        if info.include is not None:  # the fields asked for (hyperparameters(): the contract)
            return data
        for name, fields in self.other_backends.items():
            data[name] = fields.model_dump(mode=info.mode, exclude_defaults=info.exclude_defaults)
        left_out = BUILTIN_ONLY_FIELDS if not self.is_builtin else SCRIPT_ONLY_NEW_FIELDS
        for name in left_out:
            data.pop(name, None)
        return data

    # --- roles: what strategies read and write ----------------------------------------
    def has_role(self, role: str) -> bool:
        """True when a strategy may change this role: the built-in job has every role, a
        script those it maps (hyperparameters_understood, deprecated, restricts both)."""
        check_role_name(role)
        understood = self.hyperparameters_understood
        if understood is not None and role not in understood:
            return False
        return self.job.reads_fields or role in self.hyperparameter_roles

    def role(self, role: str) -> Any:
        """The role's current value (a contract value); None for a script that does not map
        it."""
        check_role_name(role)
        if self.job.reads_fields:
            return getattr(self, role)
        flag = self.hyperparameter_roles.get(role)
        return None if flag is None else role_value(role, self.script_hyperparameters[flag])

    def role_label(self, role: str) -> str:
        """How a change of this role is shown: the field, or the script's flag."""
        flag = None if self.job.reads_fields else self.hyperparameter_roles.get(role)
        return role if flag is None else flag_label(flag)

    def role_as_given(self, role: str) -> Any:
        """The role's value as the job is given it: the field, or the flag's value as
        written in hyperparameters (None when unmapped)."""
        if self.job.reads_fields:
            return getattr(self, role)
        flag = self.hyperparameter_roles.get(role)
        return None if flag is None else self.script_hyperparameters[flag]

    def with_roles(self, values: Mapping[str, Any]) -> RunSpec:
        """A copy with these roles set: the run_spec fields of the built-in job, or the
        script's flags (a store_true flag stays true/false). ValueError for a role a script
        does not map."""
        for role in values:
            check_role_name(role)
        if self.job.reads_fields:
            return self.model_copy(update=dict(values))
        unmapped = [role for role in values if role not in self.hyperparameter_roles]
        if unmapped:
            raise ValueError(f"hyperparameter_roles maps no flag to {', '.join(unmapped)}")
        flags = dict(self.script_hyperparameters)
        for role, value in values.items():
            flag = self.hyperparameter_roles[role]
            flags[flag] = script_value(value, flags[flag])
        leaders = {flag: role for role, flag in self.hyperparameter_roles.items()}
        for follower, coupled in self.coupled_flags.items():
            leader = coupled.follows
            if flags[leader] == self.script_hyperparameters[leader]:
                continue  # a role no strategy changed: its followers stay
            if coupled.relation == "equal":
                flags[follower] = flags[leader]
                continue
            before = role_value(leaders[leader], self.script_hyperparameters[leader])
            after = role_value(leaders[leader], flags[leader])
            flags[follower] = scaled_value(follower, coupled, flags[follower], before, after)
        return self.model_copy(update={"script_hyperparameters": flags})


def scaled_value(
    flag: str, coupled: CoupledFlag, value: Any, leader_before: Any, leader_after: Any
) -> Any:
    """A ratio-coupled flag's value once its leader went from leader_before to leader_after."""
    if leader_before == 0:
        raise ValueError(
            f"coupled_flags.{flag}: {coupled.follows} was 0, so no ratio can follow it"
        )
    scaled = value * (leader_after / leader_before)  # validated: numbers
    # 12 digits: 0.1 * 0.01 reads 0.001, not 0.0010000000000000002
    return round(scaled) if isinstance(value, int) else float(f"{scaled:.12g}")
