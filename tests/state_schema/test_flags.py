"""How a script's hyperparameters become its command line (and SM_HP_<NAME> values)."""

from __future__ import annotations

import argparse
import ast
import importlib.util
from pathlib import Path

import pytest

from remedy.state_schema.flags import (
    check_hyperparameters,
    command_line,
    environment_value,
    flag_arguments,
)

HYDRA_SCRIPT = Path(__file__).parents[1] / "examples" / "scripts" / "hydra_style" / "train.py"
_spec = importlib.util.spec_from_file_location("hydra_style_train", HYDRA_SCRIPT)
assert _spec is not None and _spec.loader is not None
hydra_style = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(hydra_style)


VALUES = {"lr": 20, "clip": 0.25, "tied": True, "dry-run": False, "save": None}
VALUES |= {"sizes": [2, 3], "none": [], "name": "wiki text", "x": 1e-05}


def test_the_documented_rendering_of_each_style() -> None:
    assert flag_arguments(VALUES) == [
        "--lr", "20", "--clip", "0.25", "--tied", "True", "--dry-run", "False",
        "--sizes", "2", "3", "--name", "wiki text", "-x", "1e-05",
    ]  # fmt: skip
    assert flag_arguments(VALUES, "--name=value") == [
        "--lr=20", "--clip=0.25", "--tied=True", "--dry-run=False", "--sizes=[2, 3]",
        "--none=[]", "--name=wiki text", "--x=1e-05",
    ]  # fmt: skip
    assert flag_arguments(VALUES, "name=value") == [
        "lr=20", "clip=0.25", "tied=true", "dry-run=false", "sizes=[2, 3]", "none=[]",
        "name='wiki text'", "x=1e-05",
    ]  # fmt: skip


def test_bare_flags_are_there_or_not_and_arguments_come_first() -> None:
    values = {"lr": 1, "tied": True, "cuda": False}
    assert command_line(values, arguments=["cfg.py"], bare_flags=["tied", "cuda"]) == [
        "cfg.py", "--lr", "1", "--tied"
    ]  # fmt: skip


def test_a_classic_argparse_script_reads_back_what_was_given() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=1.0)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--tied", action="store_true")
    parser.add_argument("--cuda", action="store_true")
    parser.add_argument("--compile", type=lambda text: text == "True", default=True)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1])
    parser.add_argument("--data", default="./data")
    parser.add_argument("--save", default="model.pt")
    parser.add_argument("-b", type=int, default=8)
    given = {"lr": 0.1 + 0.2, "epochs": 2, "tied": True, "cuda": False, "sizes": [2, 3]}
    given |= {"data": "-weird path", "save": None, "b": 4, "compile": False}
    args = parser.parse_args(flag_arguments(given, bare_flags=["tied", "cuda"]))
    assert args.lr == 0.1 + 0.2  # repr round-trips every float exactly
    assert (args.epochs, args.tied, args.cuda, args.sizes) == (2, True, False, [2, 3])
    assert (args.data, args.save, args.b) == ("-weird path", "model.pt", 4)
    assert args.compile is False  # false is said, not left to the script's default True


def test_key_value_overrides_read_back_as_python_literals() -> None:
    given = {"lr": 0.1 + 0.2, "compile": False, "sizes": [2, "a b"], "out": "o/x"}
    read = {}
    for argument in flag_arguments(given, "--name=value"):
        key, value = argument.removeprefix("--").split("=", 1)
        try:
            read[key] = ast.literal_eval(value)
        except (SyntaxError, ValueError):
            read[key] = value
    assert read == given


def test_hydra_overrides_read_back_through_the_example_parser() -> None:
    config = {"trainer": {"max_epochs": 3, "name": "x"}, "optim": {"lr": 0.1, "fused": True}}
    given = {"trainer.max_epochs": 2, "optim.lr": 1e-05, "optim.fused": False}
    given |= {"trainer.name": "it's a b", "+trainer.tags": ["a", "b c", "true", "10"]}
    given |= {"++extra": None}
    for argument in flag_arguments(given, "name=value"):
        hydra_style.apply_override(config, argument)
    assert config == {
        "trainer": {"max_epochs": 2, "name": "it's a b", "tags": ["a", "b c", "true", "10"]},
        "optim": {"lr": 1e-05, "fused": False},
    }


def test_text_passes_unchanged_so_a_script_can_parse_true_itself() -> None:
    assert flag_arguments({"flag": "True", "lr": "0.10"}) == ["--flag", "True", "--lr", "0.10"]


def test_environment_values_as_the_toolkit_writes_them() -> None:
    assert environment_value("wiki") == "wiki"
    assert environment_value(None) == ""
    assert environment_value(0.25) == "0.25"
    assert environment_value(True) == "true"
    assert environment_value([2, "a"]) == '[2,"a"]'


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"--lr": 1}, "without dashes: 'lr'"),
        ({"lr=": 1}, "without '=' .*hyperparameter_style"),
        ({"two words": 1}, "flag name"),
        ({"": 1}, "flag name"),
        ({"x": {"a": 1}}, 'x: .* got {"a": 1}'),
        ({"x": float("nan")}, "x: .*finite"),
        ({"x": [True]}, "x: "),
        ({"x": [[1]]}, "x: "),
    ],
)
def test_bad_names_and_values_are_named(values: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_hyperparameters(values)
