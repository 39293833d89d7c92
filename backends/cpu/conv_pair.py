"""Two native convolution calls as one: ``kiln_conv2d_pair``.

``kiln-fuse``'s conv_pair rule puts a small CNN's last two convolutions (each
with its ReLU, the second ending in a global pool) into one kernel, where
:func:`~kiln.backends.cpu.contractions.rewrite_contractions` makes them a
``kiln_conv2d`` call writing a local buffer and a ``kiln_conv2d_mean`` call
reading it through its zero padding.  :func:`pairs` finds such calls and
:func:`native_pair_text` writes the one helper that replaces both: the
native call computes the first convolution an image at a time into the
layout the second reads, in the thread's cache (see ``kiln_cpair.c``), and
the buffer between them goes.
"""

from __future__ import annotations

from dataclasses import dataclass

from .conv import add_input_dims
from .library import NATIVE_CONV_PAIR, add_pointer, add_slot, pool_threads_line

__all__ = ["ConvCall", "native_pair_text", "pairs"]


@dataclass
class ConvCall:
    """What a native convolution call was made of (the weight-first im2col
    form): its helper's place in the texts, the operands (weight ``w`` ``[F, C*KH*KW]``, input ``x``, output
    ``out``, output size ``oh``/``ow`` as ints or index values, ``bias`` or
    None) and the geometry; ``pool`` is the mean's divisor (None: the call
    writes the convolution's output)."""

    text: int
    w: object
    x: object
    out: object
    oh: object
    ow: object
    bias: object
    kernel: list
    strides: list
    dilations: list
    pads: tuple
    relu: bool
    pool: float | None
    residual: bool
    slot: str


def _local_buffer(v) -> bool:
    owner = getattr(v.owner, "operation", None)
    return owner is not None and owner.name == "memref.alloc"


def pairs(calls: dict) -> list[tuple[int, int]]:
    """``(i, j)`` for each first call ``calls[i]`` (no pool, no residual,
    writing a local buffer) whose output only the pooled call ``calls[j]``
    reads as its input, both undilated; ``calls`` maps call indices to
    :class:`ConvCall`."""
    readers: dict = {}
    for j, c in calls.items():
        readers.setdefault(c.x, []).append(j)
    found = []
    for i, a in calls.items():
        if a.pool is not None or a.residual or not _local_buffer(a.out):
            continue
        js = readers.get(a.out, [])
        if len(js) != 1:
            continue
        b = calls[js[0]]
        if b.pool is None or b.residual or any(d != 1 for d in a.dilations + b.dilations):
            continue
        found.append((i, js[0]))
    return found


def native_pair_text(name: str, a: ConvCall, b: ConvCall) -> str:
    """The helper ``@name(W1, X, W2, Y, OH1, OW1, OH2, OW2[, B1][, B2])``
    calling ``kiln_conv2d_pair`` for the calls ``a`` then ``b``."""
    tw1, tx, tw2, ty = (v.type for v in (a.w, a.x, b.w, b.out))
    sig = f"%W1: {tw1}, %X: {tx}, %W2: {tw2}, %Y: {ty}, %OH1: index, %OW1: index, %OH2: index, %OW2: index"
    sig += f", %B1: {a.bias.type}" if a.bias is not None else ""
    sig += f", %B2: {b.bias.type}" if b.bias is not None else ""
    lines = [f"func.func private @{name}({sig}) {{"]
    add = lines.append
    add_input_dims(add, tx)
    add(f"  %F1x = memref.dim %W1, %i0 : {tw1}")
    add(f"  %F2x = memref.dim %W2, %i0 : {tw2}")
    for v in ("Nx", "Cx", "Hx", "Wdx", "F1x", "F2x", "OH1", "OW1", "OH2", "OW2"):
        add(f"  %{v}64 = arith.index_cast %{v} : index to i64")
    for tag, c in (("1", a), ("2", b)):
        for v, value in (("KH", c.kernel[0]), ("KW", c.kernel[1]), ("sh", c.strides[0]), ("sw", c.strides[1]),
                         ("pt", c.pads[0]), ("pl", c.pads[1])):
            add(f"  %{v}{tag} = arith.constant {value} : i64")
        add(f"  %relu{tag} = arith.constant {int(c.relu)} : i32")
        add_slot(add, c.slot, tag)
    for tag, t in (("W1", tw1), ("X", tx), ("W2", tw2), ("Y", ty)):
        add_pointer(add, tag, t)
    for tag, c in (("B1", a), ("B2", b)):
        add_pointer(add, tag, c.bias.type if c.bias is not None else None)
    add(pool_threads_line())  # asked at run time: the code serves any pool size
    add(f"  %div = arith.constant {float(b.pool)!r} : f32")
    add(f"  func.call @{NATIVE_CONV_PAIR}(%Nx64, %Cx64, %Hx64, %Wdx64, %F1x64, %KH1, %KW1, %OH164, %OW164, %sh1, %sw1, "
        "%pt1, %pl1, %F2x64, %KH2, %KW2, %OH264, %OW264, %sh2, %sw2, %pt2, %pl2, %pX, %pW1, %pB1, %relu1, %pW2, "
        f"%pB2, %relu2, %pY, %nthr, %slot1, %slot2, %div) : ({', '.join(['i64'] * 25)}, i32, i64, i64, i32, i64, "
        "i32, i64, i64, f32) -> ()")
    add("  return")
    add("}")
    return "\n".join(lines)


def pair_args(a: ConvCall, b: ConvCall) -> list:
    """The helper's operands, in :func:`native_pair_text`'s order."""
    return [a.w, a.x, b.w, b.out, a.oh, a.ow, b.oh, b.ow] + [c.bias for c in (a, b) if c.bias is not None]

