"""Library kernels called from the kiln level: their entries, and the call's marshalling.

A :class:`LibraryCall` is a registry entry's implementation on the CPU: a
native C function (``runtime/native/``) and its signature, written as a
list of :class:`Arg` (a pointer to an operand, its address and strides as it
lies, a product of an operand's dims, a constant computed from the op's
attributes and shapes, the pool's thread count).
``kiln-select-kernels`` chooses it for a kiln op (the op gets ``kiln.impl``,
the entry's name, and ``kiln.why``); ``convert-kiln-to-linalg`` lowers the
chosen op to one *destination-passing placeholder*: a ``linalg.generic``
whose ``library_call`` names the entry, whose operands are the op's
(``kiln.call_args`` names them, ``kiln.call_attrs`` holds the op's
attributes) and whose payload is never run.  It is there so that one-shot
bufferization places the call's output like any other op's (straight into
the kernel's result buffer) and keeps its inputs intact until it runs (the
payload uses every input for that: an unused block argument counts as an
operand not read).
After bufferization :func:`lower_library_calls` (``kiln-cpu-library-calls``)
replaces each placeholder with a call of a helper generated from the
entry's signature: no structure is recognised, the choice was made on kiln
IR.  (IREE's ukernel ops play the same part; upstream linalg's
``library_call`` attribute names the function to call instead of the loops.)

Operands the C function reads as dense rows (every :func:`pointer` argument) are
copied into a contiguous buffer first when bufferization gave them a
strided layout (a slice, a transpose view), and a strided output is written
through a contiguous buffer copied back: the entry is correct for any
layout, and free for the usual one.  (The copies are ``linalg.copy``, which
lowers to loops: ``memref.copy`` of a strided view calls the ``memrefCopy``
runtime function, which the wheel's ExecutionEngine lacks.)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..._mlir import ir
from ...conversions.kiln_to_linalg.library_call import CALL_ARGS, CALL_ATTRS, LIBRARY_CALL
from ...errors import PipelineError, VerifyError
from ...pipelines.registry import Pass, register_pass

__all__ = [
    "Arg",
    "LibraryCall",
    "Site",
    "address",
    "array",
    "f32",
    "i32",
    "i64",
    "library_call_of",
    "lower_library_calls",
    "pointer",
    "register",
    "size",
    "stride",
    "threads",
    "unlowered",
]


@dataclass(frozen=True)
class Site:
    """What an entry's argument functions see of one call: the op's attributes
    (defaults filled in) and the shapes of its operands present, by name (None
    for a dynamic dim)."""

    attrs: dict
    shapes: dict[str, list[int | None]]
    dtypes: dict[str, str] = field(default_factory=dict)  # element types by name ("f32", "i1")

    def rank(self, name: str) -> int:
        """The rank of operand ``name``."""
        return len(self.shapes[name])


@dataclass(frozen=True)
class Arg:
    """One argument of a library entry point's C signature (see :func:`pointer`, :func:`size`, ...)."""

    kind: str  # "pointer", "address", "stride", "size", "array", "i64", "i32", "f32", "threads"
    operand: str | None = None
    #: size: ``fn(site)`` -> the dims whose product it is; stride: ``fn(site)`` -> the dim (None: 0);
    #: array: ``fn(site)`` -> ``(operand, dims)`` per element.
    dims: Callable[[Site], Any] | None = None
    value: Callable[[Site], Any] | None = None  # i64 / i32 / f32: ``fn(site)``

    @property
    def c_type(self) -> str:
        """The argument's MLIR type in the call (pointers and sizes as i64)."""
        return {"f32": "f32", "threads": "i32", "i32": "i32"}.get(self.kind, "i64")


def pointer(operand: str) -> Arg:
    """The aligned address of ``operand`` as an i64, read as dense rows (a
    strided view is copied into a dense buffer first); 0 when an optional
    operand is absent."""
    return Arg("pointer", operand)


def address(operand: str) -> Arg:
    """The address of ``operand``'s first element as an i64, as it lies (with
    :func:`stride`: the function reads it through its strides); 0 when absent."""
    return Arg("address", operand)


def stride(operand: str, dim: Callable[[Site], int | None]) -> Arg:
    """The stride in elements of ``operand``'s dim ``dim(site)``, read at run
    time; 0 where ``dim`` gives None (the function broadcasts it)."""
    return Arg("stride", operand, dims=dim)


def size(operand: str, dims: Sequence[int] | Callable[[Site], Sequence[int]]) -> Arg:
    """The product of ``operand``'s ``dims`` (a list, or ``fn(site)``) as an i64."""
    return Arg("size", operand, dims=dims if callable(dims) else (lambda site, d=tuple(dims): d))


