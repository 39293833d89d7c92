"""``kiln-select-kernels``: kiln ops whose registered kernel (or decomposition) replaces kiln's code.

First, a kiln op with a decomposition registered from user code
(``kiln.register_decomposition("kiln.gelu", fn)``) is rewritten into the
kiln ops ``fn`` builds (:func:`kiln.backends.user.decompose_kiln_op`).

A kernel registered from user code for a kiln op on the CPU
(``kiln.register_kernel("kiln.softmax", fn, device="cpu", ...)``) is chosen
over the code kiln generates for that op: this pass rewrites each such op
into ``kiln.custom`` (``op_name`` the kiln op, ``kernel`` the registered
name, ``attrs`` the op's attributes with their defaults), which
kiln-partition makes a kernel of its own and the runtime runs through the
registry entry (:class:`kiln.backends.user.UserKernel`).  An entry matches by
op name, device and the dtype of the op's first operand; its ``applies``
(when given) is asked with the op.  Among several, the highest priority wins.

Only plain functions ranked above kiln's generated code (priority > 0; 10
by default) are taken: a function computes the op alone, so the op must not
be fused with its neighbours (kernel classes on the Triton path, which take
prologues and epilogues, are chosen by the registry per kernel instead).

``kiln.compile`` runs it on the CPU path before the graph passes (so a
chosen op is not fused away) and again before partitioning (ops that the
graph passes created, such as ``kiln.attention`` from attention written out);
the Triton path (``device=cuda``) runs it before its own grouping.

Statistics: ``user decompositions``, ``user kernels`` (ops rewritten).
"""

from __future__ import annotations

from .._mlir import ir
from ..pipelines.registry import Option, Pass, register_pass

__all__ = ["SelectKernels", "user_entries"]

# Ops that are not computations a kernel replaces.
_SKIP = {"kiln.constant", "kiln.symbol", "kiln.yield", "kiln.fused", "kiln.custom", "kiln.fallback"}
_SEGMENTS = ("operandSegmentSizes", "resultSegmentSizes")


def user_entries(device: str) -> dict[str, list]:
    """Entries that replace single kiln ops on ``device``, by op name (best
    priority first): plain functions (which compute the op alone, never
    fused neighbours) ranked above kiln's generated kernels (priority 0)."""
    import inspect

    from ..dialects.kiln import OPS
    from .registry import REGISTRY

    out: dict[str, list] = {}
    for e in REGISTRY.entries:
        if e.device == device and e.op in OPS and e.priority > 0 and not inspect.isclass(e.impl):
            out.setdefault(e.op, []).append(e)
    for v in out.values():
        v.sort(key=lambda e: -e.priority)
    return out


def _choose(op, entries):
    from ..dialects.kiln import tensor_info

    first = op.operands[0] if len(op.operands) else (op.results[0] if len(op.results) else None)
    dtype = str(tensor_info(first.type).dtype) if first is not None else None
    for e in entries:
        if e.dtypes is not None and dtype not in e.dtypes:
            continue
        if e.applies is not None and not e.applies(op.opview):
            continue
        return e
    return None


def _attrs(op) -> dict:
    """The op's attributes, declared defaults filled in (what the kernel gets as ``attrs``)."""
    from ..dialects.kiln import encode_attr

    view = op.opview
    out = {}
    for name, spec in getattr(view, "ATTRS", {}).items():
        if name in op.attributes:
            out[name] = op.attributes[name]
        elif spec.default is not None:
            out[name] = encode_attr(spec, spec.default)
    for a in op.attributes:  # present but undeclared (kept as they are)
        key = a if isinstance(a, str) else a.name
        if key == "operandSegmentSizes":  # which optional operands are there (layer_norm's weight, bias)
            out[key] = ir.DenseI64ArrayAttr.get([int(n) for n in ir.DenseI32ArrayAttr(op.attributes[key])])
        elif key not in out and key not in _SEGMENTS:
            out[key] = op.attributes[key]
    return out


@register_pass
class SelectKernels(Pass):
    """Rewrite kiln ops with a registered user kernel into ``kiln.custom``."""

    name = "kiln-select-kernels"
    summary = "Choose kernels registered from user code over kiln's generated code (ops become kiln.custom)"
    options = (Option("device", str, "cpu", "the device whose registered kernels are chosen"),)

    def run(self, module) -> None:
        from .user import decompose_kiln_op, kiln_decompositions

        entries = user_entries(self.option("device"))
        decompositions = kiln_decompositions()
        if not entries and not decompositions:
            return
        from ..dialects.kiln import create_op

        for fn in module.regions[0].blocks[0].operations:
            fn = fn.operation
            if fn.name != "func.func" or not len(fn.regions[0].blocks):
                continue
            for op in list(fn.regions[0].blocks[0].operations):
                op = op.operation
                if op.name in _SKIP:
                    continue
                if op.name in decompositions:
                    with ir.InsertionPoint(op), op.location:
                        if decompose_kiln_op(op, decompositions[op.name]):
                            self.bump("user decompositions")
                            continue
                if op.name not in entries:
                    continue
                entry = _choose(op, entries[op.name])
                if entry is None:
                    continue
                attrs = _attrs(op)
                with ir.InsertionPoint(op):
                    new = create_op("custom", list(op.operands), results=[r.type for r in op.results],
                                    loc=op.location, attrs={
                                        "op_name": op.name, "kernel": entry.name,
                                        "attrs": ir.DictAttr.get(attrs) if attrs else None})
                for old, r in zip(op.results, new.operation.results):
                    old.replace_all_uses_with(r)
                op.erase()
                self.bump("user kernels")


def select_user_kernels(module, device: str = "cpu") -> None:
    """Run ``kiln-select-kernels`` on ``module`` when any kernel or
    decomposition is registered for a kiln op on ``device`` (nothing to do,
    and no pass run, otherwise)."""
    from .user import kiln_decompositions

    if not user_entries(device) and not kiln_decompositions():
        return
    from ..pipelines import Pipeline

    Pipeline().add("kiln-select-kernels", device=device).run(module, verify_each=None)
