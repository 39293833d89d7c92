"""Reading imported kiln modules in the frontend tests (not a test file)."""

from kiln._mlir import ir
from kiln.dialects.kiln import tensor_info
from kiln.module import ops_where


def entry_func(module):
    """The module's (first) function."""
    return next(op.operation for op in module.body.operations if op.operation.name == "func.func")


def result_dims(module):
    """Each result's dims as text: ``[["B", "10"]]``."""
    ftype = ir.FunctionType(ir.TypeAttr(entry_func(module).attributes["function_type"]).value)
    return [[str(d) for d in tensor_info(t).dims] for t in ftype.results]


def arg_dims(module):
    """Each argument's dims as text."""
    return [[str(d) for d in tensor_info(a.type).dims] for a in entry_func(module).regions[0].blocks[0].arguments]


def kiln_ops(module):
    """Every kiln op of the module but the symbol declarations, in walk order."""
    return ops_where(module, lambda op: op.name.startswith("kiln.") and op.name != "kiln.symbol")
