"""Keys of a config file as hyperparameters (FILE:dotted.key): named, refused and edited."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from remedy.state_schema import RunSpec
from remedy.state_schema.config_keys import (
    ConfigKeyError,
    config_edits,
    get_key,
    leaves,
    load_config,
    names_file,
    set_key,
    split_config_key,
    with_copy,
)

LR = "configs/train.yaml:optimizer.lr"


def yaml_spec(**fields: object) -> RunSpec:
    base: dict[str, object] = {
        "entry_point": "train.py",
        "arguments": ["--config", "configs/train.yaml"],
        "hyperparameters": {LR: 30, "seed": 1},
        "hyperparameter_roles": {"learning_rate": LR},
    }
    return RunSpec.model_validate(base | fields)


def test_a_config_key_plays_a_role_and_is_never_a_flag() -> None:
    spec = yaml_spec()
    assert spec.role("learning_rate") == 30
    assert spec.role_label("learning_rate") == LR  # shown as named, not as --configs/...
    assert spec.job_arguments() == ["--config", "configs/train.yaml", "--seed", "1"]
    assert spec.job_hyperparameters() == {"seed": 1}  # SM_HPS holds flags only
    assert spec.config_edits() == {"configs/train.yaml": {"optimizer.lr": 30}}
    # the output_dir role may be a key too: it gets the attempt's folder
    out = yaml_spec(hyperparameter_roles={"learning_rate": LR, "output_dir": "c.json:out"},
                    arguments=["--config", "configs/train.yaml", "--paths=c.json"])  # fmt: skip
    assert out.config_edits(output_dir="/job/model") == {
        "configs/train.yaml": {"optimizer.lr": 30},
        "c.json": {"out": "/job/model"},
    }


def test_a_key_of_a_file_the_command_line_never_names_is_refused_naming_it() -> None:
    with pytest.raises(ValidationError) as caught:
        yaml_spec(arguments=[])
    text = str(caught.value)
    assert f"hyperparameters.`{LR}`" in text
    assert "the job is never told of configs/train.yaml" in text
    # a flag's value names it as well as an argument does; ./ and = forms too
    assert yaml_spec(arguments=[], hyperparameters={LR: 3, "config": "./configs/train.yaml"})
    assert yaml_spec(arguments=["--config=configs/train.yaml"])
    with pytest.raises(ValidationError, match="a key of a config file is no flag"):
        yaml_spec(hyperparameters={LR: 3, "c.yaml:amp": True}, bare_flags=["c.yaml:amp"],
                  arguments=["configs/train.yaml", "c.yaml"])  # fmt: skip


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("cfg.toml:optimizer.lr", "or a config file's key, FILE:dotted.key"),
        ("cfg.yaml:optimizer..lr", "has an empty part between its dots"),
    ],
)
def test_a_malformed_config_key_is_refused_saying_its_form(name: str, why: str) -> None:
    with pytest.raises(ValidationError, match=why.replace(".", r"\.")):
        RunSpec(entry_point="train.py", arguments=["cfg.yaml"], hyperparameters={name: 1})


def test_edits_are_grouped_by_file_and_keys_walk_mappings_and_lists() -> None:
    values = {"a.yaml:x.y": 1, "lr": 2, "a.yaml:z": 3, "b.json:k": 4}
    assert config_edits(values) == {"a.yaml": {"x.y": 1, "z": 3}, "b.json": {"k": 4}}
    assert split_config_key("sub/dir/a.yml:layers.0.width") == ("sub/dir/a.yml", "layers.0.width")
    tree = {"model": {"layers": [{"width": 8}, {"width": 16}]}, "lr": 0.1}
    assert get_key(tree, "model.layers.1.width") == 16
    set_key(tree, "model.layers.1.width", 32)
    set_key(tree, "lr", 0.01)
    assert tree == {"model": {"layers": [{"width": 8}, {"width": 32}]}, "lr": 0.01}
    assert leaves(tree) == [("model.layers.0.width", 8), ("model.layers.1.width", 32), ("lr", 0.01)]
    with pytest.raises(ConfigKeyError, match=r"no key 'lrr' at its top \(keys there: model, lr\)"):
        set_key(tree, "lrr", 1)  # a key the file lacks is never added: a typo would be silent
    with pytest.raises(ConfigKeyError, match="model.layers is a list of 2: '2' is none"):
        get_key(tree, "model.layers.2.width")
    with pytest.raises(ConfigKeyError, match=r"lr is a value \(0.01\), not a mapping or list"):
        get_key(tree, "lr.decay")


def test_the_command_line_forms_that_name_a_file_get_its_copy() -> None:
    assert names_file("./cfg.yaml", "cfg.yaml") and names_file("--config=cfg.yaml", "cfg.yaml")
    assert names_file("config=sub/../cfg.yaml", "cfg.yaml")
    assert not names_file("other.yaml", "cfg.yaml") and not names_file("--config", "cfg.yaml")
    assert with_copy("--config=./cfg.yaml", "cfg.yaml", "/job/config/cfg.yaml") == (
        "--config=/job/config/cfg.yaml"
    )
    assert with_copy("cfg.yaml", "cfg.yaml", "/c") == "/c"
    assert with_copy("--lr", "cfg.yaml", "/c") == "--lr"


def test_a_file_that_cannot_be_read_is_named_with_why(tmp_path: Path) -> None:
    with pytest.raises(ConfigKeyError, match="No such file"):
        load_config(tmp_path / "missing.yaml")
    (tmp_path / "bad.json").write_text("{lr: 1}")
    with pytest.raises(ConfigKeyError, match="bad.json: not valid JSON"):
        load_config(tmp_path / "bad.json")
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    with pytest.raises(ConfigKeyError, match="holds no mapping of settings at its top"):
        load_config(tmp_path / "list.yaml")
