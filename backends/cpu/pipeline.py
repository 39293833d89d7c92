"""The CPU lowering as named stages: linalg on tensors → LLVM dialect.

Each stage is a registered kiln pass, so ``kiln-opt --pass-pipeline`` and
``kiln-compile --stop-after=<stage>`` reproduce any step from a file:

1. ``kiln-cpu-prepare``: drop ``kiln.symbol`` declarations, turn every
   function into destination-passing style (one ``memref`` argument per
   result, written with ``bufferization.materialize_in_destination``; no
   buffer escapes, MLIR_NOTES sharp edge 17) and mark it
   ``llvm.emit_c_interface``.
2. ``kiln-cpu-vectorize``: generalize named linalg ops to generics (one
   form for every contraction; a library kernel's placeholder is a generic
   already) and let the
   float arithmetic of reductions reassociate; the loops are vectorized by
   LLVM at ``-O3`` -- which is why f32 ``exp``/``erf``/``tanh``
   are arith polynomials, not libm calls.  No MLIR-level tiling yet
   (``level=0`` turns the stage off).
3. ``kiln-cpu-bufferize``: elementwise epilogues write into the product
   they read (:func:`epilogues_in_place`), then one-shot bufferization
   with identity layouts at function boundaries and the buffer
   deallocation pipeline (internal buffers are freed before returning).
4. ``kiln-cpu-library-calls``: the library kernels kiln-select-kernels
   chose on kiln IR (their placeholders) become native calls
   (:mod:`.calls`); then ``kiln-cpu-library`` gives the f32 products and
   convolutions chosen there to OpenBLAS / the native GEMMs
   (:mod:`.contractions`), and ``kiln-cpu-lowp-gemm`` the bf16 / f16,
   int8-weight and integer ones to the native low-precision GEMMs.
5. ``kiln-cpu-flatten-elementwise``: elementwise generics over contiguous
   buffers of one shape as one loop over rank-1 views (:mod:`.flatten`), so
   LLVM vectorizes one long loop rather than a nest over a short last dim.
6. ``kiln-cpu-to-llvm``: loops → cf → LLVM dialect (math through libm where
   LLVM has no intrinsic; bf16 rounding as integer ops, which needs no
   runtime library); a placeholder left over is an error.

``kiln-cpu-lower`` runs them all.
"""

from __future__ import annotations

import re

from ..._mlir import ir, passmanager
from ...context import DiagnosticCollector
from ...errors import Diagnostic, PipelineError, UnsupportedError, diagnostic_from_mlir
from ...module import ops_where
from ...pipelines.registry import Option, Pass, register_pass
from .buffers import indexing_maps

__all__ = ["BUFFERIZE", "TO_LLVM", "CpuLower", "prepare_module", "run_upstream"]

# eliminate-empty-tensors computes each result straight into its output
# buffer.  After CSE one tensor.empty (or its zero fill) can feed several
# results, and eliminating it into one output made two results share that
# buffer (wrong values): :func:`unshare_output_inits` gives every result's
# init chain (a fill or broadcast and its empty, ...) to itself first.
BUFFERIZE = (
    "eliminate-empty-tensors,"
    "one-shot-bufferize{bufferize-function-boundaries function-boundary-type-conversion=identity-layout-map},"
    "canonicalize,"
    "buffer-deallocation-pipeline,"
    "canonicalize"
)

# 16-bit float math and bf16 arithmetic computed in f32
# (math-extend-to-supported-types, arith-emulate-unsupported-floats), and the
# f32 -> bf16 rounding (and bf16 -> f32) as integer ops (arith-expand).  Left
# to LLVM, bf16 arithmetic is promoted to f32 and rounded back by a call of
# __truncsfbf2 (compiler-rt, libgcc >= 13) on a CPU without AVX512-BF16, which
# the JIT cannot resolve ("Symbols not found": every bf16 model failed on AVX2
# hosts).  Always, not per host: the same IR everywhere, the same numbers as
# LLVM's promotion, and a few integer ops per element of memory-bound kernels.
# (f16 rounding stays LLVM's: F16C's vcvtps2ph, on every x86-64 with AVX2.)
HALF_IN_F32 = (
    "func.func(math-extend-to-supported-types{target-type=f32},"
    "arith-emulate-unsupported-floats{source-types=bf16 target-type=f32},"
    "arith-expand{include-bf16=true})"
)

