"""Convolutions for ``kiln-cpu-library``: what a convolution's product call takes over, and its helper.

``convert-kiln-to-linalg`` lowers a ``kiln.conv2d`` that kiln-select-kernels
gave ``native.conv2d`` to a zero padding, a bias init, an im2col copy (a
generic writing ``col[n, c, kh, kw, oh, ow]`` from the padded input), each
marked as a part of the call (``kiln.call_part``), and a contraction of the
weight with it, the entry's placeholder (its ``kiln.call_attrs`` give the
strides, dilations and pads).  With the native runtime it becomes one
``kiln_conv2d`` call: the weight packed once into a slot, the im2col
gathered panel by panel from the input (no im2col buffer), the work split
over images and panels on the native pool.  Without it the im2col copy
stays and the contraction is a library GEMM like any other product.  (A
direct convolution generic in hand-written linalg input, which this stage
used to recognise, is generated code: nothing is raised from loops.)
"""

from __future__ import annotations

from ..._mlir import ir
from ...conversions.kiln_to_linalg.library_call import CALL_ATTRS
from .buffers import RESHAPES, indexing_maps, loaded_memref, op_of, view_closure, view_root
from .epilogues import role_of
from .library import (
    NATIVE_CONV,
    NATIVE_CONV_MEAN,
    _dims,
    _is_contiguous,
    add_pointer,
    add_slot,
    contiguous_f32,
    pool_threads_line,
)

__all__ = ["Epilogue", "add_conv_geometry", "conv_epilogue", "match_im2col", "native_conv_text"]


class Im2col:
    """The im2col copy a weight-first product reads: the copy generic, its
    (padded) input ``x``, the window geometry, the output size (``oh``,
    ``ow``: ints or the index values the buffer was allocated with) and the
    ops that die with the copy."""

    def __init__(self, copy, x, strides, dilations, kernel, oh, ow, pads, dead):
        self.copy, self.x, self.strides, self.dilations = copy, x, strides, dilations
        self.kernel, self.oh, self.ow, self.pads, self.dead = kernel, oh, ow, pads, dead


def _geometry(g) -> tuple[list[int], list[int], list[int]]:
    """``(strides, dilations, pads)`` of the convolution whose placeholder is
    ``g``, from the attributes its lowering copied onto it (defaults filled in)."""
    attrs = {a.name: a.attr for a in ir.DictAttr(g.op.attributes[CALL_ATTRS])}
    return tuple(list(ir.DenseI64ArrayAttr(attrs[k])) for k in ("strides", "dilations", "pads"))


def match_im2col(g, element: str = "f32") -> Im2col | None:
    """The im2col copy behind ``g``'s B when ``g`` (the placeholder of a
    chosen convolution) is ``out[n, f, p] += w[f, k] * col[n, k, p]`` with
    ``col`` a reshape of a buffer that only the convolution's im2col part
    writes and only this product reads, as the call takes it (its input of
    ``element`` type)."""
    if CALL_ATTRS not in g.op.attributes:
        return None
    ma, mb, mc = g.maps
    if len(g.batch) != 1 or ma != [g.m, g.k] or mb != [g.batch[0], g.k, g.n] or mc != [g.batch[0], g.m, g.n]:
        return None
    if not _is_contiguous(ir.MemRefType(g.c.type)):
        return None
    reshape = getattr(g.b.owner, "operation", None)
    if reshape is None or reshape.name != "memref.reshape" or len(list(g.b.uses)) != 1:
        return None
    col = reshape.operands[0]
    alloc = getattr(col.owner, "operation", None)
    if alloc is None or alloc.name != "memref.alloc":
        return None
    copy, dead = None, [reshape]
    for use in col.uses:
        user = op_of(use.owner)
        if user.name == "memref.dealloc":
            dead.append(user)
        elif role_of(user) == "im2col" and copy is None and len(user.operands) == 2 and user.operands[1] == col:
            copy = user
        elif user != reshape:
            return None
    if copy is None or copy.block != g.op.block:
        return None
    ct = ir.MemRefType(col.type)
    if ct.rank != 6 or not contiguous_f32(copy.operands[0], 4, element):
        return None
    if any(ir.ShapedType.is_dynamic_size(d) for d in ct.shape[2:4]):
        return None
    strides, dilations, pads = _geometry(g)
    dynamic = iter(alloc.operands)
    sizes = [next(dynamic) if ir.ShapedType.is_dynamic_size(d) else d for d in ct.shape]
    x, dead = copy.operands[0], dead + [copy, alloc]
    if any(pads):
        padded = _zero_pad_source(x, element)
        if padded is None:
            return None
        x, pad_dead = padded
        dead += pad_dead
    return Im2col(copy, x, strides, dilations, list(ct.shape[2:4]), sizes[4], sizes[5], (pads[0], pads[1]), dead)


