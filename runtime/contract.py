"""The shape contract of a compiled model: check and bind input shapes by name.

Before any kernel runs, every input's rank, dtype and dims are checked against
the model's symbols.  Each symbol is bound from the *first* dim that names it
(inputs in order, axes in order); every other use of it, and every dim
expression, is then checked against the bound value.  A violation is a
:class:`~kiln.errors.ShapeError` that names the input, the axis, the symbol,
the value and the constraint, and lists the optimization profiles::

    input 'x' axis 0: B = 65 violates 1 <= B <= 64 (profiles: small B in [1, 8], large B in [9, 64])
    input 'mask' axis 1 is 100 but L = 128 was bound from input 'x' axis 1

The checks are planned once, when the contract is built, so a call costs a
few integer comparisons per dim.  Dim expressions are compiled to Python
closures by :func:`compile_expr`, which the memory plan reuses for its
offsets (its grammar is the dim grammar plus ``max(a, b, ...)``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ..dialects.dims import Dim, dim
from ..errors import DimError, ShapeError

__all__ = ["BoundsCheck", "BoundsError", "InputSpec", "ReshapeCheck", "ShapeContract", "check_from_data", "parse_checks", "compile_expr", "dtype_of", "needs_conversion", "readable", "shape_of"]


# ----------------------------------------------------------------------------
# Expressions: dim text (and plan text with max) compiled to closures.
# ----------------------------------------------------------------------------

_TOKEN = re.compile(r"\s*(?:(\d+)|([A-Za-z_][A-Za-z0-9_]*)|(.))")


class _ExprCompiler:
    """Recursive descent over ``+ - * / ** ( ) max(...)``; ``/`` is floor division.

    Produces nested closures ``f(binding) -> int``; much faster than sympy
    substitution, which matters since the runtime evaluates per call shape.
    """

    def __init__(self, text: str):
        self.text = text
        self.tokens = [m.group(1) or m.group(2) or m.group(3) for m in _TOKEN.finditer(text) if m.group(0).strip()]
        self.pos = 0
        self.symbols: set[str] = set()

    def error(self, why: str) -> DimError:
        return DimError(f"invalid expression '{self.text}': {why}")

    def peek(self):
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self):
        tok = self.peek()
        self.pos += 1
        return tok

    def parse(self):
        if not self.tokens:
            raise self.error("empty")
        f = self.expr()
        if self.peek() is not None:
            raise self.error(f"unexpected '{self.peek()}'")
        return f

    def expr(self):
        f = self.term()
        while self.peek() in ("+", "-"):
            op, g = self.take(), self.term()
            f = (lambda a, b: lambda env: a(env) + b(env))(f, g) if op == "+" else (
                lambda a, b: lambda env: a(env) - b(env))(f, g)
        return f

    def term(self):
        f = self.factor()
        while self.peek() in ("*", "/"):
            op, g = self.take(), self.factor()
            f = (lambda a, b: lambda env: a(env) * b(env))(f, g) if op == "*" else (
                lambda a, b: lambda env: a(env) // b(env))(f, g)
        return f

    def factor(self):
        f = self.atom()
        # "H**2": sympy's printer writes powers of symbols that way.
        if self.peek() == "*" and self.pos + 1 < len(self.tokens) and self.tokens[self.pos + 1] == "*":
            self.pos += 2
            g = self.factor()
            return (lambda a, b: lambda env: a(env) ** b(env))(f, g)
        return f

    def atom(self):
        tok = self.take()
        if tok is None:
            raise self.error("unexpected end")
        if tok == "-":
            f = self.atom()
            return lambda env: -f(env)
        if tok == "(":
            f = self.expr()
            if self.take() != ")":
                raise self.error("missing ')'")
            return f
        if tok.isdigit():
            value = int(tok)
            return lambda env: value
        if tok == "max" and self.peek() == "(":
            self.take()
            args = [self.expr()]
            while self.peek() == ",":
                self.take()
                args.append(self.expr())
            if self.take() != ")":
                raise self.error("missing ')' after max arguments")
            return lambda env: max(a(env) for a in args)
        if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", tok):
            self.symbols.add(tok)
            return lambda env: env[tok]
        raise self.error(f"unexpected '{tok}'")


def compile_expr(text) -> tuple:
    """Compile a dim or plan expression into ``(fn, symbols)``.

    ``fn(binding)`` returns the integer value for a mapping of symbol names
    to integers; ``symbols`` is the frozenset of names it reads.  ``text`` is
    an int, a :class:`Dim`, or text in the dim grammar extended with
    ``max(a, b, ...)``.
    """
    if isinstance(text, int):
        return (lambda env: text), frozenset()
    c = _ExprCompiler(str(text))
    fn = c.parse()
    return fn, frozenset(c.symbols)


# ----------------------------------------------------------------------------
# Reading shapes and dtypes of numpy arrays and torch tensors.
# ----------------------------------------------------------------------------

_NUMPY_DTYPES = {
    "float16": "f16", "float32": "f32", "float64": "f64", "bool": "i1",
    "int8": "i8", "uint8": "ui8", "int16": "i16", "int32": "i32", "int64": "i64",
    "bfloat16": "bf16",  # ml_dtypes' numpy bfloat16 (numpy has none of its own)
}
_TORCH_DTYPES = {
    "torch.float16": "f16", "torch.bfloat16": "bf16", "torch.float32": "f32", "torch.float64": "f64",
    "torch.bool": "i1", "torch.int8": "i8", "torch.uint8": "ui8", "torch.int16": "i16", "torch.int32": "i32", "torch.int64": "i64",
}


def _is_array(value) -> bool:
    """A numpy array or a torch tensor (without importing torch)."""
    if isinstance(value, np.ndarray):
        return True
    return any(c.__module__.startswith("torch") and c.__name__ == "Tensor" for c in type(value).__mro__)


def arguments_key(values) -> tuple | None:
    """The key of a call's arguments: each one's type, shape and dtype (None
    for arguments that are not arrays, or whose shape or dtype is not
    hashable).  The contract caches bindings by it, and the fast path
    (:mod:`kiln.runtime.fastcall`) its frozen plans."""
    try:
        if len(values) == 1:  # the common case, without a generator (0.15 us)
            a = values[0]
            key = ((type(a), a.shape, a.dtype),)
        else:
            key = tuple((type(a), a.shape, a.dtype) for a in values)
        hash(key)
        return key
    except (AttributeError, TypeError):
        return None


def shape_of(value) -> tuple[int, ...]:
    """The shape of a numpy array or torch tensor, as a tuple of ints."""
    return tuple(int(s) for s in value.shape)


_DTYPE_NAMES: dict = {}  # dtype object -> kiln name (str() of a numpy dtype costs ~5 µs)


def dtype_of(value) -> str:
    """The kiln dtype name (``"f32"``) of a numpy array or torch tensor."""
    dt = value.dtype
    name = _DTYPE_NAMES.get(dt)
    if name is None:
        # '>f4' is f32 in the other byte order: :func:`readable` swaps it to native.
        native = dt.newbyteorder("=") if isinstance(dt, np.dtype) and not dt.isnative else dt
        text = str(native)
        name = _DTYPE_NAMES[dt] = _TORCH_DTYPES.get(text) or _NUMPY_DTYPES.get(text) or str(dt)
    return name


# ----------------------------------------------------------------------------
# What the kernels can read: per call, since a meta tensor or a negative view
# has the same type, shape and dtype (the cache key of bind) as a plain tensor.
# ----------------------------------------------------------------------------

_torch = None  # the torch module, once a tensor has been seen (imported lazily)


def _is_bf16_numpy(dt) -> bool:
    """ml_dtypes' bfloat16: a numpy 'V' (void) kind torch.from_numpy refuses."""
    return dt.kind == "V" and dt.name == "bfloat16"


