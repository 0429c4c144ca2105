"""An entry point in the style of a Hydra application: a structured config composed from
defaults, then `key=value` overrides on the command line (dotted names reach into groups:
trainer.max_epochs=2, optim.lr=0.05; +key=value adds a key), with the override grammar's
values (true, false, null, numbers, [lists], 'quoted strings'). Like Hydra it refuses an
unknown key, a value of the wrong type and anything not in key=value form, and writes the
composed config into its run folder, hydra.run.dir. A blob classifier; nothing downloaded.

    python train.py trainer.max_epochs=2 optim.lr=0.05 model.compile=false
"""

import json
import os
import re
import sys
from typing import Any

import torch

DEFAULTS: dict[str, Any] = {
    "trainer": {"max_epochs": 3, "batch_size": 32, "seed": 0},
    "optim": {"lr": 0.05, "momentum": 0.9},
    "model": {"hidden": 32, "compile": True},
    "hydra": {"run": {"dir": "outputs"}},
}
OVERRIDE = re.compile(r"(?P<add>\+{0,2})(?P<key>[A-Za-z_][\w.\-]*)=(?P<value>.*)")
NUMBER = re.compile(r"[+-]?(\d+\.?\d*([eE][+-]?\d+)?|\.\d+([eE][+-]?\d+)?|inf|nan)")


def parse_value(text: str) -> Any:
    text = text.strip()
    if text in ("true", "false"):
        return text == "true"
    if text == "null":
        return None
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return re.sub(r"\\(.)", r"\1", text[1:-1])
    if text.startswith("[") and text.endswith("]"):
        inner = text[1:-1].strip()
        return [parse_value(item) for item in inner.split(",")] if inner else []
    if re.fullmatch(r"[+-]?\d+", text):
        return int(text)
    if NUMBER.fullmatch(text):
        return float(text)
    return text


def apply_override(config: dict[str, Any], argument: str) -> None:
    match = OVERRIDE.fullmatch(argument)
    if match is None:
        raise SystemExit(f"Error parsing override '{argument}': expected key=value")
    *groups, leaf = match["key"].split(".")
    node = config
    for group in groups:
        node = node.setdefault(group, {}) if match["add"] else node[group]
    value = parse_value(match["value"])
    if leaf not in node:
        if not match["add"]:
            raise SystemExit(
                f"Could not override '{match['key']}': key is not in the config "
                f"(to add it, use +{match['key']}={match['value']})"
            )
    elif node[leaf] is not None and value is not None:
        old = node[leaf]
        number = isinstance(old, float) and isinstance(value, int) and not isinstance(value, bool)
        if type(value) is not type(old) and not number:
            raise SystemExit(
                f"Could not override '{match['key']}': {value!r} is not a {type(old).__name__}"
            )
    node[leaf] = value


def main() -> None:
    config = json.loads(json.dumps(DEFAULTS))
    for argument in sys.argv[1:]:
        apply_override(config, argument)
    run_dir = config["hydra"]["run"]["dir"]
    os.makedirs(os.path.join(run_dir, ".hydra"), exist_ok=True)
    with open(os.path.join(run_dir, ".hydra", "config.json"), "w") as f:
        json.dump(config, f)

    trainer, optim, net = config["trainer"], config["optim"], config["model"]
    generator = torch.Generator().manual_seed(trainer["seed"])
    centres = 3 * torch.randn(4, 8, generator=generator)
    labels = torch.randint(0, 4, (1024,), generator=generator)
    points = centres[labels] + torch.randn(1024, 8, generator=generator)
    torch.manual_seed(trainer["seed"])
    model = torch.nn.Sequential(
        torch.nn.Linear(8, net["hidden"]), torch.nn.ReLU(), torch.nn.Linear(net["hidden"], 4)
    )
    if net["compile"]:
        model = torch.compile(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=optim["lr"], momentum=optim["momentum"])
    for epoch in range(trainer["max_epochs"]):
        order = torch.randperm(len(points))
        for start in range(0, len(points), trainer["batch_size"]):
            batch = order[start : start + trainer["batch_size"]]
            loss = torch.nn.functional.cross_entropy(model(points[batch]), labels[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch}: loss {loss.item():.4f}", flush=True)
    torch.save(model.state_dict(), os.path.join(run_dir, "model.pt"))


if __name__ == "__main__":
    main()