def output_init(g):
    """``(init generic, bias or None)`` when the buffer behind ``g``'s output
    (a reshape of it) is set, before ``g`` and with only views of it in
    between, by a generic broadcasting a contiguous 1-D f32 bias along dim 1
    or filling it with 0.0: the native convolution then starts from the bias
    itself (``beta`` 0) and the init can go.

    Every op using the buffer (through any view, or in a nested body) before
    ``g`` other than the init must be a view or a dealloc: a read of the
    init's values there (a copy into another accumulator, when CSE merged
    two products' zero fills) would read an unwritten buffer once the init
    is gone."""
    reshape = getattr(g.c.owner, "operation", None)
    if reshape is None or reshape.name != "memref.reshape":
        return None
    z = reshape.operands[0]
    block_ops = [o.operation for o in g.op.block.operations]
    at = block_ops.index(g.op)
    init = None
    for user in dict.fromkeys(_ancestor_in(u, g.op.block) for u in view_closure(z)[1]):
        if user is None:
            return None  # used in another block: its order against g is unknown
        if block_ops.index(user) >= at or user.name == "memref.dealloc":
            continue
        if init is not None or user.name != "linalg.generic" or user.operands[-1] != z:
            return None
        init = user
    if init is None or role_of(init) != "init" or len(init.operands) != 2 or init.operands[1] != z:
        return None
    maps = indexing_maps(init)
    if maps[1] != ir.AffineMap.get_identity(4):
        return None
    src = init.operands[0]
    if isinstance(src.type, ir.F32Type):  # a scalar fill: 0.0 only
        return (init, None) if _is_zero(src) else None
    if not contiguous_f32(src, 1) or _dims(maps[0]) != [1]:
        return None
    return init, src


def _constant(v) -> float | int | None:
    """The value of ``v`` when it is a scalar ``arith.constant`` (a float, an
    integer or an index), else None."""
    owner = getattr(v.owner, "operation", None)
    if owner is None or owner.name != "arith.constant":
        return None
    for attr in (ir.FloatAttr, ir.IntegerAttr):
        try:
            return attr(owner.attributes["value"]).value
        except ValueError:  # another kind of constant (or a vector)
            continue
    return None


def _is_zero(v) -> bool:
    """``v`` is an ``arith.constant`` 0: a float (either sign) or an integer or index."""
    return _constant(v) == 0


def _copies_whole(op, buffer) -> bool:
    """Whether the 4-D generic ``op`` (no inputs) copies all of the local
    allocation ``buffer`` into its output element for element: its body loads
    a reshape of ``buffer`` typed as the output at ``(linalg.index 0..3)``
    (a constant 0 for a dim of size 1) and yields the value.  It is how a
    function's result is copied out (``kiln-cpu-prepare``'s contiguous copy)
    when bufferization could not compute it in place."""
    if len(op.operands) != 1 or len(op.regions[0].blocks[0].arguments) != 1:
        return False
    maps = indexing_maps(op)
    if maps != [ir.AffineMap.get_identity(4)]:
        return False
    ops = [o.operation for o in op.regions[0].blocks[0].operations]
    load = getattr(ops[-1].operands[0].owner, "operation", None) if ops and ops[-1].name == "linalg.yield" else None
    if load is None or load.name != "memref.load" or view_root(load.operands[0], RESHAPES) != buffer:
        return False
    out_type = ir.MemRefType(op.operands[0].type)
    if ir.MemRefType(load.operands[0].type).shape != out_type.shape:
        return False
    if any(o.name not in ("linalg.index", "arith.constant") for o in ops if o not in (load, ops[-1])):
        return False
    for d, index in enumerate(list(load.operands)[1:]):
        owner = getattr(index.owner, "operation", None)
        if owner is not None and owner.name == "linalg.index":
            if ir.IntegerAttr(owner.attributes["dim"]).value != d:
                return False
        elif not (out_type.shape[d] == 1 and _is_zero(index)):
            return False
    return True