def needs_conversion(key) -> bool:
    """Whether an :func:`arguments_key` has a numpy dtype the kernels cannot
    read as it is (another byte order, ml_dtypes' bfloat16): the fast path
    (:mod:`kiln.runtime.fastcall`) passes pointers through unconverted, so such
    keys must take the ordinary path, which calls :func:`readable`."""
    for _, _, dt in key:
        if isinstance(dt, np.dtype) and (not dt.isnative or _is_bf16_numpy(dt)):
            return True
    return False


def readable(value, name: str, device: str = "cpu"):
    """``value`` (an input already checked by :meth:`ShapeContract.bind`) as
    the kernels can read it: the same object in the common case, a
    materialized copy where the memory does not hold the values as they are
    (a torch negative or conjugate view, a numpy array in the other byte
    order or unaligned, ml_dtypes' bfloat16 as a torch bfloat16 tensor).
    A tensor with no memory kiln can read raises :class:`ShapeError` naming
    the input: another device than the model's (meta, cuda), a layout other
    than strided (sparse, mkldnn), a tensor subclass without storage (fake
    or functional tensors)."""
    global _torch
    if isinstance(value, np.ndarray):
        dt = value.dtype
        if dt.isnative and dt.kind != "V" and value.flags.aligned:
            return value
        if not dt.isnative:
            value = value.astype(dt.newbyteorder("="))  # a native, aligned, C-contiguous copy
        elif not value.flags.aligned:
            value = value.copy()
        if _is_bf16_numpy(value.dtype):
            import torch

            return torch.from_numpy(np.ascontiguousarray(value).view(np.int16)).view(torch.bfloat16)
        return value
    if _torch is None:
        import torch

        _torch = torch
    if value.layout is not _torch.strided:
        layout = str(value.layout).removeprefix("torch.")
        raise ShapeError(f"input '{name}' is a {layout} tensor; kiln reads dense (strided) tensors "
                         f"(call .to_dense() on it first)")
    if value.device.type != device:
        raise ShapeError(f"input '{name}' is on device '{value.device}'; kiln's {device.upper()} model "
                         f"needs {device.upper()} tensors")
    # A fake tensor reports the device it stands for, but its memory is on "meta" (data_ptr() is 0,
    # with a warning); a wrapper or functional tensor has none: ask the storage.
    try:
        where = value.untyped_storage().device.type if type(value) is not _torch.Tensor else device
        if where == device:
            value.data_ptr()
    except (RuntimeError, NotImplementedError, TypeError):
        where = None
    if where != device:
        raise ShapeError(f"input '{name}' is a {type(value).__name__} without memory kiln can read "
                         f"(a fake, functional or wrapper tensor); pass a plain {device.upper()} tensor")
    if value.is_neg():  # torch._neg_view and friends: the memory holds -x
        value = value.resolve_neg()
    if value.is_conj():
        value = value.resolve_conj()
    return value


