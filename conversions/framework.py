"""Safe wrappers over the bindings' Dialect Conversion API.

Two crashers of the raw bindings (../shared/MLIR_NOTES.md, sharp edges 1 and
2) cannot be reached through these wrappers:

- :class:`KilnTypeConverter` owns every conversion callback it registers, so
  the callbacks live exactly as long as the converter (a raw
  ``TypeConverter.add_conversion(lambda ...)`` lets Python collect the lambda
  and later calls freed memory);
- :func:`conversion_target` takes dialect *classes* or names, and turns a name
  into the dialect class before it reaches ``add_(il)legal_dialect`` (a string
  there segfaulted in ``apply_partial_conversion``).

:class:`PatternTable` is the "table of small lower_<op> functions" of
STYLE.md: each function returns ``None`` on success or raises
:class:`NoMatch`; the bindings' inverted convention (a truthy return means
*failure*) is handled here once.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable

from .._mlir import ir, rewrite
from ..errors import ConversionError, KilnError

__all__ = ["KilnTypeConverter", "NoMatch", "PatternTable", "conversion_target", "dialect_class"]


class NoMatch(Exception):
    """Raised by a pattern function to say "this pattern does not apply"."""


class KilnTypeConverter:
    """A ``TypeConverter`` that keeps its Python callbacks alive.

    ``add(fn)`` registers ``fn(type) -> type | None``; the wrapper holds a
    strong reference to ``fn`` (and to the wrapped callable handed to MLIR)
    for the converter's lifetime.
    """

    def __init__(self):
        self.converter = rewrite.TypeConverter()
        self._callbacks: list[Callable] = []

    def add(self, fn: Callable) -> KilnTypeConverter:
        """Register a conversion; later registrations take precedence (MLIR's rule)."""

        def safe(t, _fn=fn):
            try:
                return _fn(t)
            except Exception:  # an exception must not cross into C++
                return None

        self._callbacks.append(fn)
        self._callbacks.append(safe)
        self.converter.add_conversion(safe)
        return self

    def convert(self, t: ir.Type) -> ir.Type | None:
        """The converted type, or None when no conversion applies."""
        return self.converter.convert_type(t)


def dialect_class(dialect):
    """The dialect class for a class or a name (``"kiln"``, ``"linalg"``)."""
    if not isinstance(dialect, str):
        return dialect
    if dialect == "kiln":
        from ..dialects.kiln import Kiln

        return Kiln
    try:
        module = importlib.import_module(f"torch_mlir.dialects.{dialect}")
    except ImportError:
        raise ConversionError(f"unknown dialect '{dialect}'") from None
    # Each generated dialect module exposes its dialect class as `_Dialect`.
    gen = getattr(module, "_Dialect", None)
    if isinstance(gen, type):
        return gen
    raise ConversionError(f"no dialect class found for '{dialect}'")


def conversion_target(legal: Iterable = (), illegal: Iterable = (), legal_ops: Iterable = (), illegal_ops: Iterable = ()):
    """A ``ConversionTarget`` built from dialect classes or names, and op classes."""
    target = rewrite.ConversionTarget()
    legal_d = [dialect_class(d) for d in legal]
    illegal_d = [dialect_class(d) for d in illegal]
    if legal_d:
        target.add_legal_dialect(*legal_d)
    if illegal_d:
        target.add_illegal_dialect(*illegal_d)
    for op in legal_ops:
        target.add_legal_op(op)
    for op in illegal_ops:
        target.add_illegal_op(op)
    return target


class PatternTable:
    """Conversion patterns as a table: ``{op class: fn(op, adaptor, converter, rewriter)}``.

    A function returns normally when it rewrote the op and raises NoMatch
    when it does not apply; any other exception is recorded (with the op's
    location) and the op is left for the conversion to report as illegal.
    """

    def __init__(self):
        self.entries: list[tuple[object, Callable]] = []
        self.errors: list[KilnError] = []
        self._keep: list[Callable] = []

    def add(self, root, fn: Callable) -> None:
        self.entries.append((root, fn))

    def populate(self, patterns: rewrite.RewritePatternSet, converter: KilnTypeConverter) -> None:
        """Add every entry to ``patterns`` with the bindings' calling convention."""
        for root, fn in self.entries:

            def wrapped(op, adaptor, tc, rewriter, _fn=fn):
                try:
                    _fn(op, adaptor, converter, rewriter)
                except NoMatch:
                    return True  # the bindings' "failure to match"
                except KilnError as e:
                    self.errors.append(e)
                    return True
                except Exception as e:  # a bug in a lowering: report, don't crash
                    self.errors.append(ConversionError(f"lowering of '{op.operation.name}' failed: {type(e).__name__}: {e}"))
                    return True
                return False

            self._keep.append(wrapped)
            patterns.add_conversion(root, wrapped, converter.converter)