class Epilogue:
    """What :func:`conv_epilogue` folds into a convolution call: the generics
    that go, the buffer the call writes instead of its own, the residual it
    adds (or None), whether it applies a ReLU, and ``pool_divisor``: None, or
    the call writes ``[N, F]`` sums over the output pixels divided by it (a
    global average pool: OH * OW; a sum: 1)."""

    def __init__(self, dead, out, residual, relu, pool_divisor=None):
        self.dead, self.out, self.residual, self.relu = dead, out, residual, relu
        self.pool_divisor = pool_divisor


def _sole_reader(buffer, g, block_ops, skip=()):
    """The one op after ``g`` reading the local allocation ``buffer``
    (through views), ignoring deallocs, the ops in ``skip`` (the epilogue
    so far, which wrote it) and, before ``g``, its init; else None.  Several
    readers are one when the first rewrites ``buffer`` in place (a residual
    add or a ReLU on the product's buffer): the later ones read what it
    wrote."""
    if getattr(buffer.owner, "operation", None) is None or buffer.owner.operation.name != "memref.alloc":
        return None  # an output of the function (or an argument): its contents are seen after
    at = block_ops.index(g.op)
    _, users = view_closure(buffer)
    users = [_ancestor_in(u, g.op.block) for u in users]  # a load in a generic's body: that generic reads
    readers = [u for u in users if u is not None and u != g.op and u not in skip and u.name != "memref.dealloc"
               and not (u.block == g.op.block and block_ops.index(u) < at)]
    readers = sorted(dict.fromkeys(readers), key=block_ops.index)
    if len(readers) > 1 and readers[0].name == "linalg.generic" and view_root(readers[0].operands[-1]) == buffer:
        readers = readers[:1]  # a one-output generic: its last operand is what it writes
    if len(readers) != 1 or readers[0].name != "linalg.generic" or readers[0].block != g.op.block:
        return None
    return readers[0]


def _ancestor_in(op, block):
    """``op`` or the op enclosing it that sits in ``block``; None if none does."""
    while op is not None and op.block != block:
        parent = op.parent
        op = op_of(parent) if parent is not None else None
    return op


def _elementwise(op, n_ins: int, rank: int = 4):
    """``op``'s ins and out when it is an identity-map generic of ``rank``
    dims with ``n_ins`` inputs and one output."""
    if len(op.operands) != n_ins + 1 or len(op.regions[0].blocks[0].arguments) != n_ins + 1:
        return None
    maps = indexing_maps(op)
    if maps != [ir.AffineMap.get_identity(rank)] * (n_ins + 1):
        return None
    return list(op.operands)[:n_ins], op.operands[n_ins]


def _plain_4d(value, g, block_ops) -> bool:
    """A contiguous 4-D f32 buffer: a function argument or an allocation before ``g``."""
    if not contiguous_f32(value, 4):
        return False
    owner = getattr(value.owner, "operation", None)
    return owner is None or (owner.name == "memref.alloc" and owner.block == g.op.block
                             and block_ops.index(owner) < block_ops.index(g.op))


def _untouched_between(value, g, end_op, block_ops, allowed) -> bool:
    """Nothing but ``allowed`` uses ``value`` between ``g`` and ``end_op``."""
    lo, hi = block_ops.index(g.op), block_ops.index(end_op)
    for use in value.uses:
        user = op_of(use.owner)
        if user not in allowed and user.block == g.op.block and lo < block_ops.index(user) <= hi:
            return False
    return True