# ----------------------------------------------------------------------------
# The contract.
# ----------------------------------------------------------------------------


@dataclass(frozen=True)
class InputSpec:
    """One model input: its name, symbolic dims and dtype name (``"f32"``)."""

    name: str
    dims: tuple[Dim, ...]
    dtype: str

    @classmethod
    def make(cls, name: str, dims: Sequence, dtype: str) -> InputSpec:
        """Build from any dims :func:`~kiln.dialects.dims.dim` accepts."""
        return cls(name, tuple(dim(d) for d in dims), str(dtype))

    def shape_text(self) -> str:
        return "[" + ", ".join(str(d) for d in self.dims) + "]"


@dataclass(frozen=True)
class _Bind:
    """Bind ``symbol`` from (input, axis); ``solve`` maps the dim value to it."""

    input: int
    axis: int
    symbol: str
    solve: object  # callable(value) -> int | None (None: no integer solution)
    expr: str


@dataclass(frozen=True)
class _Check:
    input: int
    axis: int
    expr: str
    fn: object
    symbols: frozenset


@dataclass(frozen=True)
class ReshapeCheck:
    """A reshape whose element counts only the binding decides (a target of
    run-time values): ``where`` names it (its model location), ``src`` and
    ``dst`` are its input's and result's dims as text."""

    where: str
    src: tuple
    dst: tuple

    def as_data(self) -> dict:
        """The check as plain data (artifact manifests; :func:`check_from_data` reads it)."""
        return {"kind": "reshape", "where": self.where, "src": list(self.src), "dst": list(self.dst)}