TO_LLVM = (
    "convert-linalg-to-loops,"
    f"{HALF_IN_F32},"
    "expand-strided-metadata,"
    "lower-affine,"
    "convert-scf-to-cf,"
    "func.func(convert-math-to-llvm),"
    "convert-math-to-libm,"
    "finalize-memref-to-llvm,"
    "convert-arith-to-llvm,"
    "convert-func-to-llvm,"
    "convert-cf-to-llvm,"
    "convert-ub-to-llvm,"
    "reconcile-unrealized-casts"
)

VECTORIZE = "func.func(linalg-generalize-named-ops),canonicalize,cse"


_NOT_LEGALIZED = re.compile(r"failed to legalize operation '([\w.]+)'[^:]*: (.*)", re.S)


def _unlowered(diags: list[Diagnostic]) -> UnsupportedError | None:
    """An UnsupportedError naming the op, its types and its location for
    the first "failed to legalize operation" diagnostic (an op this lowering
    has no pattern for); None when there is none."""
    for d in diags:
        m = _NOT_LEGALIZED.match(d.message)
        if m is None:
            continue
        name, printed = m.groups()
        # The printed op ends with its type: `... : (i32, i32) -> i32`.
        types = printed.rsplit(" : ", 1)[1].strip() if " : " in printed else "its operand types"
        message = f"the CPU backend cannot lower '{name}' on {types}"
        where = f" at {d.location}" if d.location and d.location != "loc(unknown)" else ""
        return UnsupportedError(f"{message}{where}", [Diagnostic("error", d.location, message, file=d.file,
                                                                line=d.line, col=d.col)])
    return None


def run_upstream(module, text: str, stage: str) -> None:
    """Run upstream pipeline ``text`` on ``module``; PipelineError with diagnostics on failure
    (UnsupportedError naming the op when an op has no lowering)."""
    ctx = module.context
    with DiagnosticCollector(ctx) as collector:
        try:
            pm = passmanager.PassManager.parse(f"builtin.module({text})", ctx)
            pm.run(module)
        except ir.MLIRError as e:
            diags = [diagnostic_from_mlir(d) for d in e.error_diagnostics] or collector.errors
            unlowered = _unlowered(diags)
            if unlowered is not None:
                raise unlowered from None
            raise PipelineError(f"{stage} failed", diags) from None


def _densify(module) -> None:
    """Rank-0 and i1 ``dense_resource`` constants (from any input, not only
    convert-kiln-to-linalg's) as plain dense attributes: upstream
    finalize-memref-to-llvm loops forever on a rank-0 resource global, the
    LLVM translation rejects an i1 one."""
    from ...conversions.kiln_to_linalg.common import densify_resources
    from ...errors import ConversionError

    try:
        densify_resources(module)
    except ConversionError as e:
        raise PipelineError(e.message) from None


def _functions(module):
    for op in module.regions[0].blocks[0].operations:
        if op.operation.name == "func.func" and len(op.operation.regions[0].blocks):
            yield op.operation


def _is_linalg_result(v: ir.Value) -> bool:
    owner = v.owner
    return isinstance(owner, (ir.Operation, ir.OpView)) and getattr(owner, "name", "").startswith("linalg.")


