"""What a collection selects (beyond when it saves) and how tensors are reduced.

    CollectionSpec(module_types=["ReLU"], save_inputs=True)   # activations by module type
    CollectionSpec(include_regex=[r"layer1\\..*"])            # ...or by module path regex
    ReductionConfig(reductions=["mean"], norms=["l2"])        # save these instead of the tensor

Activation tensors are named `<module path>/<type>_<input|output>`, e.g. "1/relu_output" or
"layer1.0.act/elu_input" (the root module's path is "model"), so the documented default
regexes of the rules (".*relu_output", ".*relu_input") select them whatever the module names.
Reductions are stored beside the tensor as `<name>::<reduction>` (e.g. "gradient/fc.weight::
abs_mean"); the trial hides those keys and serves them through reduction_value().
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from remedy.debugger.exceptions import ConfigError

REDUCTIONS = ("min", "max", "mean", "std", "variance", "sum", "prod")
NORMS = ("l1", "l2")
REDUCTION_SEP = "::"

# Module types the built-in "activations" collection picks when none are named.
DEFAULT_ACTIVATION_TYPES = (
    "ReLU",
    "ReLU6",
    "LeakyReLU",
    "ELU",
    "SELU",
    "GELU",
    "Tanh",
    "Sigmoid",
)


def reduction_key(name: str, reduction: str, abs: bool = False) -> str:
    return f"{name}{REDUCTION_SEP}{'abs_' if abs else ''}{reduction}"


def split_key(key: str) -> tuple[str, str | None]:
    """("gradient/w::abs_mean") -> ("gradient/w", "abs_mean"); plain names -> (name, None)."""
    name, sep, reduction = key.rpartition(REDUCTION_SEP)
    return (name, reduction) if sep else (key, None)


@dataclass(frozen=True)
class ReductionConfig:
    """Reductions saved for each tensor of a collection; raw tensors only if save_raw_tensor."""

    reductions: tuple[str, ...] = ()
    abs_reductions: tuple[str, ...] = ()
    norms: tuple[str, ...] = ()
    abs_norms: tuple[str, ...] = ()
    save_raw_tensor: bool = False

    def __post_init__(self) -> None:
        for key, allowed in (
            ("reductions", REDUCTIONS),
            ("abs_reductions", REDUCTIONS),
            ("norms", NORMS),
            ("abs_norms", NORMS),
        ):
            value = getattr(self, key)
            if isinstance(value, str) or not isinstance(value, Iterable):
                raise ConfigError(f"{key}: must be a list drawn from {list(allowed)}")
            value = tuple(value)
            for item in value:
                if item not in allowed:
                    raise ConfigError(f"{key}: unknown {item!r}; expected one of {list(allowed)}")
            object.__setattr__(self, key, value)
        if not isinstance(self.save_raw_tensor, bool):
            raise ConfigError(f"save_raw_tensor: must be a boolean, got {self.save_raw_tensor!r}")

    def keys(self) -> list[tuple[str, bool]]:
        """(reduction, abs) pairs in storage order; norms are spelled "l1"/"l2"."""
        return (
            [(r, False) for r in self.reductions]
            + [(r, True) for r in self.abs_reductions]
            + [(n, False) for n in self.norms]
            + [(n, True) for n in self.abs_norms]
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "reductions": list(self.reductions),
            "abs_reductions": list(self.abs_reductions),
            "norms": list(self.norms),
            "abs_norms": list(self.abs_norms),
            "save_raw_tensor": self.save_raw_tensor,
        }

    @classmethod
    def from_dict(cls, data: Any, key: str = "reduction_config") -> ReductionConfig:
        if not isinstance(data, Mapping):
            raise ConfigError(f"{key}: must be an object, got {type(data).__name__}")
        known = set(cls.__dataclass_fields__)
        for name in data:
            if name not in known:
                raise ConfigError(f"{key}.{name}: unknown key; expected one of {sorted(known)}")
        try:
            return cls(**data)
        except ConfigError as exc:
            raise ConfigError(f"{key}.{exc}") from None


@dataclass(frozen=True)
class CollectionSpec:
    """Which module inputs/outputs a collection captures, and its reductions (if any).

    A module is selected when its type name is in `module_types` or its path matches one of
    `include_regex` (re.fullmatch). With neither, nothing is selected by module (the
    collection only holds what save_tensor puts in it), except for "activations", which
    defaults to DEFAULT_ACTIVATION_TYPES.
    """

    module_types: tuple[str, ...] = ()
    include_regex: tuple[str, ...] = ()
    save_inputs: bool = False
    save_outputs: bool = True
    reduction_config: ReductionConfig | None = None

    def __post_init__(self) -> None:
        import re

        for key in ("module_types", "include_regex"):
            value = getattr(self, key)
            if isinstance(value, str) or not isinstance(value, Iterable):
                raise ConfigError(f"{key}: must be a list of strings, got {value!r}")
            object.__setattr__(self, key, tuple(value))
        for pattern in self.include_regex:
            try:
                re.compile(pattern)
            except re.error as exc:
                message = f"include_regex: {pattern!r} is not a valid regex: {exc}"
                raise ConfigError(message) from None
        for key in ("save_inputs", "save_outputs"):
            if not isinstance(getattr(self, key), bool):
                raise ConfigError(f"{key}: must be a boolean")

    def selects_modules(self) -> bool:
        return bool(self.module_types or self.include_regex)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "module_types": list(self.module_types),
            "include_regex": list(self.include_regex),
            "save_inputs": self.save_inputs,
            "save_outputs": self.save_outputs,
        }
        if self.reduction_config is not None:
            out["reduction_config"] = self.reduction_config.to_dict()
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], key: str) -> CollectionSpec:
        fields = dict(data)
        reductions = fields.pop("reduction_config", None)
        try:
            return cls(
                **fields,
                reduction_config=None
                if reductions is None
                else ReductionConfig.from_dict(reductions, key=f"{key}.reduction_config"),
            )
        except ConfigError as exc:
            if str(exc).startswith(key):
                raise
            raise ConfigError(f"{key}.{exc}") from None


SPEC_KEYS = frozenset(
    {"module_types", "include_regex", "save_inputs", "save_outputs", "reduction_config"}
)
