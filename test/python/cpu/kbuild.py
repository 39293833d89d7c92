"""Build small kiln modules for the CPU tests: one function, many outputs.

``module_text(symbols, args, body)`` makes a context, declares the symbols,
creates ``func.func @main`` with kiln-typed arguments, calls ``body(*args)``
(which uses :mod:`kiln.dialects.kiln.builders` and returns the values to
return) and gives back the module's text, ready for ``kiln.compile``.
"""

from kiln._mlir import func, ir
from kiln.context import make_context
from kiln.dialects.kiln import SymbolOp, create_op, tensor_type


def module_text(symbols: dict, args: list, body) -> str:
    """``symbols``: ``{name: (min, max)}``; ``args``: ``[(dims, dtype)]``."""
    ctx = make_context()
    with ctx, ir.Location.unknown():
        m = ir.Module.create()
        with ir.InsertionPoint(m.body):
            for name, (lo, hi) in symbols.items():
                create_op(SymbolOp, attrs={"sym_name": name, "min": lo, "max": hi}, results=[])
            types = [tensor_type(d, t) for d, t in args]
            # results are filled in after the body is built
            fn = func.FuncOp("main", ir.FunctionType.get(types, []))
            block = fn.add_entry_block()
            with ir.InsertionPoint(block):
                outs = body(*block.arguments)
                outs = [o.result if hasattr(o, "result") else o for o in outs]
                func.ReturnOp(outs)
            fn.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(types, [o.type for o in outs]))
        return str(m)


class _Values:
    """``K.add(a, b)``: the kiln builders, returning result values (not op views)."""

    def __getattr__(self, name):
        from kiln.dialects.kiln import builders

        build = getattr(builders, name)

        def call(*args, **kw):
            op = build(*args, **kw)
            return op.result

        return call


K = _Values()