def array(items: Callable[[Site], Sequence[tuple[str, Sequence[int]]]]) -> Arg:
    """The address of an i64 array on the helper's stack: for each
    ``(operand, dims)`` of ``items(site)``, the product of those dims of that
    operand (sizes and dense strides read at run time)."""
    return Arg("array", dims=items)


def i64(value: Callable[[Site], int]) -> Arg:
    """An i64 constant computed from the call site (its attributes and shapes)."""
    return Arg("i64", value=value)


def i32(value: Callable[[Site], int]) -> Arg:
    """An i32 constant computed from the call site."""
    return Arg("i32", value=value)


def f32(value: Callable[[Site], float]) -> Arg:
    """An f32 constant computed from the call site."""
    return Arg("f32", value=value)


def threads() -> Arg:
    """The native pool's size, asked at run time (the code serves any pool size)."""
    return Arg("threads")


@dataclass(frozen=True)
class LibraryCall:
    """A native function that implements a kiln op: registered as a CPU
    entry of the kernel registry (:func:`register`) and called from the
    code of the kernels that hold the op."""

    name: str  # the entry's name, "native.layer_norm"
    symbol: str  # the C function
    args: tuple[Arg, ...]
    #: ``why(op) -> str | None``: why this entry fits a kiln op (None: it does not).
    why: Callable = field(compare=False, default=lambda op: "always")
    #: Operands the op may lack (its optional ones): their pointer is 0.
    optional: tuple[str, ...] = ()
    #: The C function's result type (ignored), or None.
    returns: str | None = None
    #: The op's own contraction is the placeholder (a product: kiln.matmul ...,
    #: :data:`~kiln.conversions.kiln_to_linalg.library_call.CONTRACTIONS`), and
    #: kiln-cpu-lowp-gemm generates its helper from the contraction's maps
    #: (:mod:`.lowp_gemm`); ``args`` is empty.
    contraction: bool = False
    #: Whether it needs kiln's native runtime (else the BLAS library alone: the library GEMM).
    native: bool = True
    #: ``epilogue(op) -> [(consumer op, role), ...]``: the ops after ``op`` (in
    #: a fused group) that the call applies itself (:mod:`.epilogues`), or None.
    epilogue: Callable | None = field(compare=False, default=None)
    #: ``{kiln op: why(op) -> str | None}``: ops left to generated code whose
    #: lowering calls this entry for pieces of them (the products of a
    #: generated attention), and why (None: not for this op).
    parts: dict = field(compare=False, default_factory=dict)

    def declaration(self) -> str:
        """The ``func.func private`` declaration of the C function."""
        result = f" -> {self.returns}" if self.returns else ""
        return f"func.func private @{self.symbol}({', '.join(a.c_type for a in self.args)}){result}"

    def helper_text(self, helper: str, operands: dict[str, ir.Type | None], attrs: dict,
                    outputs: Sequence[str] = ()) -> str:
        """A function ``@helper`` taking the placeholder's memrefs (``operands``
        by name, in order; None for an absent optional one; ``outputs`` the
        names of those it writes) that computes this entry's arguments and
        calls it."""
        from .library import _is_contiguous, add_pointer, pool_threads_line, strided_pointers

        present = [(n, t) for n, t in operands.items() if t is not None]
        site = Site(attrs, {n: [None if ir.ShapedType.is_dynamic_size(d) else d for d in ir.MemRefType(t).shape]
                            for n, t in present},
                    {n: str(ir.MemRefType(t).element_type) for n, t in present})
        lines = [f"func.func private @{helper}({', '.join(f'%{n}: {t}' for n, t in present)}) {{"]
        add = lines.append
        dense = {}  # name -> (SSA name of the memref the function reads, its type)
        copies, copies_back = [], []
        pointed = {a.operand for a in self.args if a.kind == "pointer"}
        for i, (n, t) in enumerate(present):
            mt = ir.MemRefType(t)
            if n not in pointed or _is_contiguous(mt):
                dense[n] = (n, t)
                continue
            # A strided view: read (and write) the entry's rows through a dense buffer.
            flat = ir.MemRefType.get(mt.shape, mt.element_type)
            sizes = []
            for k, d in enumerate(mt.shape):
                if ir.ShapedType.is_dynamic_size(d):
                    add(f"  %cc{i}_{k} = arith.constant {k} : index")
                    add(f"  %cd{i}_{k} = memref.dim %{n}, %cc{i}_{k} : {t}")
                    sizes.append(f"%cd{i}_{k}")
            add(f"  %{n}_dense = memref.alloc({', '.join(sizes)}) {{alignment = 64 : i64}} : {flat}")
            if n in outputs:
                copies_back.append((n, t, flat))
            else:
                add(f"  linalg.copy ins(%{n} : {t}) outs(%{n}_dense : {flat})")
            dense[n] = (f"{n}_dense", flat)
            copies.append((n, flat))
        metadata = set()
        values = []
        for j, a in enumerate(self.args):
            values.append(f"%a{j}")
            if a.kind == "pointer":
                name, t = dense.get(a.operand, (None, None))
                add_pointer(add, f"a{j}", t, arg=name)
                values[-1] = f"%pa{j}"
            elif a.kind in ("address", "stride"):
                if a.operand not in dense:  # absent
                    add(f"  %a{j} = arith.constant 0 : i64")
                    continue
                name, t = dense[a.operand]
                if name not in metadata:  # %o<name>, %t<name>#i, %p<name>
                    strided_pointers(add, {name: ir.MemRefType(t)})
                    metadata.add(name)
                if a.kind == "address":
                    width = max(1, ir.MemRefType(t).element_type.width // 8)  # i1: a byte in memory
                    add(f"  %a{j}_o = arith.index_cast %o{name} : index to i64")
                    add(f"  %a{j}_w = arith.constant {width} : i64")
                    add(f"  %a{j}_b = arith.muli %a{j}_o, %a{j}_w : i64")
                    add(f"  %a{j} = arith.addi %p{name}, %a{j}_b : i64")
                else:
                    k = a.dims(site)
                    add(f"  %a{j} = arith.constant 0 : i64" if k is None else
                        f"  %a{j} = arith.index_cast %t{name}#{k} : index to i64")
            elif a.kind == "size":
                add(f"  %a{j} = arith.index_cast {_product(add, f'a{j}', *dense[a.operand], a.dims(site))} "
                    ": index to i64")
            elif a.kind == "array":
                items = list(a.dims(site))
                buf = f"memref<{len(items)}xi64>"
                add(f"  %a{j}_buf = memref.alloca() : {buf}")
                for i, (operand, dims) in enumerate(items):
                    v = _product(add, f"a{j}_{i}", *dense[operand], dims)
                    add(f"  %a{j}_{i}_v = arith.index_cast {v} : index to i64")
                    add(f"  %a{j}_{i}_at = arith.constant {i} : index")
                    add(f"  memref.store %a{j}_{i}_v, %a{j}_buf[%a{j}_{i}_at] : {buf}")
                add_pointer(add, f"a{j}", buf, arg=f"a{j}_buf")
                values[-1] = f"%pa{j}"
            elif a.kind in ("i64", "i32"):
                add(f"  %a{j} = arith.constant {int(a.value(site))} : {a.kind}")
            elif a.kind == "f32":
                add(f"  %a{j} = arith.constant {float(a.value(site)):.9e} : f32")
            else:
                add(pool_threads_line(f"%a{j}"))
        types = ", ".join(a.c_type for a in self.args)
        if self.returns:
            add(f"  %rc = func.call @{self.symbol}({', '.join(values)}) : ({types}) -> {self.returns}")
        else:
            add(f"  func.call @{self.symbol}({', '.join(values)}) : ({types}) -> ()")
        for n, t, flat in copies_back:
            add(f"  linalg.copy ins(%{n}_dense : {flat}) outs(%{n} : {t})")
        for n, flat in copies:
            add(f"  memref.dealloc %{n}_dense : {flat}")
        add("  return")
        add("}")
        return "\n".join(lines)


def _product(add, tag: str, name: str, t, dims) -> str:
    """Emit the product of memref ``%name``'s ``dims`` (an index value; 1 for
    none) under SSA names starting ``%<tag>``; its name."""
    mt = ir.MemRefType(t)
    add(f"  %{tag}_0 = arith.constant 1 : index")
    acc = f"%{tag}_0"
    for k in dims:
        d = mt.shape[k]
        if ir.ShapedType.is_dynamic_size(d):
            add(f"  %{tag}_c{k} = arith.constant {k} : index")
            add(f"  %{tag}_d{k} = memref.dim %{name}, %{tag}_c{k} : {t}")
        else:
            add(f"  %{tag}_d{k} = arith.constant {d} : index")
        add(f"  %{tag}_m{k} = arith.muli {acc}, %{tag}_d{k} : index")
        acc = f"%{tag}_m{k}"
    return acc


def register(op: str, call: LibraryCall, registry, dtypes: Sequence[str] = ("f32",), priority: int = 1) -> None:
    """Register ``call`` in ``registry`` as the CPU library kernel of kiln op
    ``op`` (chosen by ``kiln-select-kernels`` when its dtype is one of
    ``dtypes`` and ``call.why`` gives a reason).  Kernels registered from
    user code rank above it (priority 10 by default)."""
    from ..registry import KernelEntry

    registry.register(KernelEntry(op=op, device="cpu", impl=call, name=call.name, dtypes=tuple(dtypes),
                                  priority=priority, applies=lambda view: call.why(view) is not None))


def library_call_of(name: str):
    """The registry entry of the library call named ``name`` (its ``impl`` a
    :class:`LibraryCall`; None when there is none)."""
    from ..registry import REGISTRY

    REGISTRY.load_builtins()
    for e in REGISTRY.entries:
        if e.name == name and isinstance(e.impl, LibraryCall):
            return e
    return None


def _decoded(op_name: str, attrs: ir.DictAttr) -> dict:
    """The kiln op's declared attributes from a placeholder's ``kiln.call_attrs``,
    decoded as the op decodes them (:meth:`decoded_attrs`; absent: the default)."""
    from ...dialects.kiln import OPS
    from ...dialects.kiln.base import decode_attr

    present = {a.name: a.attr for a in attrs}
    return {name: decode_attr(spec, present[name], name) if name in present else spec.default
            for name, spec in OPS[op_name].ATTRS.items()}


def _placeholders(module) -> list:
    found = []

    def visit(op):
        if op.name == "linalg.generic" and LIBRARY_CALL in op.attributes and CALL_ARGS in op.attributes:
            found.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return found


def lower_library_calls(module) -> int:
    """Replace every library-call placeholder of ``module`` (bufferized) with
    a call of a helper generated from its entry's signature; the count.
    A placeholder naming no registered entry is a :class:`PipelineError`."""
    from ..._mlir import func
    from .library import function_names, insert_helpers, unique_name

    found = _placeholders(module)
    if not found:
        return 0
    names = function_names(module.operation)
    texts, calls = [], []
    declared = set()
    for i, op in enumerate(found):
        entry = ir.StringAttr(op.attributes[LIBRARY_CALL]).value
        registered = library_call_of(entry)
        if registered is None:
            op.location.emit_error(f"library call '{entry}' is not a registered CPU library kernel")
            raise PipelineError("kiln-cpu-library-calls failed")
        call = registered.impl
        if call.contraction:
            op.location.emit_error(f"library call '{entry}' takes the op's contraction as its placeholder, not "
                                   f"{CALL_ARGS}")
            raise PipelineError("kiln-cpu-library-calls failed")
        if call.symbol not in names and call.symbol not in declared:
            texts.append(call.declaration())
            declared.add(call.symbol)
        arg_names = [ir.StringAttr(a).value for a in ir.ArrayAttr(op.attributes[CALL_ARGS])]
        try:
            attrs = _decoded(registered.op, ir.DictAttr(op.attributes[CALL_ATTRS]))
        except VerifyError as e:
            op.location.emit_error(f"library call '{entry}': {e.message}")
            raise PipelineError("kiln-cpu-library-calls failed") from None
        wanted = {a.operand for a in call.args if a.operand is not None}
        types = dict(zip(arg_names, (v.type for v in op.operands)))
        missing = sorted(wanted - set(types) - set(call.optional))  # an absent optional one's pointer is 0
        if missing or len(arg_names) != len(op.operands):
            op.location.emit_error(f"library call '{entry}' needs operand(s) {missing} that {CALL_ARGS} = "
                                   f"{arg_names} does not name")
            raise PipelineError("kiln-cpu-library-calls failed")
        helper = unique_name(f"{call.symbol}_{i}", names)
        outputs = arg_names[len(arg_names) - len(op.opview.outputs):]
        texts.append(call.helper_text(helper, {n: types.get(n) for n in _ordered(arg_names, wanted)}, attrs,
                                      outputs))
        calls.append((helper, op))
    insert_helpers(module.operation, texts)
    for helper, op in calls:
        with ir.InsertionPoint(op), op.location:
            func.CallOp([], ir.FlatSymbolRefAttr.get(helper), list(op.operands))
        op.erase()
    return len(calls)


def _ordered(present: list[str], wanted: set[str]) -> list[str]:
    """The helper's parameters: the placeholder's operands in order (every
    one is passed), then the absent optional ones the entry points at."""
    return present + sorted(wanted - set(present))


def unlowered(module) -> list:
    """Placeholders still in ``module`` (kiln-cpu-to-llvm refuses them: their loops would compute nothing)."""
    return _placeholders(module)


@register_pass
class CpuLibraryCalls(Pass):
    """Lower library-call placeholders (bufferized) to calls of the registered native functions."""

    name = "kiln-cpu-library-calls"
    summary = "Replace each library-call placeholder (a kiln op chosen for a library kernel) with its native call"

    def run(self, module) -> None:
        n = lower_library_calls(module)
        if n:
            self.bump("library calls", n)
