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

kiln's own CPU library kernels (:mod:`kiln.backends.cpu.library_kernels`:
native layer norm, RMS norm, max pool, attention) are registry entries too.  With
``builtin=1`` (what ``kiln.compile`` asks for before partitioning), an op
no user kernel took gets the first of its library entries that fits --
its dtype, and the entry's own ``why`` (which also says *why* it fits) --
as attributes ``kiln.impl`` (the entry's name) and ``kiln.why``;
``convert-kiln-to-linalg`` then lowers it to that call, not to loops.  An
op without ``kiln.impl`` is generated code.  Library kernels are chosen
only where the native runtime and BLAS are available (``KILN_NATIVE=0``,
``KILN_CPU_LIBRARY=0`` choose none).

``kiln.compile`` runs it on the CPU path before the graph passes (so a
chosen op is not fused away) and again before partitioning (ops that the
graph passes created, such as ``kiln.attention`` from attention written out);
the Triton path (``device=cuda``) runs it before its own grouping.

Inside a ``kiln.fused`` group, an entry with an ``epilogue`` (the native
GEMM, the native convolution) also takes the ops after its op that its call
applies (a bias add, an activation, a residual add, a global pool:
:mod:`kiln.backends.cpu.epilogues`): each gets the entry as ``kiln.impl``
and its role as ``kiln.epilogue``.

Statistics: ``user decompositions``, ``user kernels`` (ops rewritten),
``library kernels`` (ops given a library kernel), ``epilogue steps`` (ops
a library kernel's call applies after it).
"""

from __future__ import annotations

from .._mlir import ir
from ..conversions.kiln_to_linalg.library_call import op_attributes
from ..pipelines.registry import Option, Pass, register_pass
from ..transforms._graph import EPILOGUE_ATTR, IMPL_ATTR, PARTS_ATTR, WHY_ATTR

__all__ = ["SelectKernels", "library_entries", "select_kernels", "select_user_kernels", "user_entries"]

# Ops that are not computations a kernel replaces.
_SKIP = {"kiln.constant", "kiln.symbol", "kiln.yield", "kiln.fused", "kiln.custom", "kiln.fallback"}


def user_entries(device: str) -> dict[str, list]:
    """Entries that replace single kiln ops on ``device``, by op name (best
    priority first): plain functions (which compute the op alone, never
    fused neighbours) ranked above kiln's generated kernels (priority 0)."""
    import inspect

    from ..dialects.kiln import OPS
    from .cpu.calls import LibraryCall
    from .registry import REGISTRY

    return _by_op(e for e in REGISTRY.entries
                  if e.device == device and e.op in OPS and e.priority > 0 and not inspect.isclass(e.impl)
                  and not isinstance(e.impl, LibraryCall))


def library_entries(device: str) -> dict[str, list]:
    """kiln's library kernels for ``device`` by op name (best priority first),
    where the native runtime can run them (none elsewhere)."""
    if device != "cpu":
        return {}
    from .cpu.calls import LibraryCall
    from .cpu.library import enabled, native_enabled
    from .registry import REGISTRY

    if not enabled():
        return {}
    native = native_enabled()
    REGISTRY.load_builtins()
    return _by_op(e for e in REGISTRY.entries
                  if e.device == device and isinstance(e.impl, LibraryCall) and (native or not e.impl.native))


def _by_op(entries) -> dict[str, list]:
    """``entries`` grouped by op name, best priority first."""
    out: dict[str, list] = {}
    for e in entries:
        out.setdefault(e.op, []).append(e)
    for v in out.values():
        v.sort(key=lambda e: -e.priority)
    return out


def _dtype(op) -> str | None:
    from ..dialects.kiln import tensor_info

    first = op.operands[0] if len(op.operands) else (op.results[0] if len(op.results) else None)
    return str(tensor_info(first.type).dtype) if first is not None else None


def _choose_library(op, entries) -> tuple[object, str] | None:
    """``(entry, why)`` of the first library entry that fits ``op``."""
    dtype = _dtype(op)
    for e in entries:
        if e.dtypes is not None and dtype not in e.dtypes:
            continue
        why = e.impl.why(op.opview)
        if why is not None:
            return e, why
    return None


def _choose(op, entries):
    dtype = _dtype(op)
    for e in entries:
        if e.dtypes is not None and dtype not in e.dtypes:
            continue
        if e.applies is not None and not e.applies(op.opview):
            continue
        return e
    return None


@register_pass
class SelectKernels(Pass):
    """Rewrite kiln ops with a registered user kernel into ``kiln.custom``;
    mark the ops kiln's library kernels take (``kiln.impl``, ``kiln.why``)."""

    name = "kiln-select-kernels"
    summary = "Choose the registry's kernels on kiln IR: user kernels (ops become kiln.custom), library kernels (kiln.impl)"
    options = (Option("device", str, "cpu", "the device whose registered kernels are chosen"),
               Option("builtin", int, 1, "1: choose kiln's library kernels too (kiln.impl); 0: user kernels only"))

    def run(self, module) -> None:
        from .user import kiln_decompositions

        device = self.option("device")
        entries = user_entries(device)
        decompositions = kiln_decompositions()
        library = library_entries(device) if self.option("builtin") else {}
        if not entries and not decompositions and not library:
            return
        for fn in module.regions[0].blocks[0].operations:
            fn = fn.operation
            if fn.name != "func.func" or not len(fn.regions[0].blocks):
                continue
            for op in list(fn.regions[0].blocks[0].operations):
                op = op.operation
                if op.name == "kiln.fused":  # its body's ops are lowered in place: library kernels only
                    inner = [o.operation for o in op.regions[0].blocks[0].operations]
                    chosen = [(o, self._library(o, library)) for o in inner]
                    for o, entry in chosen:
                        if entry is not None and entry.impl.epilogue is not None:
                            self._epilogue(entry, entry.impl.epilogue(o))
                elif op.name not in _SKIP and not self._user(op, entries, decompositions):
                    self._library(op, library)

    def _user(self, op, entries, decompositions) -> bool:
        """Replace ``op`` with its user decomposition or kernel; whether it did."""
        from ..dialects.kiln import create_op
        from .user import decompose_kiln_op

        if op.name in decompositions:
            with ir.InsertionPoint(op), op.location:
                if decompose_kiln_op(op, decompositions[op.name]):
                    self.bump("user decompositions")
                    return True
        entry = _choose(op, entries[op.name]) if op.name in entries else None
        if entry is None:
            return False
        attrs = op_attributes(op)
        with ir.InsertionPoint(op):
            new = create_op("custom", list(op.operands), results=[r.type for r in op.results],
                            loc=op.location, attrs={
                                "op_name": op.name, "kernel": entry.name,
                                "attrs": ir.DictAttr.get(attrs) if attrs else None})
        for old, r in zip(op.results, new.operation.results):
            old.replace_all_uses_with(r)
        op.erase()
        self.bump("user kernels")
        return True

    def _library(self, op, library):
        """Mark ``op`` with the library kernel that fits it (and why), or unmark
        it; the entry chosen, or None."""
        for attr in (IMPL_ATTR, WHY_ATTR, EPILOGUE_ATTR, PARTS_ATTR):
            if attr in op.attributes:
                del op.attributes[attr]
        chosen = _choose_library(op, library[op.name]) if op.name in library else None
        if chosen is None:
            self._parts(op, library)
            return None
        op.attributes[IMPL_ATTR] = ir.StringAttr.get(chosen[0].name)
        op.attributes[WHY_ATTR] = ir.StringAttr.get(chosen[1])
        self.bump("library kernels")
        return chosen[0]

    def _parts(self, op, library) -> None:
        """Mark ``op``, left to generated code, with the entry its lowering calls for pieces of it, if one fits."""
        for entries in library.values():
            for e in entries:
                why = e.impl.parts[op.name](op.opview) if op.name in e.impl.parts else None
                if why is not None:
                    op.attributes[PARTS_ATTR] = ir.StringAttr.get(e.name)
                    op.attributes[WHY_ATTR] = ir.StringAttr.get(why)
                    self.bump("generated ops with library parts")
                    return

    def _epilogue(self, entry, steps) -> None:
        """Mark the ``(op, role)`` steps that ``entry``'s call applies after its op."""
        for op, role in steps:
            op.attributes[IMPL_ATTR] = ir.StringAttr.get(entry.name)
            op.attributes[WHY_ATTR] = ir.StringAttr.get(f"{role}: applied in {entry.name}'s call")
            op.attributes[EPILOGUE_ATTR] = ir.StringAttr.get(role)
            self.bump("epilogue steps")


def select_kernels(module, device: str = "cpu", builtin: bool = True) -> None:
    """Run ``kiln-select-kernels`` on ``module`` when there is anything to
    choose on ``device``: kernels or decompositions registered from user code,
    or (``builtin``) kiln's library kernels (no pass run otherwise)."""
    from .user import kiln_decompositions

    if not user_entries(device) and not kiln_decompositions() and not (builtin and library_entries(device)):
        return
    from ..pipelines import Pipeline

    Pipeline().add("kiln-select-kernels", device=device, builtin=int(builtin)).run(module, verify_each=None)


def select_user_kernels(module, device: str = "cpu") -> None:
    """:func:`select_kernels` for the kernels registered from user code only
    (before the graph passes, which may rewrite the ops library kernels take)."""
    select_kernels(module, device, builtin=False)
