"""What the hook saves and when: SaveConfig, per-collection overrides, the JSON config file.

JSON config file (the job backend writes it; the hook reads it via REMEDY_DEBUGGER_CONFIG):

    {"out_dir": "/path/store",
     "save_config": {"save_interval": 100, "modes": {"EVAL": {"save_interval": 10}}},
     "reduction_config": {"reductions": ["mean"], "save_raw_tensor": true},
     "collections": {"losses": {"save_interval": 1}, "gradients": {}, "weights": null,
                     "activations": {"module_types": ["ReLU"], "save_inputs": true,
                                     "reduction_config": {"norms": ["l2"]}}}}

Only the collections listed are saved (default: losses only). A collection's settings are
merged over the top-level save_config field by field; `{}` or `null` means "the top-level one".
A collection's selection keys (module_types, include_regex, save_inputs, save_outputs) and
its reduction_config are described in debugger/collections.py.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from remedy.debugger.collections import SPEC_KEYS, CollectionSpec, ReductionConfig
from remedy.debugger.exceptions import ConfigError  # also importable from here, as before

CONFIG_ENV_VAR = "REMEDY_DEBUGGER_CONFIG"
DEFAULT_SAVE_INTERVAL = 100  # the documented default of the debugger we replace
DEFAULT_COLLECTIONS: tuple[str, ...] = ("losses",)


@dataclass(frozen=True)
class SaveConfig:
    """Which steps to save.

    A step is saved when it is listed in `save_steps`, or when it lies in
    [start_step, end_step) and is a multiple of `save_interval`. Intervals count from step 0,
    not from start_step (as in smdebug), so interval 100 with start_step 50 saves 100, 200...
    """

    save_interval: int = DEFAULT_SAVE_INTERVAL
    start_step: int = 0
    end_step: int | None = None  # exclusive; None = no end
    save_steps: tuple[int, ...] = ()
    # Per-mode overrides, e.g. {"EVAL": SaveConfig(1)}; normalised to sorted pairs so the
    # dataclass stays hashable. A mode not listed uses the fields above.
    modes: Any = ()

    def __post_init__(self) -> None:
        _check_int("save_interval", self.save_interval, minimum=1)
        _check_int("start_step", self.start_step, minimum=0)
        if self.end_step is not None:
            _check_int("end_step", self.end_step, minimum=0)
            if self.end_step <= self.start_step:
                raise ConfigError(
                    f"end_step: must be greater than start_step ({self.start_step}), "
                    f"got {self.end_step}"
                )
        if isinstance(self.save_steps, (str, bytes)) or not isinstance(self.save_steps, Iterable):
            raise ConfigError(f"save_steps: must be a list of integers, got {self.save_steps!r}")
        steps = tuple(self.save_steps)
        for i, step in enumerate(steps):
            _check_int(f"save_steps[{i}]", step, minimum=0)
        # Normalise lists from callers to a sorted tuple so the dataclass stays hashable.
        object.__setattr__(self, "save_steps", tuple(sorted(set(steps))))
        object.__setattr__(self, "modes", _normalise_modes(self.modes))

    def for_mode(self, mode: str | None) -> SaveConfig:
        """The config that applies to `mode` (its override, else this one)."""
        if mode is not None:
            for name, config in self.modes:
                if name == str(mode):
                    return config
        return self

    def should_save(self, step: int, mode: str | None = None) -> bool:
        if mode is not None and self.modes:
            return self.for_mode(mode).should_save(step)
        if step in self.save_steps:
            return True
        if step < self.start_step:
            return False
        if self.end_step is not None and step >= self.end_step:
            return False
        return step % self.save_interval == 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "save_interval": self.save_interval,
            "start_step": self.start_step,
            "end_step": self.end_step,
            "save_steps": list(self.save_steps),
        } | ({"modes": {m: c.to_dict() for m, c in self.modes}} if self.modes else {})

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Any], *, base: SaveConfig | None = None, key: str = "save_config"
    ) -> SaveConfig:
        """Build from JSON, fields not given are taken from `base` (or the defaults)."""
        if not isinstance(data, Mapping):
            raise ConfigError(f"{key}: must be an object, got {type(data).__name__}")
        known = cls.__dataclass_fields__.keys()
        for name in data:
            if name not in known:
                raise ConfigError(f"{key}.{name}: unknown key; expected one of {sorted(known)}")
        merged = (base or cls()).to_dict() | dict(data)
        modes = merged.pop("modes", None) or {}
        if not isinstance(modes, Mapping):
            raise ConfigError(f"{key}.modes: must be an object, got {type(modes).__name__}")
        try:
            inner = cls(**merged)
        except ConfigError as exc:
            raise ConfigError(f"{key}.{exc}") from None
        if not modes:
            return inner
        resolved = {
            str(m).upper(): cls.from_dict(v or {}, base=inner, key=f"{key}.modes.{m}")
            for m, v in modes.items()
        }
        return cls(**merged, modes=resolved)


_MODE_NAMES = ("TRAIN", "EVAL", "PREDICT")


def _normalise_modes(modes: Any) -> tuple[tuple[str, SaveConfig], ...]:
    if not modes:
        return ()
    items = modes.items() if isinstance(modes, Mapping) else modes
    pairs = []
    for mode, config in items:
        name = str(getattr(mode, "value", mode)).upper()
        if name not in _MODE_NAMES:
            raise ConfigError(f"modes.{mode}: unknown mode; expected one of {list(_MODE_NAMES)}")
        if not isinstance(config, SaveConfig):
            raise ConfigError(f"modes.{name}: must be a SaveConfig, got {type(config).__name__}")
        pairs.append((name, config))
    return tuple(sorted(pairs))


@dataclass(frozen=True)
class HookConfig:
    """Everything the hook needs: where to write and which collections to save when.

    `specs` holds what a collection selects beyond its name (module types, regexes,
    per-collection reductions); `reduction_config` applies to every collection without one.
    """

    out_dir: str
    save_config: SaveConfig = field(default_factory=SaveConfig)
    collections: Mapping[str, SaveConfig] = field(default_factory=dict)
    specs: Mapping[str, CollectionSpec] = field(default_factory=dict)
    reduction_config: ReductionConfig | None = None
    tensorboard_dir: str | None = None  # also export scalars/histograms there

    @classmethod
    def build(
        cls,
        out_dir: str | os.PathLike[str],
        save_config: SaveConfig | None = None,
        collections: Mapping[str, SaveConfig | None] | Iterable[str] | None = None,
        specs: Mapping[str, CollectionSpec] | None = None,
        reduction_config: ReductionConfig | None = None,
        tensorboard_dir: str | os.PathLike[str] | None = None,
    ) -> HookConfig:
        """Resolve the Python-API form: collections as names or {name: SaveConfig | None}."""
        base = save_config or SaveConfig()
        if collections is None:
            collections = DEFAULT_COLLECTIONS
        if isinstance(collections, str):
            raise ConfigError("collections: must be a list of names or a mapping, not a string")
        if isinstance(collections, Mapping):
            items = list(collections.items())
        else:
            items = [(name, None) for name in collections]
        resolved: dict[str, SaveConfig] = {}
        for name, cfg in items:
            if not isinstance(name, str) or not name:
                raise ConfigError(f"collections: names must be non-empty strings, got {name!r}")
            if cfg is not None and not isinstance(cfg, SaveConfig):
                raise ConfigError(
                    f"collections.{name}: must be a SaveConfig or None, got {type(cfg).__name__}"
                )
            resolved[name] = cfg or base
        return cls(
            out_dir=os.fspath(out_dir),
            save_config=base,
            collections=resolved,
            specs=dict(specs or {}),
            reduction_config=reduction_config,
            tensorboard_dir=None if tensorboard_dir is None else os.fspath(tensorboard_dir),
        )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> HookConfig:
        if not isinstance(data, Mapping):
            raise ConfigError(f"config: must be a JSON object, got {type(data).__name__}")
        known = {"out_dir", "save_config", "collections", "reduction_config", "tensorboard_dir"}
        for key in data:
            if key not in known:
                raise ConfigError(f"{key}: unknown key; expected one of {sorted(known)}")
        out_dir = data.get("out_dir")
        if not isinstance(out_dir, str) or not out_dir:
            raise ConfigError(f"out_dir: required, must be a non-empty string, got {out_dir!r}")
        base = SaveConfig.from_dict(data.get("save_config") or {})
        raw = data.get("collections")
        if raw is None:
            raw = dict.fromkeys(DEFAULT_COLLECTIONS)
        elif isinstance(raw, list):
            raw = dict.fromkeys(raw)
        elif not isinstance(raw, Mapping):
            raise ConfigError(
                f"collections: must be an object or a list of names, got {type(raw).__name__}"
            )
        collections: dict[str, SaveConfig] = {}
        specs: dict[str, CollectionSpec] = {}
        for name, overrides in raw.items():
            if not isinstance(name, str) or not name:
                raise ConfigError(f"collections: names must be non-empty strings, got {name!r}")
            overrides = overrides or {}
            if not isinstance(overrides, Mapping):
                raise ConfigError(f"collections.{name}: must be an object or null")
            spec = {k: v for k, v in overrides.items() if k in SPEC_KEYS}
            collections[name] = SaveConfig.from_dict(
                {k: v for k, v in overrides.items() if k not in SPEC_KEYS},
                base=base,
                key=f"collections.{name}",
            )
            if spec:
                specs[name] = CollectionSpec.from_dict(spec, key=f"collections.{name}")
        reductions = data.get("reduction_config")
        tensorboard_dir = data.get("tensorboard_dir")
        if tensorboard_dir is not None and (
            not isinstance(tensorboard_dir, str) or not tensorboard_dir
        ):
            raise ConfigError(
                f"tensorboard_dir: must be a non-empty string, got {tensorboard_dir!r}"
            )
        return cls(
            tensorboard_dir=tensorboard_dir,
            out_dir=out_dir,
            save_config=base,
            collections=collections,
            specs=specs,
            reduction_config=None if reductions is None else ReductionConfig.from_dict(reductions),
        )

    @classmethod
    def from_json_file(cls, path: str | os.PathLike[str]) -> HookConfig:
        try:
            data = json.loads(Path(path).read_text())
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{os.fspath(path)}: not valid JSON: {exc}") from None
        return cls.from_dict(data)

    def to_dict(self) -> dict[str, Any]:
        out = {
            "out_dir": self.out_dir,
            "save_config": self.save_config.to_dict(),
            "collections": {
                name: cfg.to_dict() | (self.specs[name].to_dict() if name in self.specs else {})
                for name, cfg in self.collections.items()
            },
        }
        if self.reduction_config is not None:
            out["reduction_config"] = self.reduction_config.to_dict()
        if self.tensorboard_dir is not None:
            out["tensorboard_dir"] = self.tensorboard_dir
        return out


def _check_int(key: str, value: object, *, minimum: int) -> None:
    # bool is an int subclass; `"save_interval": true` is a mistake, not 1.
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{key}: must be an integer, got {value!r}")
    if value < minimum:
        raise ConfigError(f"{key}: must be >= {minimum}, got {value}")
