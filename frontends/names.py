"""The names of a model's inputs and outputs in kiln IR.

A frontend records the source's names (an ONNX graph's input and output
names, a torch ``forward()``'s parameter names) as ``kiln.name`` entries of
the entry function's ``arg_attrs`` and ``res_attrs``::

    func.func @main(%arg0: !kiln.tensor<[B, 16], f32> {kiln.name = "x"})
        -> (!kiln.tensor<[B, 8], f32> {kiln.name = "logits"})

:func:`kiln.compile` reads them back (:func:`value_names`), so shape errors
say ``input 'x'``, a model takes ``model(x=...)`` and ``model({"x": ...})``,
and ``kiln-run --input x=x.npy`` finds the input.  Unnamed values are
``arg<i>`` and ``output<j>``.
"""

from __future__ import annotations

from .._mlir import ir

__all__ = ["MUTATED_INPUT", "NAME_KEY", "name_signature", "value_names"]

NAME_KEY = "kiln.name"
#: Result attribute of the entry function: the number of the input that
#: result is the new value of (torch.export's mutated user inputs, set by
#: the torch frontend): kiln.compile writes it into the caller's array.
MUTATED_INPUT = "kiln.mutated_input"


def _merged(fn, key: str, names) -> ir.ArrayAttr:
    """``fn``'s ``key`` attribute (``arg_attrs``/``res_attrs``) with a
    ``kiln.name`` added to each entry, other entries kept."""
    old = list(ir.ArrayAttr(fn.attributes[key])) if key in fn.attributes else []
    out = []
    for i, name in enumerate(names):
        entries = {}
        if i < len(old):
            d = ir.DictAttr(old[i])
            entries = {d[j].name: d[j].attr for j in range(len(d))}
        if name:
            entries[NAME_KEY] = ir.StringAttr.get(name)
        out.append(ir.DictAttr.get(entries))
    return ir.ArrayAttr.get(out)


def name_signature(mod, inputs, outputs=None) -> None:
    """Record ``inputs`` (and ``outputs``) as the ``kiln.name`` of each
    argument (result) of every ``func.func`` in ``mod`` whose signature has
    that many; an empty or None name is left out.  A count that differs
    (a frontend that added or dropped arguments) leaves that side unnamed."""
    for op in mod.body.operations:
        if op.operation.name != "func.func":
            continue
        fn = op.operation
        ftype = ir.FunctionType(ir.TypeAttr(fn.attributes["function_type"]).value)
        if inputs is not None and len(ftype.inputs) == len(inputs):
            fn.attributes["arg_attrs"] = _merged(fn, "arg_attrs", inputs)
        if outputs is not None and len(ftype.results) == len(outputs):
            fn.attributes["res_attrs"] = _merged(fn, "res_attrs", outputs)


def value_names(fn, key: str, n: int, default: str) -> list[str]:
    """The ``kiln.name`` of each of the ``n`` entries of ``fn``'s ``key``
    attribute (``arg_attrs`` or ``res_attrs``), ``f"{default}{i}"`` where
    one has none (``kiln.input_name`` is read too, an older spelling)."""
    names = [f"{default}{i}" for i in range(n)]
    if key in fn.attributes:
        for i, d in enumerate(ir.ArrayAttr(fn.attributes[key])):
            if i >= n:
                break
            d = ir.DictAttr(d)
            for k in (NAME_KEY, "kiln.input_name"):
                if k in d:
                    names[i] = ir.StringAttr(d[k]).value
    return names
