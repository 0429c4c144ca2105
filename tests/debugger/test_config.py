import json
import re
from pathlib import Path

import pytest

from remedy.debugger import ConfigError, Hook, HookConfig, SaveConfig
from remedy.debugger.config import CONFIG_ENV_VAR


def selected(config: SaveConfig, upto: int = 30) -> list[int]:
    return [s for s in range(upto) if config.should_save(s)]


def test_interval_counts_from_step_zero() -> None:
    assert selected(SaveConfig(save_interval=10)) == [0, 10, 20]
    assert selected(SaveConfig(save_interval=1), upto=4) == [0, 1, 2, 3]


def test_start_and_exclusive_end() -> None:
    config = SaveConfig(save_interval=5, start_step=7, end_step=20)
    assert selected(config) == [10, 15]  # 20 is excluded, 5 is before start


def test_save_steps_are_saved_even_outside_the_range() -> None:
    config = SaveConfig(save_interval=100, start_step=10, end_step=12, save_steps=[3, 11, 25])
    assert selected(config) == [3, 11, 25]


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"save_interval": 0}, "save_interval"),
        ({"save_interval": True}, "save_interval"),
        ({"save_interval": 2.5}, "save_interval"),
        ({"start_step": -1}, "start_step"),
        ({"start_step": 5, "end_step": 5}, "end_step"),
        ({"save_steps": [1, -2]}, "save_steps[1]"),
        ({"save_steps": "1,2"}, "save_steps"),
    ],
)
def test_invalid_save_config_names_the_key(kwargs: dict, key: str) -> None:
    with pytest.raises(ConfigError, match="^" + re.escape(key) + ":"):
        SaveConfig(**kwargs)


def test_json_config_merges_collection_overrides() -> None:
    config = HookConfig.from_dict(
        {
            "out_dir": "/tmp/x",
            "save_config": {"save_interval": 100, "end_step": 1000},
            "collections": {"losses": {"save_interval": 1}, "gradients": {}, "weights": None},
        }
    )
    assert set(config.collections) == {"losses", "gradients", "weights"}
    assert config.collections["losses"] == SaveConfig(save_interval=1, end_step=1000)
    assert config.collections["gradients"] == SaveConfig(save_interval=100, end_step=1000)
    assert config.collections["weights"] == config.save_config


def test_json_config_defaults_to_losses_only() -> None:
    config = HookConfig.from_dict({"out_dir": "/tmp/x"})
    assert list(config.collections) == ["losses"]
    assert config.collections["losses"].save_interval == 100


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({}, "out_dir: required"),
        ({"out_dir": "/x", "colections": {}}, "colections: unknown key"),
        ({"out_dir": "/x", "save_config": {"interval": 3}}, "save_config.interval: unknown key"),
        (
            {"out_dir": "/x", "collections": {"gradients": {"save_interval": 0}}},
            "collections.gradients.save_interval: must be >= 1",
        ),
        ({"out_dir": "/x", "collections": "losses"}, "collections: must be an object"),
    ],
)
def test_invalid_json_config_names_the_key(data: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        HookConfig.from_dict(data)


def test_invalid_json_file(tmp_path: Path) -> None:
    path = tmp_path / "hook.json"
    path.write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        HookConfig.from_json_file(path)


def test_from_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CONFIG_ENV_VAR, raising=False)
    assert Hook.from_env() is None

    config_file = tmp_path / "hook.json"
    out_dir = tmp_path / "store"
    config_file.write_text(
        json.dumps({"out_dir": str(out_dir), "collections": {"losses": {"save_interval": 2}}})
    )
    monkeypatch.setenv(CONFIG_ENV_VAR, str(config_file))
    hook = Hook.from_env()
    assert hook is not None
    try:
        assert hook.config.collections == {"losses": SaveConfig(save_interval=2)}
        assert (out_dir / "meta.json").exists()
    finally:
        hook.close()
    assert (out_dir / "end.json").exists()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {
                "out_dir": "/x",
                "collections": {"gradients": {"reduction_config": {"norms": ["l3"]}}},
            },
            "collections.gradients.reduction_config.norms: unknown 'l3'",
        ),
        (
            {"out_dir": "/x", "reduction_config": {"reduction": ["mean"]}},
            "reduction_config.reduction: unknown key",
        ),
        (
            {"out_dir": "/x", "collections": {"activations": {"include_regex": ["("]}}},
            "collections.activations.include_regex: '\\(' is not a valid regex",
        ),
        (
            {"out_dir": "/x", "save_config": {"modes": {"TRIAN": {"save_interval": 1}}}},
            "modes.TRIAN: unknown mode",
        ),
        ({"out_dir": "/x", "tensorboard_dir": 3}, "tensorboard_dir: must be a non-empty string"),
    ],
)
def test_invalid_capture_options_name_the_key(data: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        HookConfig.from_dict(data)


def test_per_mode_overrides_inherit_and_round_trip() -> None:
    config = HookConfig.from_dict(
        {
            "out_dir": "/x",
            "save_config": {"save_interval": 10, "end_step": 50, "modes": {"eval": {}}},
            "collections": {"losses": {"modes": {"TRAIN": {"save_interval": 1}}}},
        }
    )
    losses = config.collections["losses"]
    assert [s for s in range(12) if losses.should_save(s, "TRAIN")] == list(range(12))
    assert [s for s in range(60) if losses.should_save(s, "EVAL")] == [0, 10, 20, 30, 40]
    assert config.save_config.for_mode("EVAL") == SaveConfig(save_interval=10, end_step=50)
    again = HookConfig.from_dict(config.to_dict())
    assert again == config