def prepare_module(module) -> None:
    """Stage ``kiln-cpu-prepare`` (see the module docstring)."""
    from ...conversions.kiln_to_linalg.common import copy_contiguous

    _densify(module)
    body = module.regions[0].blocks[0]
    for op in list(body.operations):
        name = op.operation.name
        if name == "kiln.symbol":
            op.operation.erase()
    bad = [op.name for op in ops_where(module, lambda op: op.name.startswith("kiln."))]
    if bad:
        raise UnsupportedError(
            f"the CPU backend cannot run '{bad[0]}' (lower kiln ops with convert-kiln-to-linalg first; "
            "kiln.fallback ops run in the runtime, not in a CPU kernel)"
        )
    for fn in _functions(module):
        # Checked for every function before any is changed: each result
        # becomes a memref output argument, so it must be a ranked tensor.
        for t in ir.FunctionType(ir.TypeAttr(fn.attributes["function_type"]).value).results:
            if not isinstance(t, ir.RankedTensorType):
                raise UnsupportedError(f"the CPU backend cannot return {t} from "
                                       f"@{ir.StringAttr(fn.attributes['sym_name']).value}: results must be ranked tensors")
    for fn in _functions(module):
        block = fn.regions[0].blocks[0]
        ftype = ir.FunctionType(ir.TypeAttr(fn.attributes["function_type"]).value)
        ret = block.operations[len(block.operations) - 1]
        outs = []
        with fn.location:
            for t in ftype.results:
                rt = ir.RankedTensorType(t)
                mt = ir.MemRefType.get(rt.shape, rt.element_type)
                outs.append(block.add_argument(mt, fn.location))
            donated = _donate_arguments(fn, block, outs)
            ip = ir.InsertionPoint(ret)
            seen: list = []
            with ip:
                for j, (v, out) in enumerate(zip(list(ret.operands), outs)):
                    orig = v
                    if j in donated:  # computed in its output buffer already (an in-place update)
                        pass
                    elif not _is_linalg_result(v) or any(v == s for s in seen):
                        # Copy, so the result is computed straight into the
                        # caller's buffer (no memref.copy of strided views).
                        v = copy_contiguous(v)
                    seen.append(orig)
                    ir.Operation.create(
                        "bufferization.materialize_in_destination",
                        operands=[v, out],
                        attributes={"restrict": ir.UnitAttr.get(), "writable": ir.UnitAttr.get()},
                    )
                ir.Operation.create("func.return", operands=[])
            ret.erase()
        fn.attributes["function_type"] = ir.TypeAttr.get(
            ir.FunctionType.get(list(ftype.inputs) + [o.type for o in outs], [])
        )
        # The results become output arguments: their attributes (kiln.name)
        # move along, or func.func's verifier counts res_attrs against 0 results.
        res_attrs = list(ir.ArrayAttr(fn.attributes["res_attrs"])) if "res_attrs" in fn.attributes else []
        if res_attrs:
            del fn.attributes["res_attrs"]
        if outs and ("arg_attrs" in fn.attributes or res_attrs):
            args = (list(ir.ArrayAttr(fn.attributes["arg_attrs"])) if "arg_attrs" in fn.attributes
                    else [ir.DictAttr.get({}) for _ in ftype.inputs])
            outs_attrs = res_attrs if len(res_attrs) == len(outs) else [ir.DictAttr.get({}) for _ in outs]
            fn.attributes["arg_attrs"] = ir.ArrayAttr.get(args + outs_attrs)
        fn.attributes["llvm.emit_c_interface"] = ir.UnitAttr.get()


def _donate_arguments(fn, block, outs) -> set[int]:
    """Buffer donation (``kiln.inplace``, set by :func:`kiln.compile_prepare.donations`):
    the runtime passes result ``j``'s output buffer as argument ``k`` too,
    so argument ``k`` is read as that buffer (``to_tensor restrict writable``)
    and bufferization writes the result's update into it in place instead of
    copying the argument first.  Returns the results so made."""
    if "kiln.inplace" not in fn.attributes:
        return set()
    marks = [int(k) for k in ir.DenseI64ArrayAttr(fn.attributes["kiln.inplace"])]
    done = set()
    for j, k in enumerate(marks):
        if k < 0 or j >= len(outs):
            continue
        arg = block.arguments[k]
        with ir.InsertionPoint.at_block_begin(block):
            view = ir.Operation.create(
                "bufferization.to_tensor", results=[arg.type], operands=[outs[j]],
                attributes={"restrict": ir.UnitAttr.get(), "writable": ir.UnitAttr.get()},
            ).result
        arg.replace_all_uses_with(view)
        done.add(j)
    del fn.attributes["kiln.inplace"]
    return done