@dataclass(frozen=True)
class BoundsCheck:
    """A slice by run-time bounds (dim texts) that the compiled kernels take
    only inside its axis: ``0 <= start <= end <= size`` (the source op clamps
    other values, which a :class:`BoundsError` lets a caller serve otherwise)."""

    where: str
    start: str
    end: str
    size: str

    def as_data(self) -> dict:
        """The check as plain data (artifact manifests; :func:`check_from_data` reads it)."""
        return {"kind": "bounds", "where": self.where, "start": self.start, "end": self.end, "size": self.size}


class BoundsError(ShapeError):
    """Slice bounds outside the range the compiled kernels take (see :class:`BoundsCheck`)."""


def check_from_data(data: Mapping):
    """The :class:`ReshapeCheck` / :class:`BoundsCheck` that ``as_data`` gave ``data``."""
    fields = {k: v for k, v in data.items() if k != "kind"}
    if data.get("kind") == "reshape":
        return ReshapeCheck(fields["where"], tuple(fields["src"]), tuple(fields["dst"]))
    return BoundsCheck(**fields)


def parse_checks(texts: Sequence[str]) -> list:
    """The module's ``kiln.checks`` strings (``bounds|where|start|end|size``)
    as :class:`BoundsCheck` objects; ``where`` (a node name) may hold ``|``,
    the dim texts do not."""
    out = []
    for text in texts:
        kind, _, rest = str(text).partition("|")
        fields = rest.rsplit("|", 3)
        if kind != "bounds" or len(fields) != 4:
            raise ShapeError(f"unknown shape check {text!r}")
        out.append(BoundsCheck(*fields))
    return out


def _solver(d: Dim, name: str):
    """``value -> symbol value`` for a dim linear in one symbol (``2*L+1``)."""
    if d.is_symbol:
        return lambda v: v
    import sympy

    from ..dialects.dims import symbol

    s = symbol(name)
    expr = d.expr
    if not expr.is_polynomial(s) or sympy.degree(expr, s) != 1:
        return None
    a, b = sympy.Poly(expr, s).all_coeffs()
    if not (a.is_Integer and b.is_Integer) or int(a) <= 0:
        return None
    a, b = int(a), int(b)

    def solve(v):
        q, r = divmod(v - b, a)
        return q if r == 0 else None

    return solve


