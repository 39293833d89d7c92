"""Shape-function helpers shared by the op families.

Each helper raises :class:`~kiln.errors.VerifyError` with a message that
names the dims involved, so a verifier failure says *which* dims clash.
"""

from __future__ import annotations

from collections.abc import Sequence

from ...errors import VerifyError
from ..dims import UNKNOWN, Dim, dim, shape_text
from .base import TensorInfo


def broadcast_dims(shapes: Sequence[Sequence[Dim]], what: str = "operands") -> tuple[Dim, ...]:
    """Numpy broadcasting of several shapes (right-aligned).

    A dim broadcasts against ``1`` and against an equal dim; a symbolic dim
    against a different symbol or a different constant is an error naming
    both, since kiln cannot prove at compile time that they agree.
    """
    rank = max((len(s) for s in shapes), default=0)
    out: list[Dim] = []
    for axis in range(rank):
        cur: Dim | None = None
        for s in shapes:
            k = axis - (rank - len(s))
            if k < 0:
                continue
            d = s[k]
            if cur is None or cur == 1 or (cur.is_unknown and d != 1):
                cur = d
            elif d == 1 or d.is_unknown or d == cur:
                continue
            else:
                texts = " with ".join(shape_text(x) for x in shapes)
                raise VerifyError(
                    f"{what} are not broadcast-compatible: cannot broadcast {texts} "
                    f"(dim {cur} vs {d})"
                )
        out.append(cur if cur is not None else dim(1))
    return tuple(out)


def same_dtype(infos: Sequence[TensorInfo], what: str = "operands"):
    """The common dtype of ``infos``; VerifyError naming both if they differ."""
    first = infos[0].dtype
    for i, info in enumerate(infos[1:], start=1):
        if info.dtype != first:
            raise VerifyError(f"{what} must have the same dtype, got {first} and {info.dtype} (operand #{i})")
    return first


def norm_axis(axis: int, rank: int, name: str = "axis") -> int:
    """``axis`` in ``[0, rank)``, negative values counting from the end."""
    if not -rank <= axis < max(rank, 1):
        raise VerifyError(f"{name} {axis} is out of range for rank {rank}")
    return axis % rank if rank else 0


def norm_axes(axes: Sequence[int], rank: int, name: str = "axes") -> list[int]:
    """Normalized, checked, duplicate-free axes."""
    out = [norm_axis(a, rank, name) for a in axes]
    if len(set(out)) != len(out):
        raise VerifyError(f"{name} {list(axes)} repeat an axis")
    return out


def matrix_transpose(rank: int) -> list[int]:
    """The permutation that swaps the last two of ``rank`` dims (each matrix of a batch transposed)."""
    if rank < 2:
        raise ValueError(f"a matrix transpose needs at least 2 dims, not {rank}")
    return [*range(rank - 2), rank - 1, rank - 2]


def require_dims_equal(a: Dim, b: Dim, what: str) -> None:
    """VerifyError unless ``a`` and ``b`` are provably equal (or unknown)."""
    if a.is_unknown or b.is_unknown or a == b:
        return
    raise VerifyError(f"{what}: {a} vs {b}")


def require_rank(info: TensorInfo, rank: int | Sequence[int], what: str) -> None:
    """VerifyError unless ``info`` has one of the given ranks."""
    ranks = (rank,) if isinstance(rank, int) else tuple(rank)
    if info.rank not in ranks:
        want = " or ".join(str(r) for r in ranks)
        raise VerifyError(f"{what} must have rank {want}, got {shape_text(info.dims)}")


def product(dims: Sequence[Dim]) -> Dim:
    """The number of elements of a shape, as a dim."""
    out = dim(1)
    for d in dims:
        if d.is_unknown:
            return UNKNOWN
        out = out * d
    return out


def window_out(size: Dim, kernel: Dim, stride: int, pad_lo: int, pad_hi: int, dilation: int, ceil: bool = False) -> Dim:
    """Output extent of a sliding window (convolution, pooling) along one axis."""
    if stride <= 0 or dilation <= 0:
        raise VerifyError(f"strides and dilations must be positive, got stride {stride} dilation {dilation}")
    span = size + (pad_lo + pad_hi) - dilation * (kernel - 1) - 1
    if ceil:
        # Rounding up adds a last window only where it starts inside the input
        # or the low padding (PyTorch's and ONNX's rule): its start
        # (out - 1) * stride must stay below size + pad_lo.  Both bounds are
        # floor divisions of size plus a constant, so the smaller constant
        # gives the count for static and symbolic sizes alike.
        if not (isinstance(kernel, int) or kernel.is_static):
            raise VerifyError(f"ceil_mode needs a static kernel, got {kernel}")
        k = kernel if isinstance(kernel, int) else kernel.value
        extent = dilation * (k - 1) + 1
        span = size + pad_lo + min(pad_hi - extent + stride - 1, -1)
    out = span // stride + 1
    if out.is_static and out.value <= 0:
        raise VerifyError(f"window of extent {dilation * (kernel - 1) + 1} does not fit an input of size {size} with padding {pad_lo}+{pad_hi}")
    return out
