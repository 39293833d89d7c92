"""Symbolic dimensions: parsing, canonical forms, equality and evaluation.

A dim of a ``!kiln.tensor`` is an ``int`` (static), a symbol name (``"B"``), an
expression over symbols (``"B*L"``, ``"L+1"``, ``"(H-3)/2+1"``), or ``"?"``
(not yet inferred).  In the expression language ``/`` is *floor* division, as
for array sizes; ``+ - *`` and parentheses mean what they say.

Expressions are held as sympy expressions over integer symbols, expanded, so
that equal dims have equal canonical forms: ``"L*B"`` and ``"B*L"`` both print
as ``"B*L"``, and ``"2*(L+1)"`` prints as ``"2*L+2"``.

A parsed dim is a :class:`Dim`; the module-level helpers accept anything
:func:`dim` accepts (int, str, sympy expression, Dim).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterable, Mapping

import sympy
from sympy.printing.precedence import PRECEDENCE
from sympy.printing.str import StrPrinter

from ..errors import DimError

__all__ = [
    "Dim",
    "FloorDiv",
    "SYMBOL_MAX",
    "UNKNOWN",
    "dim",
    "dims_equal",
    "evaluate",
    "format_dim",
    "symbol",
]


class FloorDiv(sympy.Function):
    """``floor(a / b)`` for integer ``a`` and a positive integer constant ``b``.

    Evaluates eagerly when it can: constants fold, ``x/1`` is ``x``, a
    numerator that is a multiple of ``b`` divides exactly, and nested floor
    divisions merge (``(x/2)/3`` is ``x/6``).
    """

    is_integer = True
    # Bind like a product, so the printer parenthesizes it inside one:
    # 64*((4*B+63)/64) must not print as 64*(4*B+63)/64.
    precedence = PRECEDENCE["Mul"]

    @classmethod
    def eval(cls, a, b):
        """Return the simplified value, or None to keep the call unevaluated."""
        if b.is_Integer and b <= 0:
            raise DimError(f"division of a dim by {b}: the divisor must be positive")
        if a.is_Integer and b.is_Integer:
            return sympy.Integer(int(a) // int(b))
        if b == 1:
            return a
        if b.is_Integer:
            quotient = checked_expand(a / b)
            terms = sympy.Add.make_args(quotient)
            if all(t.as_coeff_Mul()[0].is_Integer for t in terms):
                return quotient
            if isinstance(a, FloorDiv) and a.args[1].is_Integer:
                return FloorDiv(a.args[0], a.args[1] * b)
            # Whole multiples of b in the symbolic terms come out of the
            # division: (2*L+1)/2 is L (a stride-2 slice of a 2*L dim), so
            # that it compares equal to L.  The constant term stays inside,
            # keeping "(H-3)/2+1" as written.
            whole, rest = [], []
            for t in sympy.Add.make_args(a):
                c, m = t.as_coeff_Mul()
                if c.is_Integer and not m.is_Number and abs(c) >= b:
                    q = sympy.Integer(int(c) // int(b))
                    whole.append(q * m)
                    rest.append((c - q * b) * m)
                else:
                    rest.append(t)
            if whole:
                return sympy.Add(*whole) + FloorDiv(checked_expand(sympy.Add(*rest)), b)
        return None


class _DimPrinter(StrPrinter):
    """Prints the canonical text of a dim: no spaces, ``/`` for FloorDiv."""

    def _print_FloorDiv(self, expr):  # noqa: N802 (sympy printer protocol)
        num, den = expr.args
        num_text = self._print(num)
        if not (num.is_Symbol or num.is_Integer or isinstance(num, FloorDiv)):
            num_text = f"({num_text})"
        den_text = self._print(den)
        if not (den.is_Symbol or den.is_Integer):
            den_text = f"({den_text})"
        return f"{num_text}/{den_text}"

    def _print_Pow(self, expr):  # noqa: N802 (sympy printer protocol)
        # The dim language has no '**': a power of a dim is a product.
        base, exp = expr.args
        if exp.is_Integer and exp > 0:
            return "*".join([self.parenthesize(base, PRECEDENCE["Mul"], strict=False)] * int(exp))
        raise DimError(f"dim expression {expr} has a non-integer or negative power")


_PRINTER = _DimPrinter()

#: Dims are sizes: a static one must fit the ``i64`` the type stores it in.
MAX_STATIC = 2**63 - 1
#: A symbol's maximum when none was declared (the frontends' default range is
#: ``1 <= s <= SYMBOL_MAX``; reports and ``kiln validate`` treat it as "no range").
SYMBOL_MAX = 2**31 - 1
# Bounds that keep a hostile dim text from costing more than milliseconds:
# its tokens, its nesting, and the terms its expanded form may have
# ("(A+1)*(B+1)*...*(P+1)" is 100 characters and 65,536 terms, ~30 s of
# sympy).  Real dims are far inside all three.
MAX_TOKENS = 4096
MAX_DEPTH = 64
MAX_TERMS = 1024


def _term_bound(e) -> int:
    """An upper bound on the terms of ``expand(e)``, without expanding."""
    if e.is_Atom:  # most nodes: a symbol or a number
        return 1
    if e.is_Add:
        return sum(_term_bound(a) for a in e.args)
    if e.is_Mul:
        n = 1
        for a in e.args:
            if not a.is_Atom:
                n *= _term_bound(a)
                if n > MAX_TERMS:
                    return n
        return n
    if e.is_Pow and e.exp.is_Integer and e.exp > 0:
        # (t1 + ... + tk)**n has at most C(n+k-1, k-1) terms.
        k = _term_bound(e.base)
        return 1 if k == 1 else math.comb(min(int(e.exp), 10**6) + k - 1, k - 1)
    return 1  # a symbol, a number, or an unexpanded call such as FloorDiv


def checked_expand(e) -> sympy.Expr:
    """``sympy.expand(e)``, or a DimError when the result would have more than
    ``MAX_TERMS`` terms (the expansion itself would take minutes)."""
    if _term_bound(e) > MAX_TERMS:
        raise DimError(f"dim expression is too large: it expands to more than {MAX_TERMS} terms")
    return sympy.expand(e)

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TOKEN = re.compile(r"\s*(?:(\d+)|([A-Za-z_][A-Za-z0-9_]*)|(.))")


@functools.cache
def symbol(name: str) -> sympy.Symbol:
    """The sympy symbol for the dim symbol ``name`` (a non-negative integer)."""
    if not _IDENT.fullmatch(name):
        raise DimError(f"'{name}' is not a valid symbol name")
    return sympy.Symbol(name, integer=True, nonnegative=True)


class _Parser:
    """Recursive-descent parser of the dim expression language.

    Grammar::

        expr   := term (("+" | "-") term)*
        term   := factor (("*" | "/") factor)*
        factor := "-" factor | INT | IDENT | "(" expr ")"
    """

    def __init__(self, text: str):
        self.text = text
        self.tokens = []
        for m in _TOKEN.finditer(text):
            if m.group(0).strip() == "":
                continue
            self.tokens.append(m.group(1) or m.group(2) or m.group(3))
        self.pos = 0
        self.depth = 0

    def error(self, why: str) -> DimError:
        return DimError(f"invalid dim expression '{self.text}': {why}")

    def peek(self):
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self):
        tok = self.peek()
        self.pos += 1
        return tok

    def parse(self) -> sympy.Expr:
        if not self.tokens:
            raise self.error("empty")
        if len(self.tokens) > MAX_TOKENS:
            raise DimError(f"invalid dim expression '{self.text[:40]}...': longer than {MAX_TOKENS} tokens")
        e = self.expr()
        if self.peek() is not None:
            raise self.error(f"unexpected '{self.peek()}'")
        return e

    def expr(self):
        # The terms are summed once: adding them one by one re-flattens the
        # sum each time (quadratic in a long "A+B+C+...").
        terms = [self.term()]
        while self.peek() in ("+", "-"):
            op = self.take()
            rhs = self.term()
            terms.append(rhs if op == "+" else -rhs)
        return terms[0] if len(terms) == 1 else sympy.Add(*terms)

    def term(self):
        factors = [self.factor()]
        while self.peek() in ("*", "/"):
            op = self.take()
            rhs = self.factor()
            if op == "*":
                factors.append(rhs)
            else:
                if not rhs.is_Integer:
                    raise self.error("the divisor of '/' must be an integer constant")
                if rhs <= 0:
                    raise self.error("the divisor of '/' must be positive")
                factors = [FloorDiv(checked_expand(sympy.Mul(*factors)), rhs)]
        return factors[0] if len(factors) == 1 else sympy.Mul(*factors)

    def factor(self):
        tok = self.take()
        negate = False
        while tok == "-":  # a loop, not recursion: "------B" must not exhaust the stack
            negate = not negate
            tok = self.take()
        e = self._primary(tok)
        return -e if negate else e

    def _primary(self, tok):
        if tok is None:
            raise self.error("unexpected end")
        if tok == "(":
            self.depth += 1
            if self.depth > MAX_DEPTH:
                raise self.error(f"parentheses nested deeper than {MAX_DEPTH}")
            e = self.expr()
            if self.take() != ")":
                raise self.error("missing ')'")
            self.depth -= 1
            return e
        if tok.isdigit():
            return sympy.Integer(int(tok))
        if _IDENT.fullmatch(tok):
            return symbol(tok)
        raise self.error(f"unexpected '{tok}'")


class Dim:
    """One dimension: a static size, a symbolic expression, or unknown (``?``).

    ``Dim`` values are immutable and hashable; two dims are equal exactly when
    their canonical forms are equal.
    """

    __slots__ = ("expr",)

    def __init__(self, expr: sympy.Expr | None):
        # None stands for the unknown dim "?".  An integer or a lone symbol is
        # already expanded, and expand() costs ~5 us: model verification
        # builds tens of thousands of dims.
        if expr is None or isinstance(expr, (sympy.Integer, sympy.Symbol)):
            self.expr = expr
        else:
            self.expr = checked_expand(expr)
        if self.expr is not None and self.expr.is_Integer and not -MAX_STATIC <= self.expr <= MAX_STATIC:
            raise DimError(f"dim {self.expr} does not fit in 64 bits")

    @property
    def is_unknown(self) -> bool:
        """True for ``?``: a dim that shape inference has not filled in."""
        return self.expr is None

    @property
    def is_static(self) -> bool:
        """True when the dim is an integer constant."""
        return self.expr is not None and self.expr.is_Integer

    @property
    def value(self) -> int:
        """The static size; a DimError for a symbolic or unknown dim."""
        if not self.is_static:
            raise DimError(f"dim '{self}' is not static")
        return int(self.expr)

    @property
    def symbols(self) -> frozenset[str]:
        """Names of the symbols the dim mentions."""
        if self.expr is None:
            return frozenset()
        return frozenset(s.name for s in self.expr.free_symbols)

    @property
    def is_symbol(self) -> bool:
        """True when the dim is exactly one symbol (``"B"``, not ``"B+1"``)."""
        return self.expr is not None and self.expr.is_Symbol

    def to_attr_value(self) -> int | str:
        """The value stored in the type's dim array: int, or canonical text."""
        if self.is_static:
            return self.value
        return str(self)

    def __str__(self) -> str:
        if self.expr is None:
            return "?"
        return _PRINTER.doprint(self.expr).replace(" ", "")

    def __repr__(self) -> str:
        return f"Dim({str(self)!r})"

    def __eq__(self, other) -> bool:
        if not isinstance(other, Dim):
            try:
                other = dim(other)
            except DimError:
                return NotImplemented
        if self.expr is None or other.expr is None:
            return self.expr is None and other.expr is None
        if self.expr == other.expr:  # the same canonical form (the usual case)
            return True
        if self.expr.is_Integer and other.expr.is_Integer:
            return False
        return sympy.expand(self.expr - other.expr) == 0

    def __hash__(self) -> int:
        return hash(str(self))

    # Arithmetic builds new dims, used by shape functions.
    def _bin(self, other, fn) -> Dim:
        # A negative int is a valid *operand* (``L + -1`` for ``x[:, :-1]``,
        # a slice from the end): only a dim itself cannot be negative.
        other = _operand(other)
        if self.is_unknown or other.is_unknown:
            return UNKNOWN
        return Dim(fn(self.expr, other.expr))

    def __add__(self, other):
        return self._bin(other, lambda a, b: a + b)

    __radd__ = __add__

    def __sub__(self, other):
        return self._bin(other, lambda a, b: a - b)

    def __rsub__(self, other):
        return _operand(other) - self

    def __mul__(self, other):
        return self._bin(other, lambda a, b: a * b)

    __rmul__ = __mul__

    def __floordiv__(self, other):
        other = _operand(other)
        if not other.is_unknown and not other.is_static:
            raise DimError(f"cannot divide by the symbolic dim '{other}'")
        return self._bin(other, FloorDiv)