def _owner_op(v: ir.Value):
    owner = v.owner
    if isinstance(owner, ir.OpView):
        owner = owner.operation
    return owner if isinstance(owner, ir.Operation) else None


def _uses(v: ir.Value) -> int:
    return sum(1 for _ in v.uses)


# Ops other than linalg ones (whose init aliases each result) that
# eliminate-empty-tensors traces a destination through: the aliasing operand.
_ALIASING = {"tensor.expand_shape": 0, "tensor.collapse_shape": 0, "tensor.cast": 0, "tensor.insert_slice": 1}


def _destination_chain(value: ir.Value):
    """The links ``(op, operand slot, result index)`` from ``value``'s
    producer back along destination operands to a ``tensor.empty`` (the last
    op, slot None), as eliminate-empty-tensors follows them; None when the
    chain ends elsewhere (nothing is eliminated then)."""
    links = []
    while True:
        op = _owner_op(value)
        if op is None:
            return None
        if op.name == "tensor.empty":
            links.append((op, None, 0))
            return links
        index = [i for i, r in enumerate(op.results) if r == value][0]
        if op.name.startswith("linalg."):
            slot = len(op.operands) - len(op.results) + index
        elif op.name in _ALIASING:
            slot = _ALIASING[op.name]
        else:
            return None
        links.append((op, slot, index))
        value = op.operands[slot]


def _writing_uses(v: ir.Value) -> int:
    """Uses of ``v`` that may bufferize to a write of its buffer: all but a
    linalg op's input, ``tensor.extract`` and ``tensor.dim``."""
    count = 0
    for use in v.uses:
        user = use.owner.operation if isinstance(use.owner, ir.OpView) else use.owner
        if user.name in ("tensor.extract", "tensor.dim"):
            continue
        if user.name.startswith("linalg.") and use.operand_number < len(user.operands) - len(user.results):
            continue
        count += 1
    return count


def _cheap_to_clone(op, slot) -> bool:
    """An init producer no dearer than a copy: ``tensor.empty``, a reshape,
    a fill, or an elementwise generic that does not read its init."""
    if slot is None or op.name in _ALIASING or op.name == "linalg.fill":
        return True
    if op.name != "linalg.generic" or not _all_parallel(op):
        return False
    n_in = len(op.operands) - len(op.results)
    return not list(op.regions[0].blocks[0].arguments[slot].uses) and slot >= n_in


def unshare_output_inits(module) -> None:
    """Give each function result's producer a destination chain (its init,
    that init's init, ... down to a ``tensor.empty``) used by nothing else.

    eliminate-empty-tensors replaces the chain's ``tensor.empty`` with the
    output argument (``to_tensor restrict``), and one-shot bufferization
    does not see ``materialize_in_destination``'s write of that memref as a
    conflict: when CSE merged two results' inits (two same-shape reductions'
    zero fills, two products' bias broadcasts), one result computed into the
    other's output buffer and the later copy-out overwrote it (both results
    came back equal).  A chain of cheap ops (empty, fill, elementwise,
    reshapes) is cloned for the result; otherwise its init is a fresh copy.
    """
    from ...conversions.kiln_to_linalg.common import copy_contiguous

    for fn in _functions(module):
        block = fn.regions[0].blocks[0]
        for op in list(block.operations):
            if op.operation.name != "bufferization.materialize_in_destination":
                continue
            links = _destination_chain(op.operation.operands[0])
            if not links or len(links) < 2:
                continue
            producer, slot, _ = links[0]
            # Every value the chain passes through below the producer's
            # result must have one use that may write it (the next op up
            # the chain); other ops may only read it.
            if all(_writing_uses(link.results[index]) == 1 for link, _, index in links[1:]):
                continue
            with ir.InsertionPoint(producer), producer.location:
                if all(_cheap_to_clone(link, s) for link, s, _ in links[1:]):
                    value = None
                    for link, s, index in reversed(links[1:]):
                        clone = link.clone(ip=ir.InsertionPoint(producer))
                        if s is not None:
                            clone.operands[s] = value
                        value = clone.results[index]
                else:
                    value = copy_contiguous(producer.operands[slot])
            producer.operands[slot] = value


