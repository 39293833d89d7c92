"""Contexts and diagnostics: the one function that creates MLIR contexts.

Every kiln compilation owns one :class:`ir.Context` made by
:func:`make_context`, which loads the kiln dialect (and the torch dialect,
when asked) exactly once per context.  Mixing objects of two contexts crashes
the bindings, so nothing in kiln creates a context any other way.
"""

from __future__ import annotations

import contextlib
import threading

from ._mlir import ir
from .errors import Diagnostic, diagnostic_from_mlir

__all__ = ["DiagnosticCollector", "collect_diagnostics", "make_context"]

_lock = threading.Lock()


def make_context(*, torch: bool = False) -> ir.Context:
    """A new Context with the kiln dialect loaded (and torch's, if ``torch``).

    Use it as ``with make_context() as ctx, ir.Location.unknown(): ...``.
    """
    from .dialects.kiln import Kiln

    ctx = ir.Context()
    with ctx, _lock:
        # Loading registers Python type casters globally; serialize it.
        Kiln.load()
        if torch:
            from torch_mlir.dialects import torch as torch_dialect

            torch_dialect.register_dialect(ctx)
    return ctx


class DiagnosticCollector:
    """Collects the diagnostics MLIR emits while it is attached.

    Used as a context manager around parsing, verification and passes; the
    collected :class:`~kiln.errors.Diagnostic` records are in ``.diagnostics``.
    """

    def __init__(self, ctx: ir.Context):
        self.ctx = ctx
        self.diagnostics: list[Diagnostic] = []
        self._handler = None

    def _on_diagnostic(self, diag) -> bool:
        try:
            self.diagnostics.append(diagnostic_from_mlir(diag))
        except Exception:  # never let a Python error escape into MLIR
            pass
        return True  # handled: MLIR must not also print it to stderr

    def __enter__(self) -> DiagnosticCollector:
        self._handler = self.ctx.attach_diagnostic_handler(self._on_diagnostic)
        return self

    def __exit__(self, *exc) -> None:
        if self._handler is not None:
            self._handler.detach()
            self._handler = None

    @property
    def errors(self) -> list[Diagnostic]:
        """The error-severity diagnostics collected so far."""
        return [d for d in self.diagnostics if d.severity == "error"]


@contextlib.contextmanager
def collect_diagnostics(ctx: ir.Context | None = None):
    """``with collect_diagnostics() as diags:`` around MLIR calls."""
    collector = DiagnosticCollector(ctx or ir.Context.current)
    with collector:
        yield collector