UNKNOWN = Dim(None)


def _operand(value) -> Dim:
    """``value`` as the operand of dim arithmetic: as :func:`dim`, except that a
    negative int is a constant term rather than an error."""
    if isinstance(value, int) and not isinstance(value, bool) and value < 0:
        return Dim(sympy.Integer(value))
    return dim(value)


def dim(value) -> Dim:
    """Parse ``value`` (int, str, sympy expression or Dim) into a Dim.

    Raises DimError for text that is not a valid dim expression and for
    negative static sizes.
    """
    if isinstance(value, Dim):
        return value
    if isinstance(value, bool):
        raise DimError(f"{value!r} is not a dim")
    if isinstance(value, int):
        if value < 0:
            raise DimError(f"dim {value} is negative")
        if value > MAX_STATIC:
            raise DimError(f"dim {value} does not fit in 64 bits")
        return _static_cached(value)
    if isinstance(value, str):
        text = value.strip()
        if text == "?":
            return UNKNOWN
        return _parse_cached(text)
    if isinstance(value, sympy.Expr):
        return Dim(value)
    raise DimError(f"{value!r} is not a dim (expected an int or a string)")


@functools.lru_cache(maxsize=4096)
def _static_cached(value: int) -> Dim:
    # Dims are immutable: one object per size serves every type that has it.
    return Dim(sympy.Integer(value))