def _all_parallel(op) -> bool:
    return all("parallel" in str(a) for a in ir.ArrayAttr(op.attributes["iterator_types"]))


def epilogues_in_place(module) -> int:
    """Let an elementwise ``linalg.generic`` that does not read its init
    write into the tensor of an input it reads element for element -- the
    result of a matrix product or another generic, used only there -- instead
    of a fresh ``tensor.empty``; the number of generics rewritten.

    Bufferization then computes both in one buffer (an elementwise access
    may overwrite what it reads), and eliminate-empty-tensors traces that
    buffer back to the function's output argument: a kernel's matmul +
    bias (+ GELU) used to multiply into a ``malloc``'d temporary each call
    and copy it out through the bias add.

    4-D values are left as they are: a convolution's residual add and ReLU
    steps are folded into its ``kiln_conv2d`` call by ``kiln-cpu-library``
    (:func:`kiln.backends.cpu.conv.conv_epilogue`), which takes them
    writing buffers of their own.
    """
    rewritten = 0
    for fn in _functions(module):
        for op in list(fn.regions[0].blocks[0].operations):
            op = op.operation
            if op.name != "linalg.generic" or len(op.results) != 1 or not _all_parallel(op):
                continue
            maps = indexing_maps(op)
            n_in = len(op.operands) - 1
            body = op.regions[0].blocks[0]
            init, out_map = op.operands[n_in], maps[n_in]
            if not out_map.is_permutation or list(body.arguments[n_in].uses):
                continue  # the body reads the init: it is not a fresh destination
            init_op = _owner_op(init)
            if init_op is None or init_op.name != "tensor.empty" or ir.RankedTensorType(init.type).rank == 4:
                continue
            for i in range(n_in):
                value = op.operands[i]
                producer = _owner_op(value)
                if (maps[i] == out_map and value.type == init.type and producer is not None
                        and producer.name.startswith("linalg.") and _uses(value) == 1):
                    op.operands[n_in] = value
                    rewritten += 1
                    break
    return rewritten


def bufferize(module) -> None:
    """Stage ``kiln-cpu-bufferize``: epilogues in place, the results' inits unshared, then :data:`BUFFERIZE`."""
    epilogues_in_place(module)
    unshare_output_inits(module)
    run_upstream(module, BUFFERIZE, "kiln-cpu-bufferize")


def _c(i: int):
    from ..._mlir import arith

    return arith.constant(ir.IndexType.get(), i)


@register_pass
class CpuPrepare(Pass):
    """Destination-passing style, C interface, no kiln declarations left."""

    name = "kiln-cpu-prepare"
    summary = "Give every function one memref argument per result and mark it for the C interface"

    def run(self, module) -> None:
        prepare_module(module)


@register_pass
class CpuVectorize(Pass):
    """Prepare linalg on tensors for vectorized loops (generalize named ops)."""

    name = "kiln-cpu-vectorize"
    summary = "Generalize named linalg ops for library matching and LLVM loop vectorization (level 0: none)"
    options = (Option("level", int, 1, "0: no vectorization"),)

    def run(self, module) -> None:
        if self.option("level") > 0:
            run_upstream(module, VECTORIZE, self.name)
            reassociate_reductions(module)


