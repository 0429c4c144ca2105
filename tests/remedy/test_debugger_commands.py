"""remedy rules / trial / check over real stores written by the hook."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest

from remedy.cli import main
from tests.debugger import scenarios as sc


@pytest.fixture(scope="module")
def stalled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A classifier trained with lr 0, evaluated every 5 steps: nothing learns."""
    store = tmp_path_factory.mktemp("stalled") / "store"
    sc.fit(
        store, sc.mlp([4, 8, 2]), sc.blobs(64), steps=12, lr=0.0, classify=True,
        eval_data=sc.blobs(64, seed=1), eval_every=5,
    )  # fmt: skip
    return store


def test_rules_lists_every_rule_with_parameters_and_defaults(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["rules"]) == 0
    out = capsys.readouterr().out
    assert "DeadRelu: " in out
    assert "    threshold_layer: float = 50.0" in out
    assert "    other_trials: list[str] (required)" in out
    assert main(["rules", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["VanishingGradient"]["parameters"]["threshold"] == {
        "type": "float",
        "default": 1e-7,
    }
    assert len(data) >= 21


def test_trial_summarises_a_store(stalled: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["trial", str(stalled)]) == 0
    out = capsys.readouterr().out
    assert "ended, 14 steps in all" in out
    assert "TRAIN        12 steps  (0..11)" in out
    assert "EVAL          2 steps  (0..1)" in out
    assert "gradient/0.weight  [TRAIN 12]" in out
    assert "loss  [TRAIN 12, EVAL 2]" in out
    assert main(["trial", str(stalled), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["modes"]["TRAIN"] == {"steps": 12, "first": 0, "last": 11}
    assert "1/relu_input" in data["collections"]["activations"]


def test_check_reports_issues_and_exit_status(
    stalled: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        [
            "check", str(stalled), "--rule", "UnchangedTensor", "--rule", "ExplodingTensor",
            "--param", "UnchangedTensor.collection_names=[\"weights\"]",
            "--param", "UnchangedTensor.num_steps=4",
        ]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert code == 1
    assert "UnchangedTensor: IssuesFound at TRAIN step 3 (4 steps)" in out
    assert "ExplodingTensor: NoIssuesFound (14 steps)" in out


def test_check_quiet_store_exits_zero(
    stalled: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    assert main(["check", str(stalled), "--rule", "DeadRelu", "--param", "threshold_layer=99"]) == 0
    assert "DeadRelu: NoIssuesFound" in capsys.readouterr().out
    assert list(scratch.iterdir()) == []  # its statuses' folder is gone, not left behind


def test_check_with_a_custom_rule_file(
    stalled: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rule_file = tmp_path / "rules.py"
    rule_file.write_text(
        "from remedy.debugger import Rule\n\n"
        "class EvalSeen(Rule):\n"
        "    name = 'EvalSeen'\n\n"
        "    def invoke_at_step(self, step, mode):\n"
        "        return mode.value == 'EVAL' and self.fire(step, mode, None, 'eval ran')\n"
    )
    args = ["check", str(stalled), "--rule", "EvalSeen", "--rule", "AllZero"]
    args += ["--rule-file", str(rule_file), "--param", "AllZero.tensor_regex=loss"]
    assert main(args) == 1
    out = capsys.readouterr().out
    assert "EvalSeen: IssuesFound at EVAL step 0" in out
    assert "AllZero: NoIssuesFound" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["check", "{store}", "--rule", "Nope"], "unknown rule 'Nope'"),
        (["check", "{store}", "--rule", "DeadRelu", "--param", "x"], "expected KEY=VALUE"),
        (["check", "{store}", "--rule", "DeadRelu", "--param", "bogus=1"], "unknown parameter"),
        (["check", "{store}", "--rule", "DeadRelu", "--param", "Other.k=1"], "not one of"),
        (["trial", "/no/such/store"], "no such store folder"),
        (["check", "{store}", "--rule", "X", "--rule-file", "/no/file.py"], "does not exist"),
        (["check", "{store}"], "name the rules"),
        (["check", "{store}", "--rules-json", "/no/RULES.json"], "no such file"),
    ],
)
def test_bad_input_is_a_usage_error(
    stalled: Path, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([a.replace("{store}", str(stalled)) for a in argv]) == 2
    assert message in capsys.readouterr().err


def test_check_reads_a_rules_json_with_presets(
    stalled: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rules = tmp_path / "RULES.json"
    rules.write_text(json.dumps([{"preset": "recommended"}]))
    assert main(["check", str(stalled), "--rules-json", str(rules)]) == 1
    out = capsys.readouterr().out
    # Every rule of the preset, by its name; lr 0: the weights never move.
    for name in ("ExplodingTensor", "DivergingLoss", "LossSpike", "TinyUpdates", "DyingRelu"):
        assert f"{name}: " in out
    assert "TinyUpdates: IssuesFound at TRAIN step 2" in out
    rules.write_text(json.dumps([{"preset": "recomended"}]))
    assert main(["check", str(stalled), "--rules-json", str(rules)]) == 2
    assert "did you mean 'recommended'?" in capsys.readouterr().err
