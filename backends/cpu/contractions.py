"""``kiln-cpu-library``: the library GEMM and convolution placeholders of a bufferized module become calls.

The stage's driver: it finds each placeholder of the library GEMM or
convolution (:func:`~.library.is_gemm_placeholder`), asks the helpers'
writers for the call (:mod:`.gemm_text`: sgemm, the native small-M GEMM,
the weight-A GEMM; :mod:`.conv`: the native convolution with its im2col
folded in; :mod:`.conv_pair`: two convolutions in one call) and for the
work the call takes over (:mod:`.gemm_epilogue`, :mod:`.conv`), and rewrites
the module.  The helpers, constants and the placeholders' reading live in
:mod:`.library`, which imports none of these: no import circle.
"""

from __future__ import annotations

from ..._mlir import ir
from ...pipelines.registry import Option, Pass, register_pass
from .buffers import erase_dead_buffers
from .conv import conv_epilogue, match_im2col, native_conv_text, output_init
from .conv_pair import ConvCall, native_pair_text, pair_args, pairs
from .gemm_epilogue import epilogue_of
from .gemm_text import gemm_text, weight_a_ok, weight_a_text
from .library import (
    _DECL,
    _NATIVE_DECL,
    RELEASE,
    SGEMM,
    _release_text,
    _zero_fill_before,
    enabled,
    function_names,
    gemm_of,
    index_value,
    insert_helpers,
    is_gemm_placeholder,
    native_enabled,
    unique_name,
    unmark,
    weight_a_enabled,
    weight_test,
)

__all__ = ["CpuLibrary", "rewrite_contractions"]


def rewrite_contractions(module) -> int:
    """Replace every library GEMM / convolution placeholder in ``module``
    (bufferized) with a library call (sgemm, or the native GEMM or
    convolution); the count.  One the calls cannot take as it lies loses
    its marks and stays generated code."""
    from ..._mlir import func

    module = module.operation  # an ir.Module or its operation
    names = function_names(module)
    found = []

    def visit(op):
        if is_gemm_placeholder(op):
            g = gemm_of(op)
            if g is None:
                unmark(op)
            else:
                found.append(g)
        return ir.WalkResult.ADVANCE

    module.walk(visit)
    if not found:
        return 0
    native = native_enabled()
    weight_a = weight_a_enabled()
    cleanup = []  # functions with a fused epilogue
    texts = []
    if SGEMM not in names:
        texts.append(_DECL)
        if native:
            texts.append(_NATIVE_DECL)
    calls, slots = [], []
    convs = {}  # index in calls -> ConvCall, for the native calls of the im2col form
    is_weight = weight_test(module)
    for i, g in enumerate(found):
        name = unique_name(f"kiln_gemm_{i}", names)
        fill = _zero_fill_before(g.op, g.c)
        beta = 0.0 if fill is not None else 1.0
        slot = f"kiln_pack_{i}"
        args, dead = None, []
        if weight_a and is_weight(g.a) and weight_a_ok(g):
            # A weight times an activation: the native weight-A GEMM; a
            # convolution's im2col copy is folded into the call.
            slots.append(slot)
            im = match_im2col(g)
            if im is not None:
                init = output_init(g) if fill is None else None
                bias = None
                if init is not None:  # the output starts from the bias (or 0) in the call
                    beta, bias = 0.0, init[1]
                    dead = [init[0]]
                # A residual add and/or ReLU after it are applied in the call,
                # which then writes the last one's output.
                epi = conv_epilogue(g) if beta == 0.0 else None
                if epi is not None and epi.out == im.x:
                    epi = None  # the call would overwrite the input it still reads
                out = epi.out if epi is not None else g.c
                res = epi.residual if epi is not None else None
                texts.append(native_conv_text(name, g.a.type, im.x.type, out.type, im.strides, im.dilations,
                                              im.kernel, beta, slot, pads=im.pads,
                                              bias_type=bias.type if bias is not None else None,
                                              relu=epi is not None and epi.relu,
                                              residual_type=res.type if res is not None else None,
                                              pool_divisor=epi.pool_divisor if epi is not None else None))
                args = [g.a, im.x, out, im.oh, im.ow] + [v for v in (bias, res) if v is not None]
                convs[len(calls)] = ConvCall(len(texts) - 1, g.a, im.x, out, im.oh, im.ow, bias, im.kernel, im.strides, im.dilations,
                                             im.pads, epi is not None and epi.relu,
                                             epi.pool_divisor if epi is not None else None, res is not None, slot)
                dead = im.dead + dead + (epi.dead if epi is not None else [])
                if epi is not None and g.op.parent not in cleanup:
                    cleanup.append(g.op.parent)
            else:
                texts.append(weight_a_text(name, g, beta, slot))
                args = [g.a, g.b, g.c]
        else:
            # A weight B may get a slot the native GEMM packs it into once.
            epi = epilogue_of(g, g.c) if native else None
            text, uses_slot, fused = gemm_text(name, g, beta, slot if native and is_weight(g.b) else None,
                                                  pool=native, epi=epi)
            texts.append(text)
            slots += [slot] if uses_slot else []
            args = [g.a, g.b, g.c]
            if fused:  # the epilogue's passes go: the helper's calls apply them
                args += [v for v in (epi.bias, epi.residual) if v is not None]
                dead = list(epi.ops)
        calls.append((name, g, fill, args, dead))
    # A convolution whose output only a pooled one reads (kiln-fuse's
    # conv_pair): both calls become one, at the second's place.
    for i, j in pairs(convs):
        name = unique_name(f"kiln_conv_pair_{i}", names)
        texts[convs[i].text] = texts[convs[j].text] = None  # their helpers go unused
        texts.append(native_pair_text(name, convs[i], convs[j]))
        calls[j] = (name, calls[j][1], calls[j][2], pair_args(convs[i], convs[j]), calls[j][4])
        calls[i] = (None,) + calls[i][1:]
        if calls[j][1].op.parent not in cleanup:
            cleanup.append(calls[j][1].op.parent)  # the buffer between them is left unread
    if slots and RELEASE not in names:
        texts.append(_release_text(slots))
    insert_helpers(module, [t for t in texts if t is not None])
    for name, g, fill, args, dead in calls:
        if name is not None:  # (None: the first of a pair, whose call the second's makes)
            with ir.InsertionPoint(g.op), g.op.location:
                func.CallOp([], ir.FlatSymbolRefAttr.get(name), [index_value(a) for a in args])
        g.op.erase()
        for op in dead:  # users first: the reshape and deallocs, the copy, then the buffer
            op.erase()
        if fill is not None:
            fill.erase()
    for fn in cleanup:  # a fused epilogue leaves the product's own output buffer unwritten and unread
        erase_dead_buffers(fn)
    return len(calls)



@register_pass
class CpuLibrary(Pass):
    """Matrix products and convolutions as library calls (bufferized modules): OpenBLAS or kiln's native kernels."""

    name = "kiln-cpu-library"
    summary = "Replace library GEMM / convolution placeholders (marked f32 contractions on memrefs) with library calls"
    options = (Option("enabled", int, 1, "0: keep generated code (KILN_CPU_LIBRARY=0 does the same)"),)

    def run(self, module) -> None:
        if self.option("enabled") and enabled():
            rewrite_contractions(module)
