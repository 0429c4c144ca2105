"""How a script's hyperparameters become its command line (and SM_HP_<NAME> values)."""

from __future__ import annotations

import argparse

import pytest
from remedy.state_schema.flags import check_hyperparameters, environment_value, flag_arguments


def test_the_documented_rendering() -> None:
    values = {"lr": 20, "clip": 0.25, "tied": True, "dry-run": False, "save": None}
    values |= {"sizes": [2, 3], "none": [], "name": "wiki text", "x": 1e-05}
    assert flag_arguments(values) == [
        "--lr", "20", "--clip", "0.25", "--tied", "--sizes", "2", "3",
        "--name", "wiki text", "-x", "1e-05",
    ]  # fmt: skip


def test_a_classic_argparse_script_reads_back_what_was_given() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=1.0)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--tied", action="store_true")
    parser.add_argument("--cuda", action="store_true")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1])
    parser.add_argument("--data", default="./data")
    parser.add_argument("--save", default="model.pt")
    parser.add_argument("-b", type=int, default=8)
    given = {"lr": 0.1 + 0.2, "epochs": 2, "tied": True, "cuda": False, "sizes": [2, 3]}
    given |= {"data": "-weird path", "save": None, "b": 4}
    args = parser.parse_args(flag_arguments(given))
    assert args.lr == 0.1 + 0.2  # repr round-trips every float exactly
    assert (args.epochs, args.tied, args.cuda, args.sizes) == (2, True, False, [2, 3])
    assert (args.data, args.save, args.b) == ("-weird path", "model.pt", 4)


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
