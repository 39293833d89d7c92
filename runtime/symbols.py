"""``SymbolInfo``: a declared dim symbol (range, optimization point, divisibility).

Defined here, outside the compiler layers, so that the runtime (and a model
loaded from an artifact, :mod:`kiln.runtime.artifact`) needs no MLIR;
:mod:`kiln.module` reads symbols out of the IR into it.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SymbolInfo"]


@dataclass(frozen=True)
class SymbolInfo:
    """A declared dim symbol: its range, optimization point and divisibility."""

    name: str
    min: int
    max: int
    opt: int | None = None
    multiple_of: int | None = None

    def contains(self, value: int) -> bool:
        """True when ``value`` lies in the symbol's range (and divisibility)."""
        if not self.min <= value <= self.max:
            return False
        return self.multiple_of is None or value % self.multiple_of == 0

    def range_text(self) -> str:
        """``1 <= B <= 64``."""
        return f"{self.min} <= {self.name} <= {self.max}"
