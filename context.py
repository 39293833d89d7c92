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
_search_prefix_added = False


def _add_dialect_search_prefix() -> None:
    """Let the bindings find ``kiln.dialects.kiln`` as the kiln dialect's module.

    Before building an OpView the bindings import ``<prefix>.<namespace>``
    for each dialect search prefix and remember only successes: with
    ``torch_mlir.dialects`` alone, every kiln OpView re-ran a failing
    ``import torch_mlir.dialects.kiln`` (~20 us each, 0.8 s of a warm
    ResNet-50 compile).  Must run with ``_lock`` held.
    """
    global _search_prefix_added
    if _search_prefix_added:
        return
    from . import dialects

    prefixes = ir._globals.dialect_search_modules
    if dialects.__name__ not in prefixes:
        ir._globals.append_dialect_search_prefix(dialects.__name__)
    _search_prefix_added = True


def make_context(*, torch: bool = False) -> ir.Context:
    """A new Context with the kiln dialect loaded (and torch's, if ``torch``).

    Use it as ``with make_context() as ctx, ir.Location.unknown(): ...``.
    """
    from .dialects.kiln import Kiln

    ctx = ir.Context()
    with ctx, _lock:
        # Loading registers Python type casters globally; serialize it.
        Kiln.load()
        _add_dialect_search_prefix()
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
