"""``kiln-simplify``'s ``gelu`` and ``silu`` patterns: activations written
out, as their kiln ops.

- ``gelu`` (exact): ``0.5 * x * (1 + erf(x / sqrt(2)))`` -> ``kiln.gelu``;
- ``gelu`` (tanh): ``0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 *
  x**3)))`` -> ``kiln.gelu {approximate = "tanh"}`` (GPT-2's ``NewGELU``);
- ``silu``: ``x * sigmoid(x)`` -> ``kiln.silu``.

A product is read as a coefficient times factors, whatever its association
(``0.5 * x * g``, ``x * (0.5 * g)``, ``(x * g) / 2``): splat constants
multiply the coefficient, a division by one divides it, and ``kiln.mul`` ops
read only by the product are flattened.  Constants must match to 1e-6
(relative), so a different slope (``x * sigmoid(1.702 * x)``, the quick
GELU) or a shifted erf argument stays as written.
"""

from __future__ import annotations

import math

from ._match import Pattern, build, dims_of, producer, single_use, splat

__all__ = ["ACTIVATION_PATTERNS", "gelu", "silu"]

_SQRT1_2 = 1.0 / math.sqrt(2.0)
_SQRT_2_PI = math.sqrt(2.0 / math.pi)
_TANH_CUBIC = 0.044715


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-6 * abs(b)


def _constant(value) -> float | None:
    """The splat value of a constant that cannot widen a product (rank <= 1
    of one element or rank 0), else None."""
    dims = dims_of(value)
    if any(not d.is_static or d.value != 1 for d in dims):
        return None
    return splat(value)


def _factors(value, top=True, depth=0):
    """``(coefficient, [factors])`` with ``value`` their product (see the
    module doc); the root ``value`` itself is always opened."""
    if depth > 4 or not (top or single_use(value)):
        return 1.0, [value]
    mul = producer(value, "kiln.mul")
    if mul is not None:
        coef, out = 1.0, []
        for v in mul.operands:
            c = _constant(v)
            if c is not None:
                coef *= c
                continue
            k, fs = _factors(v, False, depth + 1)
            coef *= k
            out += fs
        return coef, out
    div = producer(value, "kiln.div")
    if div is not None:
        c = _constant(div.operands[1])
        if c is not None and c != 0:
            k, fs = _factors(div.operands[0], False, depth + 1)
            return k / c, fs
    return 1.0, [value]


def _one_plus(value, name: str):
    """``u`` when ``value`` is ``1 + name(u)`` (either order), else None."""
    add = producer(value, "kiln.add")
    if add is None:
        return None
    for i in (0, 1):
        inner = producer(add.operands[i], name)
        if inner is not None and _constant(add.operands[1 - i]) == 1.0:
            return inner.operands[0]
    return None


def _scaled(value, x, want: float) -> bool:
    """True when ``value`` is ``want * x`` (as a coefficient and factors)."""
    coef, fs = _factors(value)
    return fs == [x] and _close(coef, want)


def _cubic_term(value, x) -> bool:
    """True when ``value`` is ``0.044715 * x**3`` (``pow(x, 3)`` or ``x*x*x``)."""
    coef, fs = _factors(value)
    if len(fs) == 1:
        p = producer(fs[0], "kiln.pow")
        if p is None or p.operands[0] != x or _constant(p.operands[1]) != 3.0:
            return False
    elif fs != [x, x, x]:
        return False
    return _close(coef, _TANH_CUBIC)


def _tanh_argument(u, x) -> bool:
    """True when ``u`` is ``sqrt(2/pi) * (x + 0.044715 * x**3)``."""
    coef, fs = _factors(u)
    if len(fs) != 1 or not _close(coef, _SQRT_2_PI):
        return False
    add = producer(fs[0], "kiln.add")
    if add is None:
        return False
    a, b = add.operands
    return (a == x and _cubic_term(b, x)) or (b == x and _cubic_term(a, x))


def gelu(root):
    """``0.5 * x * (1 + erf(x / sqrt 2))`` or the tanh form -> ``kiln.gelu``."""
    coef, fs = _factors(root.results[0])
    if len(fs) != 2 or not _close(coef, 0.5):
        return None
    for x, g in (fs, fs[::-1]):
        if x.type != root.results[0].type:
            continue
        u = _one_plus(g, "kiln.erf")
        if u is not None and _scaled(u, x, _SQRT1_2):
            return build(root, "kiln.gelu", [x], {"approximate": "none"})
        u = _one_plus(g, "kiln.tanh")
        if u is not None and _tanh_argument(u, x):
            return build(root, "kiln.gelu", [x], {"approximate": "tanh"})
    return None


def silu(root):
    """``x * sigmoid(x)`` -> ``kiln.silu``."""
    a, b = root.operands
    for x, s in ((a, b), (b, a)):
        sig = producer(s, "kiln.sigmoid")
        if sig is not None and sig.operands[0] == x and x.type == root.results[0].type:
            return build(root, "kiln.silu", [x])
    return None


#: The table entries :mod:`kiln.transforms.simplify` adds to its own.
ACTIVATION_PATTERNS = [
    Pattern("gelu", "kiln.mul", gelu),
    Pattern("gelu", "kiln.div", gelu),
    Pattern("silu", "kiln.mul", silu),
]