#: The float ops of a reduction body that may be reassociated.
_REDUCTION_FLOAT_OPS = ("arith.addf", "arith.mulf", "arith.maximumf", "arith.minimumf", "arith.maxnumf",
                        "arith.minnumf")


def reassociate_reductions(module) -> int:
    """Mark the float arithmetic in the bodies of reducing ``linalg.generic``
    ops ``fastmath<reassoc, contract>``; the number of ops marked.

    LLVM vectorizes a float reduction loop (the sums and maxima of softmax,
    layer_norm, reduce_mean) only when it may reassociate it; without the
    flag every such loop runs one element at a time.  The results differ
    from the sequential sum by rounding only (summation order).
    """
    flags = ir.Attribute.parse("#arith.fastmath<reassoc,contract>")
    marked = 0

    def visit(op):
        nonlocal marked
        if op.name == "linalg.generic":
            iters = [str(a) for a in ir.ArrayAttr(op.attributes["iterator_types"])]
            if any("reduction" in it for it in iters):
                for inner in op.regions[0].blocks[0].operations:
                    if inner.operation.name in _REDUCTION_FLOAT_OPS:
                        inner.operation.attributes["fastmath"] = flags
                        marked += 1
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit) if hasattr(module, "operation") else module.walk(visit)
    return marked


@register_pass
class CpuBufferize(Pass):
    """One-shot bufferization and deallocation."""

    name = "kiln-cpu-bufferize"
    summary = "One-shot bufferize (identity layouts at function boundaries), then free internal buffers"

    def run(self, module) -> None:
        bufferize(module)


@register_pass
class CpuToLLVM(Pass):
    """Lower loops, memrefs, arith, math and func to the LLVM dialect."""

    name = "kiln-cpu-to-llvm"
    summary = "Lower bufferized linalg to the LLVM dialect"

    def run(self, module) -> None:
        _refuse_placeholders(module)
        _densify(module)
        run_upstream(module, TO_LLVM, self.name)


def _refuse_placeholders(module) -> None:
    """A library-call placeholder left here would lower to loops that compute
    nothing: an error at its op (kiln-cpu-library-calls lowers them)."""
    from .calls import LIBRARY_CALL, unlowered

    left = unlowered(module)
    for op in left:
        op.location.emit_error(f"library call '{ir.StringAttr(op.attributes[LIBRARY_CALL]).value}' was not "
                               "lowered: run kiln-cpu-library-calls after kiln-cpu-bufferize")
    if left:
        raise PipelineError("kiln-cpu-to-llvm failed")


#: The CPU stages in order (names of registered passes).
STAGES = ("kiln-cpu-prepare", "kiln-cpu-vectorize", "kiln-cpu-bufferize", "kiln-cpu-library-calls", "kiln-cpu-library",
          "kiln-cpu-lowp-gemm", "kiln-cpu-flatten-elementwise", "kiln-cpu-to-llvm")


@register_pass
class CpuLower(Pass):
    """The whole CPU lowering: prepare, vectorize, bufferize, library calls, to LLVM."""

    name = "kiln-cpu-lower"
    summary = "linalg on tensors -> LLVM dialect for the ExecutionEngine (all kiln-cpu-* stages)"
    options = (Option("vectorize", int, 1, "vectorization level (0: none)"),)

    def run(self, module) -> None:
        prepare_module(module)
        CpuVectorize(level=self.option("vectorize")).run(module)
        bufferize(module)
        from .calls import lower_library_calls
        from .contractions import CpuLibrary  # matrix products as OpenBLAS sgemm calls
        from .flatten import CpuFlattenElementwise
        from .lowp_gemm import CpuLowpGemm

        lower_library_calls(module)  # the library kernels kiln-select-kernels chose
        CpuLibrary().run(module)
        CpuLowpGemm().run(module)  # (it needs kiln-cpu-library's release function first)
        CpuFlattenElementwise().run(module)
        CpuToLLVM().run(module)