def conv_epilogue(g) -> Epilogue | None:
    """The residual add and/or ReLU after the convolution ``g`` that its call
    applies: the steps kiln-select-kernels chose on kiln IR
    (:func:`.epilogues.conv_steps`), whose generics carry their role, as
    the buffers lie.  ``g`` writes a local allocation whose only reader is
    the residual step (the other operand a contiguous 4-D buffer of the
    same shape, defined before ``g``), whose output's only reader may then
    be the ReLU step; or the ReLU step alone.  Last, either a sum or mean
    of the result over its pixels (zero fill, sum, for a mean the division
    by the pixel count: :func:`_pool_after`; the call then writes ``[N,
    F]``) or a copy of the allocation written so far into a plain buffer
    (the function's result, copied out because its product went through
    reshapes) goes too.  The call then writes the last one's output, which
    must be defined before ``g`` and untouched until that generic.

    Without the copy's fold, a convolution with no activation after it
    computed into a ``malloc``'d temporary each call and copied it out: a
    1x1 64 -> 256 at 56 x 56 took 4.9 ms against 0.7 with a ReLU, mostly
    page faults (the 3.2 MB temporary made glibc trim and regrow its heap
    every call), and 1.2 against 0.8 where glibc kept its pages."""
    block_ops = [o.operation for o in g.op.block.operations]
    buffer = view_root(g.c)
    dead, residual, relu = [], None, False
    reader = _sole_reader(buffer, g, block_ops)
    if reader is not None and role_of(reader) == "residual":
        io = _elementwise(reader, 2)
        if io is None:
            return None
        ins, out = io
        other = [v for v in ins if view_root(v) != buffer]
        if len(other) != 1 or not _plain_4d(other[0], g, block_ops) or not _plain_4d(out, g, block_ops):
            return None
        if not _untouched_between(other[0], g, reader, block_ops, {reader}):
            return None  # the residual changes before the add reads it
        residual, buffer = other[0], out
        dead.append(reader)
        reader = _sole_reader(out, g, block_ops, skip=set(dead))
    if reader is not None and role_of(reader) == "relu":
        io = _elementwise(reader, 1)
        if io is not None and _plain_4d(io[1], g, block_ops):
            relu, buffer = True, io[1]
            dead.append(reader)
            reader = _sole_reader(buffer, g, block_ops, skip=set(dead))
    pool = _pool_after(reader, buffer, g, block_ops) if reader is not None else None
    divisor = None
    if pool is not None:
        ops, buffer, divisor = pool
        dead += ops
    elif reader is not None and _copies_whole(reader, buffer) and _plain_4d(reader.operands[0], g, block_ops):
        buffer = reader.operands[0]
        dead.append(reader)
    if not dead or not _untouched_between(buffer, g, dead[-1], block_ops, set(dead)):
        return None
    return Epilogue(dead, buffer, residual, relu, divisor)


def _maps(op) -> list[str]:
    return [str(m) for m in indexing_maps(op)]


def _iterators(op) -> list[str]:
    return [str(a).split("<")[-1].rstrip(">") for a in ir.ArrayAttr(op.attributes["iterator_types"])]


def _spatial_sum(op, buffer) -> bool:
    """Whether the generic ``op``, a pool step (role ``sum`` / ``mean``),
    reads all of the 4-D ``buffer`` ``[N, F, OH, OW]`` reducing its last two
    dims into its output ``[N, F]`` or ``[N, F, 1, 1]``: how
    ``convert-kiln-to-linalg`` lowers a ``reduce_sum`` / ``reduce_mean`` over
    axes (2, 3), read through a collapse to ``[N, F, OH*OW]`` or not."""
    if op.name != "linalg.generic" or len(op.operands) != 2 or len(op.regions[0].blocks[0].arguments) != 2:
        return False
    x, out = op.operands
    if view_root(x) != buffer or not contiguous_f32(out) or ir.MemRefType(out.type).rank not in (2, 4):
        return False
    rank = ir.MemRefType(x.type).rank
    if rank == 3:
        owner = getattr(x.owner, "operation", None)
        if owner is None or owner.name != "memref.collapse_shape" or owner.operands[0] != buffer:
            return False
        if str(owner.attributes["reassociation"]).replace(" ", "") != "[[0],[1],[2,3]]":
            return False
    elif x != buffer:
        return False
    dims = ", ".join(f"d{i}" for i in range(rank))
    kept = "(d0, d1)" if ir.MemRefType(out.type).rank == 2 else "(d0, d1, 0, 0)"
    if _maps(op) != [f"({dims}) -> ({dims})", f"({dims}) -> {kept}"]:
        return False
    if _iterators(op) != ["parallel", "parallel"] + ["reduction"] * (rank - 2):
        return False
    return role_of(op) in ("sum", "mean")


