"""The job's hyperparameters: the JSON object the backend writes, checked key by key."""

import json
import math
import types
import typing
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

SYNTHETIC_TRAIN_SAMPLES = 5000
SYNTHETIC_TEST_SAMPLES = 1000


NUMERIC = (int, float, int | None, float | None)


class ConfigError(ValueError):
    pass


@dataclass
class TrainConfig:
    base_job_name: str = "complex-resnet-model"
    warmup_learning_rate: float = 0.1  # learning rate of epoch 0
    learning_rate: float = 0.1  # after the warmup epoch (then /10 at 81, /100 at 122)
    add_batch_norm: int = 0  # 1: BatchNorm2d before each residual addition
    num_epochs: int = 5
    debugger_save_interval: int = 100  # used by the backend's debugger config, not here
    entry_point: str = "remedy.training.train"  # what the backend runs; recorded only
    depth: int = 20
    width: int = 16
    activation: str = "elu"
    batch_size: int = 128
    momentum: float = 0.9
    weight_decay: float = 2e-4  # = the reference's Keras L2 of 1e-4 (its gradient is 2 x 1e-4 x w)
    dataset: Literal["synthetic", "cifar10"] = "synthetic"
    data_path: str | None = None  # CIFAR-10 python-batch folder
    train_samples: int | None = None  # None: all (synthetic: 5000)
    test_samples: int | None = None  # None: all (synthetic: 1000)
    seed: int = 0
    checkpoint_every_epochs: int = 1  # 0: no checkpoints
    # Non-finite loss or gradients before an update (training/guard.py): "stop" skips the
    # update, writes a repro bundle and stops; "skip" skips and counts; "off": never checks.
    nan_guard: Literal["off", "stop", "skip"] = "stop"
    exclude_samples: list[int] = field(default_factory=list)  # training sample ids left out
    optimizer: Literal["sgd", "momentum", "adam", "adamw"] = "momentum"
    init: Literal["he_normal", "lecun_normal", "xavier_uniform", "orthogonal"] = "he_normal"
    grad_clip_norm: float | None = None  # clip the total gradient norm; None: never
    dropout: float = 0.0  # before the dense head
    warmup_epochs: int = 1  # epochs at warmup_learning_rate (the seed: 1)
    init_checkpoint: str | None = None  # warm start: checkpoint folder to load
    start_epoch: int = 0  # warm start: first epoch to train

    def __post_init__(self) -> None:
        positive = ["warmup_learning_rate", "learning_rate", "num_epochs", "depth", "width"]
        positive += ["batch_size", "debugger_save_interval"]
        for name in positive:
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ConfigError(f"{name} must be > 0, got {value!r}")
        for name in ["train_samples", "test_samples"]:
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ConfigError(f"{name} must be > 0 or null, got {value!r}")
        if self.add_batch_norm not in (0, 1):
            raise ConfigError(f"add_batch_norm must be 0 or 1, got {self.add_batch_norm!r}")
        if not 0 <= self.momentum < 1:
            raise ConfigError(f"momentum must be in [0, 1), got {self.momentum!r}")
        if not (math.isfinite(self.weight_decay) and self.weight_decay >= 0):
            raise ConfigError(f"weight_decay must be >= 0, got {self.weight_decay!r}")
        choices = {
            "optimizer": ("sgd", "momentum", "adam", "adamw"),
            "init": ("he_normal", "lecun_normal", "xavier_uniform", "orthogonal"),
        }
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise ConfigError(f"{name} must be one of {allowed}, got {getattr(self, name)!r}")
        clip = self.grad_clip_norm
        if clip is not None and not (math.isfinite(clip) and clip > 0):
            raise ConfigError(f"grad_clip_norm must be > 0 or null, got {clip!r}")
        if not 0 <= self.dropout < 1:
            raise ConfigError(f"dropout must be in [0, 1), got {self.dropout!r}")
        if self.warmup_epochs < 0 or self.start_epoch < 0:
            raise ConfigError("warmup_epochs and start_epoch must be >= 0")
        if self.checkpoint_every_epochs < 0:
            raise ConfigError("checkpoint_every_epochs must be >= 0 (0: never)")
        if self.dataset not in ("synthetic", "cifar10"):
            raise ConfigError(f"dataset must be 'synthetic' or 'cifar10', got {self.dataset!r}")
        if self.dataset == "cifar10" and not self.data_path:
            raise ConfigError("data_path is required when dataset is 'cifar10'")
        if self.nan_guard not in ("off", "stop", "skip"):
            raise ConfigError(f"nan_guard must be 'off', 'stop' or 'skip', got {self.nan_guard!r}")
        if any(sample < 0 for sample in self.exclude_samples):
            raise ConfigError("exclude_samples must be sample ids >= 0")

    @property
    def num_train_samples(self) -> int | None:
        if self.train_samples is None and self.dataset == "synthetic":
            return SYNTHETIC_TRAIN_SAMPLES
        return self.train_samples

    @property
    def num_test_samples(self) -> int | None:
        if self.test_samples is None and self.dataset == "synthetic":
            return SYNTHETIC_TEST_SAMPLES
        return self.test_samples

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _check_type(name: str, value: Any, annotation: Any) -> Any:
    """The value if it fits the field's annotation (ints pass as floats; bools never as ints)."""
    options = typing.get_args(annotation) if isinstance(annotation, types.UnionType) else ()
    if options:  # X | None
        if value is None and type(None) in options:
            return None
        annotation = next(option for option in options if option is not type(None))
    if typing.get_origin(annotation) is Literal:
        annotation = str
    if typing.get_origin(annotation) is list:  # list[int]: every item an int, never a bool
        if isinstance(value, list) and all(
            isinstance(item, int) and not isinstance(item, bool) for item in value
        ):
            return value
        raise ConfigError(f"{name} must be a list of integers, got {value!r}")
    if annotation is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if annotation is int and isinstance(value, bool) and name == "add_batch_norm":
        return int(value)  # true/false are a fair way to say 1/0 here
    if isinstance(value, annotation) and not (annotation is int and isinstance(value, bool)):
        return value
    expected = annotation.__name__ + (" or null" if options else "")
    raise ConfigError(f"{name} must be {expected}, got {type(value).__name__} {value!r}")


def parse_config(values: dict[str, Any]) -> TrainConfig:
    if not isinstance(values, dict):
        raise ConfigError(f"hyperparameters must be a JSON object, got {type(values).__name__}")
    annotations = {field.name: field.type for field in fields(TrainConfig)}
    checked = {}
    for name, value in values.items():
        if name not in annotations:
            raise ConfigError(f"unknown hyperparameter {name!r}")
        if isinstance(value, str) and (
            annotations[name] in NUMERIC or annotations[name] == list[int]
        ):
            # The cloud service passes every hyperparameter as a string: "0.1", "5".
            try:
                value = json.loads(value)
            except json.JSONDecodeError:
                pass  # the type check below names the field
        checked[name] = _check_type(name, value, annotations[name])
    return TrainConfig(**checked)


def load_config(path: str | Path) -> TrainConfig:
    path = Path(path)
    try:
        values = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read hyperparameters ({exc})") from exc
    try:
        return parse_config(values)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