class ShapeContract:
    """Checks and binds the shapes of a model's inputs against its symbols.

    ``inputs`` are the model's :class:`InputSpec` in call order; ``symbols``
    maps names to :class:`~kiln.module.SymbolInfo` (range, opt, divisibility);
    ``profiles`` (optional) are :class:`~kiln.runtime.profiles.Profile`
    objects, listed in range errors.
    """

    def __init__(self, inputs: Sequence[InputSpec], symbols: Mapping, profiles: Sequence = (),
                 checks: Sequence = ()):
        self.inputs = list(inputs)
        self.symbols = dict(symbols)
        self.profiles = list(profiles)
        #: ReshapeCheck / BoundsCheck: what the binding must satisfy besides the dims.
        self.checks = list(checks)
        self._binds: list[_Bind] = []
        self._checks: list[_Check] = []
        self._plan()
        self._reshapes, self._bounds = [], []
        for c in self.checks:
            if isinstance(c, ReshapeCheck):
                self._reshapes.append((c, [compile_expr(d)[0] for d in c.src], [compile_expr(d)[0] for d in c.dst]))
            else:
                self._bounds.append((c, *(compile_expr(d)[0] for d in (c.start, c.end, c.size))))
        # Shapes and dtypes already checked -> their binding: a call with a
        # shape seen before is one dict lookup (the check is deterministic).
        self._seen: dict[tuple, dict[str, int]] = {}

    # -- planning ---------------------------------------------------------

    def _plan(self) -> None:
        bound: dict[str, _Bind] = {}
        pending: list[tuple[int, int, Dim]] = []
        for i, spec in enumerate(self.inputs):
            for axis, d in enumerate(spec.dims):
                if d.is_unknown:
                    raise ShapeError(f"input '{spec.name}' axis {axis} has an unknown dim '?'")
                pending.append((i, axis, d))
        # Bind in input/axis order: a dim naming exactly one unbound symbol,
        # linearly, binds it; repeat until no dim binds anything new (an
        # expression may become solvable once its other symbols are bound).
        progress = True
        while progress:
            progress = False
            for i, axis, d in pending:
                unbound = sorted(d.symbols - set(bound))
                if len(unbound) != 1:
                    continue
                name = unbound[0]
                if d.symbols != {name}:
                    continue  # mixes bound symbols in: checked, not used to bind
                solve = _solver(d, name)
                if solve is None:
                    continue
                bound[name] = _Bind(i, axis, name, solve, str(d))
                progress = True
                break
        unbindable = sorted(set().union(*(d.symbols for _, _, d in pending)) - set(bound)) if pending else []
        if unbindable:
            raise ShapeError(
                f"symbol '{unbindable[0]}' cannot be bound from the inputs: no input dim is linear in it alone"
            )
        self._binds = sorted(bound.values(), key=lambda b: (b.input, b.axis))
        binders = {(b.input, b.axis) for b in self._binds}
        for i, axis, d in pending:
            if (i, axis) in binders and d.is_symbol:
                continue
            fn, syms = compile_expr(d)
            self._checks.append(_Check(i, axis, str(d), fn, syms))
        self._bound_from = {b.symbol: (b.input, b.axis) for b in self._binds}

    # -- messages ---------------------------------------------------------

    def _where(self, i: int, axis: int) -> str:
        return f"input '{self.inputs[i].name}' axis {axis}"

    def profiles_text(self, name: str) -> str:
        """`` (profiles: small B in [1, 8], large B in [9, 64])`` for symbol ``name``; empty without profiles."""
        if not self.profiles:
            return ""
        parts = []
        for p in self.profiles:
            lo, hi = p.bounds(name, self.symbols)
            parts.append(f"{p.name} {name} in [{lo}, {hi}]")
        return f" (profiles: {', '.join(parts)})"

    def _range_error(self, name: str, value: int, i: int, axis: int) -> ShapeError:
        s = self.symbols[name]
        where = self._where(i, axis)
        if not s.min <= value <= s.max:
            constraint = s.range_text()
        else:
            constraint = f"{name} % {s.multiple_of} == 0"
        return ShapeError(f"{where}: {name} = {value} violates {constraint}{self.profiles_text(name)}")

    # -- checking ---------------------------------------------------------

    def bind_shapes(self, shapes: Sequence[Sequence[int]], dtypes: Sequence[str] | None = None) -> dict[str, int]:
        """Check ``shapes`` (and ``dtypes``, if given) and return the binding.

        Raises ShapeError for the first violation found: input count, rank,
        dtype, a symbol's range or divisibility, or a dim that disagrees with
        a bound symbol or expression.
        """
        specs = self.inputs
        if len(shapes) != len(specs):
            names = ", ".join(f"'{s.name}'" for s in specs)
            raise ShapeError(f"the model takes {len(specs)} inputs ({names}), got {len(shapes)}")
        for i, (spec, shape) in enumerate(zip(specs, shapes)):
            if len(shape) != len(spec.dims):
                raise ShapeError(
                    f"input '{spec.name}' has rank {len(shape)} {list(shape)}, "
                    f"but the model expects rank {len(spec.dims)} {spec.shape_text()}"
                )
            if dtypes is not None and dtypes[i] != spec.dtype:
                raise ShapeError(f"input '{spec.name}' has dtype {dtypes[i]}, but the model expects {spec.dtype}")
        binding: dict[str, int] = {}
        for b in self._binds:
            value = shapes[b.input][b.axis]
            v = b.solve(value)
            if v is None or v < 0:
                raise ShapeError(
                    f"{self._where(b.input, b.axis)} is {value}, which is not {b.expr} for any integer {b.symbol}"
                )
            s = self.symbols.get(b.symbol)
            if s is not None and not s.contains(v):
                raise self._range_error(b.symbol, v, b.input, b.axis)
            binding[b.symbol] = v
        for c in self._checks:
            got = shapes[c.input][c.axis]
            want = c.fn(binding)
            if got == want:
                continue
            where = self._where(c.input, c.axis)
            if len(c.symbols) == 1 and c.expr in c.symbols:
                (name,) = c.symbols
                src = self._where(*self._bound_from[name])
                raise ShapeError(f"{where} is {got} but {name} = {want} was bound from {src}")
            if not c.symbols:
                raise ShapeError(f"{where} is {got} but the model expects {want}")
            bound = ", ".join(
                f"{n} = {binding[n]} bound from {self._where(*self._bound_from[n])}" for n in sorted(c.symbols)
            )
            raise ShapeError(f"{where} is {got} but {c.expr} = {want} ({bound})")
        for r, src, dst in self._reshapes:
            a, b = [f(binding) for f in src], [f(binding) for f in dst]
            if math.prod(a) != math.prod(b) or min(b, default=0) < 0:
                raise ShapeError(f"{r.where}: cannot reshape {a} ({math.prod(a)} elements) to {b} "
                                 f"({math.prod(b)} elements)")
        for c, start, end, size in self._bounds:
            s, e, n = start(binding), end(binding), size(binding)
            if not 0 <= s <= e <= n:
                raise BoundsError(f"{c.where}: slice bounds {s}:{e} on an axis of {n}; the compiled slice "
                                  f"takes 0 <= start <= end <= size ({c.start}:{c.end} of {c.size})")
        return binding

    def bind(self, values: Sequence) -> dict[str, int]:
        """Check numpy arrays or torch tensors and return the symbol binding
        (shared between calls of the same shapes: do not mutate it)."""
        key = arguments_key(values)  # None for what is not an array: the check below names the problem
        hit = self._seen.get(key) if key is not None else None
        if hit is not None:
            return hit
        for i, v in enumerate(values):
            if not _is_array(v):
                what = f"input '{self.inputs[i].name}'" if i < len(self.inputs) else f"argument {i + 1}"
                raise ShapeError(f"{what} is a {type(v).__name__}, not a numpy array or a torch tensor")
        binding = self.bind_shapes([shape_of(v) for v in values], [dtype_of(v) for v in values])
        if key is not None:
            if len(self._seen) >= 1024:
                self._seen.clear()
            self._seen[key] = binding
        return binding

    def readable(self, values: Sequence, device: str = "cpu") -> Sequence:
        """The call's arguments (checked by :meth:`bind`) as the kernels can
        read them (see :func:`readable`): ``values`` itself when every one
        already is, else a list with the materialized ones in place."""
        out = None
        for i, v in enumerate(values):
            w = readable(v, self.inputs[i].name, device)
            if w is not v:
                if out is None:
                    out = list(values)
                out[i] = w
        return values if out is None else out

    # -- data -------------------------------------------------------------

    def describe(self, policy: str | None = None) -> dict:
        """The contract as plain data: symbols with ranges, the inputs'
        symbolic shapes and dtypes, the profiles (and the policy, if given)."""
        out = {
            "symbols": {
                n: {"min": s.min, "max": s.max, "opt": s.opt, "multiple_of": s.multiple_of}
                for n, s in sorted(self.symbols.items())
            },
            "inputs": [
                {"name": s.name, "shape": [d.to_attr_value() for d in s.dims], "dtype": s.dtype} for s in self.inputs
            ],
            "bound_from": {n: {"input": self.inputs[i].name, "axis": a} for n, (i, a) in self._bound_from.items()},
            "profiles": [p.describe() for p in self.profiles],
        }
        if policy is not None:
            out["policy"] = policy
        return out
