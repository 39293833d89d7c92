"""The pass registry: kiln's passes by name, with typed options.

A kiln pass is a small class with a ``name`` (the one string used for its
class, the registry, the ``kiln-opt`` flag and its lit test), a ``summary``,
typed ``options`` and a ``run(module)`` method.  Passes are registered
explicitly with :func:`register_pass`; :func:`load_passes` imports the
modules that define kiln's own (no discovery by file name).

Upstream MLIR passes (``canonicalize``, ``cse``, ...) are not registered here:
pipelines hand them to MLIR's own PassManager.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any, ClassVar

from ..errors import PipelineError

__all__ = ["Option", "Pass", "get_pass", "load_passes", "register_pass", "registered_passes"]


@dataclass(frozen=True)
class Option:
    """A typed pass option: ``max-bytes=1024``; ``type`` is int, float, bool, str or list."""

    name: str
    type: type
    default: Any
    help: str = ""

    def parse(self, text: str, pass_name: str):
        """Convert the option's text to its type; PipelineError if it can't."""
        try:
            if self.type is bool:
                if text.lower() in ("1", "true", "on", ""):
                    return True
                if text.lower() in ("0", "false", "off"):
                    return False
                raise ValueError(text)
            if self.type is list:
                return [t for t in text.split(",") if t]
            return self.type(text)
        except ValueError:
            raise PipelineError(
                f"option '{self.name}' of pass '{pass_name}' expects {self.type.__name__}, got '{text}'"
            ) from None

    def format(self, value) -> str:
        if self.type is bool:
            return "true" if value else "false"
        if self.type is list:
            return ",".join(map(str, value))
        return str(value)


class Pass:
    """Base class of kiln passes.

    Subclasses set ``name``, ``summary`` and ``options`` and implement
    :meth:`run`.  A pass reports user errors by emitting diagnostics at op
    locations (``loc.emit_error``) and then raising ``KilnError``, or by
    raising a ``KilnError`` with diagnostics.  Counters go in
    ``self.statistics`` (printed by ``--mlir-pass-statistics``).
    """

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    options: ClassVar[tuple[Option, ...]] = ()

    def __init__(self, **values):
        by_name = {o.name: o for o in self.options}
        self.values = {o.name: o.default for o in self.options}
        for key, value in values.items():
            key = key.replace("_", "-")
            if key not in by_name:
                known = ", ".join(by_name) or "none"
                raise PipelineError(f"pass '{self.name}' has no option '{key}' (options: {known})")
            opt = by_name[key]
            self.values[key] = opt.parse(value, self.name) if isinstance(value, str) and opt.type is not str else value
        self.statistics: dict[str, int] = {}
        self.diagnostics: list = []

    def warn(self, loc, message: str) -> None:
        """Report a warning at ``loc`` (the bindings can only emit errors)."""
        from ..errors import Diagnostic, location_fields

        self.diagnostics.append(Diagnostic("warning", str(loc), message, **location_fields(str(loc))))

    def option(self, name: str):
        """The value of option ``name``."""
        return self.values[name]

    def run(self, module) -> None:  # pragma: no cover - abstract
        """Transform ``module`` (the ``builtin.module`` operation) in place."""
        raise NotImplementedError

    def bump(self, statistic: str, by: int = 1) -> None:
        """Add ``by`` to a named counter."""
        self.statistics[statistic] = self.statistics.get(statistic, 0) + by

    def textual(self) -> str:
        """The pass as pipeline text: ``kiln-fold-constants{max-bytes=64}``."""
        changed = [
            f"{o.name}={o.format(self.values[o.name])}"
            for o in self.options
            if self.values[o.name] != o.default
        ]
        return f"{self.name}{{{' '.join(changed)}}}" if changed else self.name

    @classmethod
    def from_options_text(cls, text: str) -> Pass:
        """Build from ``"max-bytes=64 other=x"`` (the text inside ``{}``)."""
        values = {}
        for item in shlex.split(text or ""):
            key, sep, value = item.partition("=")
            values[key] = value if sep else "true"
        return cls(**values)


_REGISTRY: dict[str, type[Pass]] = {}


def register_pass(cls: type[Pass]) -> type[Pass]:
    """Class decorator: add a pass to the registry under ``cls.name``."""
    if not cls.name:
        raise ValueError(f"{cls.__name__} has no name")
    if cls.name in _REGISTRY and _REGISTRY[cls.name] is not cls:
        raise ValueError(f"pass '{cls.name}' is registered twice")
    _REGISTRY[cls.name] = cls
    return cls


# The packages whose PASS_MODULES list the modules that define kiln passes;
# importing those modules registers the passes.
_PASS_PACKAGES = ("kiln.transforms", "kiln.conversions", "kiln.backends")

_loaded = False


def load_passes() -> None:
    """Import every module that defines kiln passes (once)."""
    global _loaded
    if _loaded:
        return
    import importlib

    for package in _PASS_PACKAGES:
        for name in importlib.import_module(package).PASS_MODULES:
            importlib.import_module(name)
    _loaded = True


def registered_passes() -> dict[str, type[Pass]]:
    """Every kiln pass, by name."""
    load_passes()
    return dict(sorted(_REGISTRY.items()))


def get_pass(name: str) -> type[Pass] | None:
    """The kiln pass class called ``name``, or None."""
    load_passes()
    return _REGISTRY.get(name)
