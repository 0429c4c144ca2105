"""What the hook saves and when: SaveConfig, per-collection overrides, the JSON config file.

JSON config file (the job backend writes it; the hook reads it via REMEDY_DEBUGGER_CONFIG):

    {"out_dir": "/path/store",
     "save_config": {"save_interval": 100},
     "collections": {"losses": {"save_interval": 1}, "gradients": {}, "weights": null}}

Only the collections listed are saved (default: losses only). A collection's settings are
merged over the top-level save_config field by field; `{}` or `null` means "the top-level one".
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CONFIG_ENV_VAR = "REMEDY_DEBUGGER_CONFIG"
DEFAULT_SAVE_INTERVAL = 100  # the documented default of the debugger we replace
DEFAULT_COLLECTIONS: tuple[str, ...] = ("losses",)


class ConfigError(ValueError):
    """A config value is invalid; the message starts with the key path, e.g. `save_config.x`."""


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

    def should_save(self, step: int) -> bool:
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
        }

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
        try:
            return cls(**merged)
        except ConfigError as exc:
            raise ConfigError(f"{key}.{exc}") from None


@dataclass(frozen=True)
class HookConfig:
    """Everything the hook needs: where to write and which collections to save when."""

    out_dir: str
    save_config: SaveConfig = field(default_factory=SaveConfig)
    collections: Mapping[str, SaveConfig] = field(default_factory=dict)

    @classmethod
    def build(
        cls,
        out_dir: str | os.PathLike[str],
        save_config: SaveConfig | None = None,
        collections: Mapping[str, SaveConfig | None] | Iterable[str] | None = None,
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
        return cls(out_dir=os.fspath(out_dir), save_config=base, collections=resolved)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> HookConfig:
        if not isinstance(data, Mapping):
            raise ConfigError(f"config: must be a JSON object, got {type(data).__name__}")
        known = {"out_dir", "save_config", "collections"}
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
        for name, overrides in raw.items():
            if not isinstance(name, str) or not name:
                raise ConfigError(f"collections: names must be non-empty strings, got {name!r}")
            collections[name] = SaveConfig.from_dict(
                overrides or {}, base=base, key=f"collections.{name}"
            )
        return cls(out_dir=out_dir, save_config=base, collections=collections)

    @classmethod
    def from_json_file(cls, path: str | os.PathLike[str]) -> HookConfig:
        try:
            data = json.loads(Path(path).read_text())
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{os.fspath(path)}: not valid JSON: {exc}") from None
        return cls.from_dict(data)

    def to_dict(self) -> dict[str, Any]:
        return {
            "out_dir": self.out_dir,
            "save_config": self.save_config.to_dict(),
            "collections": {name: cfg.to_dict() for name, cfg in self.collections.items()},
        }


def _check_int(key: str, value: object, *, minimum: int) -> None:
    # bool is an int subclass; `"save_interval": true` is a mistake, not 1.
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{key}: must be an integer, got {value!r}")
    if value < minimum:
        raise ConfigError(f"{key}: must be >= {minimum}, got {value}")
