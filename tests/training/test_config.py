import json
from pathlib import Path

import pytest
from remedy.training.config import ConfigError, TrainConfig, load_config, parse_config
from remedy.training.demo import DEMO_HYPERPARAMETERS

BACKEND_KEYS = {
    "base_job_name", "warmup_learning_rate", "learning_rate", "add_batch_norm", "num_epochs",
    "debugger_save_interval", "entry_point", "depth", "width", "activation", "batch_size",
    "momentum", "weight_decay", "dataset", "data_path", "train_samples", "test_samples", "seed",
    "checkpoint_every_epochs",
    # strategies' hyperparameters and warm start (issue 4)
    "optimizer", "init", "grad_clip_norm", "dropout", "warmup_epochs", "init_checkpoint",
    "start_epoch",
    "nan_guard", "exclude_samples",  # the NaN guard and bad records it names (issue 6)
}  # fmt: skip


def test_fields_are_exactly_the_keys_the_backend_sends() -> None:
    assert set(TrainConfig().to_dict()) == BACKEND_KEYS


def test_the_demo_configuration_parses() -> None:
    assert set(DEMO_HYPERPARAMETERS) == BACKEND_KEYS
    config = parse_config(DEMO_HYPERPARAMETERS)
    assert config.to_dict() == DEMO_HYPERPARAMETERS


def test_parse_from_file_with_seed_defaults(tmp_path: Path) -> None:
    path = tmp_path / "hp.json"
    path.write_text(json.dumps({"warmup_learning_rate": 0.05, "add_batch_norm": 1, "width": 8}))
    config = load_config(path)
    assert config.warmup_learning_rate == 0.05 and config.add_batch_norm == 1 and config.width == 8
    assert config.learning_rate == 0.1 and config.num_epochs == 5 and config.batch_size == 128


def test_synthetic_sample_defaults() -> None:
    assert parse_config({}).num_train_samples == 5000
    assert parse_config({}).num_test_samples == 1000
    assert parse_config({"train_samples": 64}).num_train_samples == 64
    cifar = parse_config({"dataset": "cifar10", "data_path": "/data"})
    assert cifar.num_train_samples is None and cifar.num_test_samples is None


def test_ints_pass_as_floats_and_numeric_strings_are_decoded() -> None:
    config = parse_config({"learning_rate": 1, "num_epochs": "3", "warmup_learning_rate": "0.5"})
    assert config.learning_rate == 1.0 and isinstance(config.learning_rate, float)
    assert config.num_epochs == 3 and config.warmup_learning_rate == 0.5


def test_unknown_key_is_named() -> None:
    with pytest.raises(ConfigError, match="'lr'"):
        parse_config({"lr": 0.1})


@pytest.mark.parametrize(
    ("key", "value"),
    [("width", 8.5), ("num_epochs", True), ("activation", 3), ("learning_rate", "fast"),
     ("data_path", 7), ("train_samples", [1]), ("base_job_name", None)],
)  # fmt: skip
def test_wrong_type_is_named(key: str, value: object) -> None:
    with pytest.raises(ConfigError, match=key):
        parse_config({key: value})


@pytest.mark.parametrize(
    ("values", "named"),
    [({"add_batch_norm": 2}, "add_batch_norm"), ({"learning_rate": 0}, "learning_rate"),
     ({"batch_size": -1}, "batch_size"), ({"momentum": 1.0}, "momentum"),
     ({"dataset": "imagenet"}, "dataset"), ({"dataset": "cifar10"}, "data_path"),
     ({"train_samples": 0}, "train_samples")],
)  # fmt: skip
def test_bad_values_are_named(values: dict, named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        parse_config(values)


def test_unreadable_file_is_named(tmp_path: Path) -> None:
    path = tmp_path / "hp.json"
    path.write_text("{not json")
    with pytest.raises(ConfigError, match="hp.json"):
        load_config(path)
    path.write_text("[1, 2]")
    with pytest.raises(ConfigError, match="JSON object"):
        load_config(path)