def _divides(op, value) -> bool:
    """Whether ``op`` is a mean's division step (its role) reading ``value``
    element for element into an output of the same shape."""
    rank = ir.MemRefType(value.type).rank
    io = _elementwise(op, 1, rank) if op.name == "linalg.generic" and role_of(op) == "mean" else None
    return io is not None and io[0][0] == value and _iterators(op) == ["parallel"] * rank and \
        ir.MemRefType(io[1].type).shape == ir.MemRefType(value.type).shape


def _pool_after(reduce, buffer, g, block_ops):
    """``(dead ops, output, divisor)`` when ``reduce`` (the one reader of
    ``buffer``, the convolution's finished output) is a pool step summing
    its pixels (:func:`_spatial_sum`) whose output was zero-filled after
    ``g`` and, for a mean, is then divided by the pixel count (a static
    ``OH * OW``: kiln-select-kernels takes no other mean) in place or into a
    buffer defined before ``g``; else None."""
    if not _spatial_sum(reduce, buffer):
        return None
    sums = reduce.operands[1]
    at, start = block_ops.index(reduce), block_ops.index(g.op)
    fill = None
    for op in reversed(block_ops[start + 1:at]):
        if op.name in RESHAPES:
            continue
        if op.name == "linalg.generic" and len(op.operands) == 2 and op.operands[1] == sums and \
                _is_zero(op.operands[0]) and len(list(op.regions[0].blocks[0].operations)) == 1:
            fill = op  # its body only yields the 0.0
        break
    if fill is None:
        return None
    dead, out, divisor = [fill, reduce], sums, 1.0
    _, users = view_closure(view_root(sums))
    later = sorted((u for u in (_ancestor_in(u, g.op.block) for u in users)
                    if u is not None and u.name != "memref.dealloc" and block_ops.index(u) > at),
                   key=block_ops.index)
    if role_of(reduce) == "mean":  # the division by the pixel count follows (kiln-level: static)
        pixels = ir.MemRefType(buffer.type).shape[2:]
        if not later or not _divides(later[0], sums) or any(ir.ShapedType.is_dynamic_size(d) for d in pixels):
            return None
        div = later[0]
        out, divisor = div.operands[1], float(pixels[0] * pixels[1])
        dead.append(div)
        if view_root(out) != view_root(sums) and len(later) > 1:
            return None  # the undivided sums are read again
    if not contiguous_f32(out) or ir.MemRefType(out.type).rank not in (2, 4):
        return None
    owner = getattr(out.owner, "operation", None)
    if owner is not None and not (owner.name == "memref.alloc" and owner.block == g.op.block
                                  and block_ops.index(owner) < start):
        return None
    return dead, out, divisor


def _users_of(v) -> list:
    return [op_of(u.owner) for u in v.uses]


def _zero_pad_source(x, element: str = "f32"):
    """``(source, dead ops)`` when the buffer ``x`` is written by a chosen
    convolution's zero-padding part (``kiln.call_part = "pad"``) from
    ``source`` and read only by the im2col copy."""
    alloc = getattr(x.owner, "operation", None)
    if alloc is None or alloc.name != "memref.alloc":
        return None
    pad, dead, readers = None, [], 0
    for user in _users_of(x):
        if user.name == "memref.dealloc":
            dead.append(user)
        elif role_of(user) == "pad" and user.name == "linalg.generic" and len(user.operands) == 1:
            pad = user
        else:
            readers += 1
    if pad is None or readers != 1:
        return None
    source = loaded_memref(pad)
    if source is None or not contiguous_f32(source, 4, element):
        return None
    return source, [pad, *dead, alloc]


def add_input_dims(add, tx) -> None:
    """Emit ``%i0 .. %i3`` (index constants) and ``%Nx, %Cx, %Hx, %Wdx``,
    the dims of the NCHW input argument ``%X`` of type ``tx``."""
    for i in range(4):
        add(f"  %i{i} = arith.constant {i} : index")
    for j, v in enumerate(("N", "C", "H", "Wd")):
        add(f"  %{v}x = memref.dim %X, %i{j} : {tx}")


