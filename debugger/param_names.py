"""Names of a job's parameters, learnt from the modules it calls (for the zero-code capture).

A parameter object does not know its name; the module that holds it does. The zero-code
capture shows this registry every module that is called (`saw`), and the registry names a
parameter by its path in the outermost module holding it, exactly as the explicit Hook's
`register_module(model)` does ("fc.weight", "layer1.0.conv1.weight", ...), so tensor names
are "gradient/<that path>" either way.

Outermost modules ("roots") are found when a name is needed, not at each call: a root is a
module seen that is no submodule of another module seen. A root that wraps the model
(torch.compile's OptimizedModule, DataParallel, DistributedDataParallel) is unwrapped, so a
compiled or wrapped model keeps the names of the plain one. When two roots hold parameters
of the same path (two models called side by side), the later root's names are prefixed with
"model<N>." (N = its order among the roots). A parameter of no module seen keeps the
explicit Hook's fallback, "param_<its index in the optimizer>".

Nothing is attached to the modules: the registry holds them weakly and names parameters
by id() (checked against a weak reference, so a reused id never inherits a name).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

_WRAPPER_TYPES = ("OptimizedModule", "DataParallel", "DistributedDataParallel")


def unwrap(module: torch.nn.Module) -> torch.nn.Module:
    """The model inside torch.compile's / (Distributed)DataParallel's wrapper."""
    while type(module).__name__ in _WRAPPER_TYPES:
        inner = getattr(module, "_orig_mod", None)
        if inner is None:
            inner = getattr(module, "module", None)
        if inner is None:  # a module of that name that wraps nothing
            break
        module = inner
    return module


class ParameterNames:
    """Modules seen (weakly), and the names of their parameters once asked for."""

    def __init__(self) -> None:
        self._seen: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
        # id -> weak reference of the modules seen: saw() runs at every module call, and a
        # dict lookup by id is several times cheaper than a WeakKeyDictionary's (which makes
        # a weak reference per lookup); the reference tells a reused id from the module.
        self._known: dict[int, weakref.ref[Any]] = {}
        self._order = 0
        self._stale = False  # a module was seen since the names were last resolved
        self._names: dict[int, tuple[weakref.ref[Any], str]] = {}
        self._roots: list[weakref.ref[Any]] = []

    def saw(self, module: torch.nn.Module) -> None:
        """Called for every module call: cheap when the module is known or holds nothing."""
        known = self._known.get(id(module))
        if known is not None and known() is module:
            return
        # A fresh loss module without parameters or children names nothing: not kept.
        if not (module._parameters or module._modules):
            return
        self._known[id(module)] = weakref.ref(module)
        if len(self._known) > 2 * len(self._seen) + 64:  # drop entries of modules gone
            self._known = {k: r for k, r in self._known.items() if r() is not None}
        self._seen[module] = self._order
        self._order += 1
        self._stale = True

    def name(self, param: torch.Tensor, index: int) -> str:
        """The parameter's path in its root module, else "param_<index>"."""
        found = self._lookup(param)
        if found is None and self._stale:
            self._resolve()
            found = self._lookup(param)
        return found if found is not None else f"param_{index}"

    @property
    def modules_seen(self) -> int:
        """How many modules have been kept so far (it grows when a new one is seen)."""
        return self._order

    def saw_compiled(self) -> bool:
        """A torch.compile'd module (its OptimizedModule wrapper) was called."""
        return any(type(m).__name__ == "OptimizedModule" for m in list(self._seen.keys()))

    def all_named(self, params: Iterable[torch.Tensor]) -> bool:
        """Every one of `params` has a name from a module seen (no fallback)."""
        if self._stale:
            self._resolve()
        return all(self._lookup(p) is not None for p in params)

    def named(self, params: Iterable[torch.Tensor]) -> list[tuple[str, torch.Tensor]]:
        return [(self.name(p, i), p) for i, p in enumerate(params)]

    def trainable(self) -> list[tuple[str, torch.Tensor]]:
        """(name, parameter) of every root's parameters that require a gradient."""
        if self._stale:
            self._resolve()
        out = []
        for ref in self._roots:
            root = ref()
            if root is None:
                continue
            for param in root.parameters():
                if param.requires_grad:
                    out.append((self._lookup(param) or "", param))
        return out

    def _lookup(self, param: torch.Tensor) -> str | None:
        entry = self._names.get(id(param))
        if entry is not None and entry[0]() is param:
            return entry[1]
        return None

    def _resolve(self) -> None:
        self._stale = False
        modules = sorted(self._seen.items(), key=lambda item: item[1])
        inside: set[int] = set()
        for module, _ in modules:
            for sub in module.modules():
                if sub is not module:
                    inside.add(id(sub))
        roots = [unwrap(m) for m, _ in modules if id(m) not in inside]
        unique: dict[int, Any] = {}
        for root in roots:
            unique.setdefault(id(root), root)
        self._roots = [weakref.ref(r) for r in unique.values()]
        taken = {entry[1] for entry in self._names.values() if entry[0]() is not None}
        for number, root in enumerate(unique.values()):
            for path, param in root.named_parameters():
                if self._lookup(param) is not None:
                    continue  # a name once given is kept
                name = path if path not in taken else f"model{number}.{path}"
                self._names[id(param)] = (weakref.ref(param), name)
                taken.add(name)
        # forget parameters that no longer exist
        self._names = {k: v for k, v in self._names.items() if v[0]() is not None}
