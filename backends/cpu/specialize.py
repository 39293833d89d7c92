"""Static kernels for one shape: the CPU backend's side of optimization profiles.

The CPU kernels are dynamic in every dim, so one compilation serves every
shape in range.  At a profile's opt point kiln can do better: with the
symbols bound, every dim of every kernel is a constant, and LLVM unrolls,
vectorizes and hoists with known trip counts.  :func:`bind_dims` rewrites a
kernel module's text with the symbols replaced by their values (types and
the dim lists of attributes, e.g. ``kiln.reshape``'s ``shape``), and
:func:`compile_static` lowers and JIT-compiles it like the dynamic module.

A static kernel is only valid at exactly the shape it was compiled for; the
runtime (:mod:`kiln.runtime.executor`) measures it against the dynamic one
at the opt point, keeps it where it is faster, and uses it only when a call
binds exactly that shape.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from ...dialects.dims import DimError, dim, evaluate
from ...errors import KilnError

__all__ = ["bind_dims", "compile_static"]

# A dim list is a bracketed list without nested brackets (kiln types and the
# dim-list attributes); a dim in it that names symbols is a quoted string.
_LIST = re.compile(r"\[[^\[\]]*\]")
_QUOTED = re.compile(r'"([^"]*)"')
_DIM_TEXT = re.compile(r"^[A-Za-z0-9_*+\-/() ]+$")


def bind_dims(text: str, binding: Mapping[str, int]) -> str:
    """``text`` with every symbolic dim over ``binding``'s symbols replaced by its value.

    Only quoted strings inside bracketed lists that parse as dim expressions
    whose symbols are all bound are replaced, so op names (``"kiln.add"``)
    and other strings are left alone.
    """

    def one(m: re.Match) -> str:
        s = m.group(1)
        if not _DIM_TEXT.match(s):
            return m.group(0)
        try:
            d = dim(s)
        except DimError:
            return m.group(0)
        if d.is_unknown or not d.symbols or not d.symbols <= binding.keys():
            return m.group(0)
        return str(evaluate(d, binding))

    return _LIST.sub(lambda m: _QUOTED.sub(one, m.group(0)), text)


def compile_static(kernel_text: str, binding: Mapping[str, int], names, vectorize: int = 1):
    """JIT-compile the kernel module ``kernel_text`` with ``binding``'s dims
    made static; ``(engine, module)``.

    ``names`` are the kernel functions to materialize now (a missing symbol
    fails here, not at the first call).  The module lives in a context of
    its own; the caller keeps ``module`` alive with the engine.
    """
    from ..._mlir import ir
    from ...context import make_context
    from ...module import parse_module
    from .jit import jit
    from .lowering import lower

    ctx = make_context()
    with ctx, ir.Location.unknown():
        where = ", ".join(f"{k}={v}" for k, v in sorted(binding.items()))
        module = parse_module(bind_dims(kernel_text, binding), f"<kernels at {where}>")
        lower(module, vectorize=vectorize, verify_each=None)
        try:
            engine = jit(module, names=list(names))
        except Exception as e:  # the engine reports unresolved symbols as a RuntimeError
            raise KilnError(f"the CPU JIT failed for the kernels at {where}: {e}") from None
    return engine, module