def add_conv_geometry(add, tx, ty, kernel, strides, dilations, pads) -> None:
    """Emit a convolution helper's sizes as i64 values: ``%Nx64, %Cx64, %Hx64,
    %Wdx64`` (the input ``%X`` of type ``tx``), ``%Fx64`` (dim 1 of the output
    ``%Y`` of type ``ty``), ``%OH64, %OW64`` (from the ``%OH, %OW`` arguments),
    and the constants ``%KH, %KW, %sh, %sw, %dh, %dw, %pt, %pl``."""
    add_input_dims(add, tx)
    add(f"  %Fx = memref.dim %Y, %i1 : {ty}")
    for v in ("Nx", "Cx", "Hx", "Wdx", "Fx", "OH", "OW"):
        add(f"  %{v}64 = arith.index_cast %{v} : index to i64")
    for v, value in (("KH", kernel[0]), ("KW", kernel[1]), ("sh", strides[0]), ("sw", strides[1]),
                     ("dh", dilations[0]), ("dw", dilations[1]), ("pt", pads[0]), ("pl", pads[1])):
        add(f"  %{v} = arith.constant {value} : i64")


def native_conv_text(name: str, tw, tx, ty, strides, dilations, kernel, beta: float, slot: str | None,
                     pads=(0, 0), bias_type=None, relu: bool = False, residual_type=None,
                     pool_divisor: float | None = None) -> str:
    """The helper ``@name(W, X, Y, OH, OW[, bias])`` calling ``kiln_conv2d``.

    ``W`` is the weight (``[F, C*KH*KW]``), ``X`` the input ``[N, C, H,
    W]`` (zero-padded by ``pads`` = (top, left) and up to the output size),
    ``Y`` the output (``[N, F, OH*OW]``; OH and OW passed); all
    contiguous.  ``slot`` names the weight's packing slot (None: packed per
    call); ``bias_type``, when given, is the type of a per-channel bias
    argument the output starts from (with ``beta`` 0); ``residual_type``
    that of a last argument laid out as the output and added to it;
    ``relu`` applies ``max(., 0)`` to the result in the call.  With
    ``pool_divisor`` the call is ``kiln_conv2d_mean``: ``Y`` is ``[N, F]``
    (or ``[N, F, 1, 1]``), each output's sum over its pixels divided by it.
    """
    sig = f"%W: {tw}, %X: {tx}, %Y: {ty}, %OH: index, %OW: index"
    sig += f", %Bias: {bias_type}" if bias_type is not None else ""
    sig += f", %Res: {residual_type}" if residual_type is not None else ""
    lines = [f"func.func private @{name}({sig}) {{"]
    add = lines.append
    add_conv_geometry(add, tx, ty, kernel, strides, dilations, pads)
    for tag, t in (("W", tw), ("X", tx), ("Y", ty)):
        add_pointer(add, tag, t)
    add(f"  %beta = arith.constant {beta:.1f} : f32")
    add(f"  %relu = arith.constant {int(relu)} : i32")
    add(pool_threads_line())  # asked at run time: the code serves any pool size
    add_pointer(add, "B", bias_type, "Bias")
    add_pointer(add, "R", residual_type, "Res")
    add_slot(add, slot)
    callee, extra, extra_type = NATIVE_CONV, "", ""
    if pool_divisor is not None:
        add(f"  %div = arith.constant {float(pool_divisor)!r} : f32")
        callee, extra, extra_type = NATIVE_CONV_MEAN, ", %div", ", f32"
    add(f"  func.call @{callee}(%Nx64, %Fx64, %Cx64, %Hx64, %Wdx64, %KH, %KW, %OH64, %OW64, %sh, %sw, %dh, "
        f"%dw, %pt, %pl, %pX, %pW, %pB, %pR, %beta, %relu, %pY, %nthr, %slot{extra}) : ({', '.join(['i64'] * 19)}, "
        f"f32, i32, i64, i32, i64{extra_type}) -> ()")
    add("  return")
    add("}")
    return "\n".join(lines)