@functools.lru_cache(maxsize=4096)
def _parse_cached(text: str) -> Dim:
    d = Dim(_Parser(text).parse())
    if d.is_static and d.value < 0:
        raise DimError(f"dim '{text}' is negative")
    return d


def format_dim(value) -> str:
    """Canonical text of a dim: ``16``, ``B``, ``B*L``, ``(H-3)/2+1``."""
    return str(dim(value))


def dims_equal(a, b) -> bool:
    """True when ``a`` and ``b`` are provably the same size for every binding."""
    return dim(a) == dim(b)


def evaluate(value, binding: Mapping[str, int]) -> int:
    """The size of a dim under a binding of its symbols to integers.

    Raises DimError naming the first symbol that the binding lacks.
    """
    d = dim(value)
    if d.is_unknown:
        raise DimError("cannot evaluate the unknown dim '?'")
    if d.is_static:
        return d.value
    missing = sorted(d.symbols - set(binding))
    if missing:
        raise DimError(f"dim '{d}' needs a value for symbol '{missing[0]}'")
    result = d.expr.xreplace({symbol(n): sympy.Integer(binding[n]) for n in d.symbols})
    return int(result)


def shape_text(dims: Iterable) -> str:
    """``[B, L, 16]``: a shape for messages."""
    return "[" + ", ".join(format_dim(d) for d in dims) + "]"
