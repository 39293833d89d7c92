"""Which ops after a product or convolution its library call applies: decided on kiln IR.

kiln-fuse puts a ``kiln.matmul`` and the elementwise ops that consume it
into one ``matmul_epilogue`` group, a ``kiln.conv2d`` and its residual add,
ReLU and global pool into a ``conv_epilogue`` (or ``conv_pair``) group.
When kiln-select-kernels gives the anchor a library entry whose call can
apply some of those ops itself (the native GEMM's bias / activation /
residual, the native convolution's residual / ReLU / pool), the entry's
``LibraryCall.epilogue`` function here names them, in the order they run,
with their *role*; the pass marks each with the entry (``kiln.impl``) and
the role (:data:`~kiln.transforms._graph.EPILOGUE_ATTR`).  Their lowering
still generates their loops, each linalg op stamped with the role
(``kiln.call_part``), so a call that cannot take them as they lie after
bufferization (a batched product whose batch dims do not fold into its
rows, a buffer written elsewhere) leaves correct code; kiln-cpu-library
reads the roles (:mod:`.gemm_epilogue`, :mod:`.conv`) and never recognises
an op by its body.

The steps, each optional but in this order:

- after an f32 ``kiln.matmul`` (``native.gemm``, :func:`gemm_steps`):
  ``bias`` (``+ b``, ``b`` a group input of shape ``[N]``, ``N`` the static
  last dim), an activation (``relu``, or ``gelu`` in its exact form),
  ``residual`` (``+ r``, ``r`` a group input of the result's type);
- after an f32 ``kiln.conv2d`` (``native.conv2d`` with the native
  convolution on, :func:`conv_steps`): ``residual`` (a 4-D group input of
  its type), ``relu``, then ``sum`` or ``mean``: a ``reduce_sum`` /
  ``reduce_mean`` over dims (2, 3) -- a mean only over static spatial
  dims, whose count the call divides by.

Each value the chain passes on must have one use, the next step (a value
the group also returns ends the chain there).  Only the native runtime's
calls apply epilogues: with ``KILN_NATIVE=0`` there are none.
"""

from __future__ import annotations

from ..._mlir import ir
from ...conversions.kiln_to_linalg.library_call import CALL_PART

__all__ = ["ACTIVATIONS", "CONV_ROLES", "EPILOGUE_OPS", "GEMM_ROLES", "conv_steps", "gemm_steps", "role_of"]

#: The activations the native epilogues apply, by role: their codes (``KILN_ACT_*`` in kiln_native.h).
ACTIVATIONS = {"relu": 1, "gelu": 2}
#: A product's epilogue roles, in the order they may follow it (an activation is one slot).
GEMM_ROLES = ("bias", "act", "residual")
#: A convolution's, in order (the pool is one slot: ``sum`` or ``mean``).
CONV_ROLES = ("residual", "relu", "pool")
#: The kiln ops each entry's call may apply as a step, by entry (kiln.implementations' table lists them;
#: :func:`_chain` looks at no other op).
EPILOGUE_OPS = {
    "native.gemm": ("kiln.add", "kiln.relu", "kiln.gelu"),
    "native.conv2d": ("kiln.add", "kiln.relu", "kiln.reduce_sum", "kiln.reduce_mean"),
}


def _info(value):
    from ...dialects.kiln import tensor_info

    return tensor_info(value.type)


def _only_user(value):
    """The one op using ``value``, or None (none, several, or a use by the group's yield)."""
    uses = list(value.uses)
    if len(uses) != 1:
        return None
    user = uses[0].owner
    user = user.operation if hasattr(user, "operation") else user
    return None if user.name == "kiln.yield" else user


def _group_input(value, op) -> bool:
    """Whether ``value`` is an argument of the block holding ``op`` (a fused group's input)."""
    return isinstance(value, ir.BlockArgument) and value.owner == op.block


def _added(op, value):
    """The other operand when ``op`` is ``kiln.add`` of ``value`` and a group input (either order), else None."""
    if op.name != "kiln.add" or op.results[0].type != value.type:
        return None
    ins = list(op.operands)
    if ins.count(value) != 1:
        return None
    other = ins[1 - ins.index(value)]
    return other if _group_input(other, op) else None


def _gemm_role(op, value, n: int) -> tuple[str, str] | None:
    """``(slot, role)`` of ``op`` as a step after a product whose result's last dim is ``n``."""
    if op.name == "kiln.relu":
        return "act", "relu"
    if op.name == "kiln.gelu":
        exact = op.opview.decoded_attrs().get("approximate", "none") == "none"
        return ("act", "gelu") if exact else None
    other = _added(op, value)
    if other is None:
        return None
    if other.type == value.type:
        return "residual", "residual"
    info = _info(other)
    if len(info.dims) == 1 and info.dims[0].is_static and info.dims[0].value == n:
        return "bias", "bias"
    return None


def _conv_role(op, value) -> tuple[str, str] | None:
    """``(slot, role)`` of ``op`` as a step after a convolution."""
    if op.name == "kiln.relu":
        return "relu", "relu"
    if op.name in ("kiln.reduce_sum", "kiln.reduce_mean"):
        axes = [int(a) % 4 for a in ir.DenseI64ArrayAttr(op.attributes["axes"])] if "axes" in op.attributes else []
        if sorted(axes) != [2, 3]:
            return None
        if op.name == "kiln.reduce_sum":
            return "pool", "sum"
        spatial = _info(value).dims[2:]
        return ("pool", "mean") if all(d.is_static for d in spatial) else None
    other = _added(op, value)
    return ("residual", "residual") if other is not None and other.type == value.type else None


def _chain(anchor, entry: str, slots: tuple[str, ...], role_of) -> list[tuple[object, str]]:
    """``(op, role)`` for the consumers of ``anchor``'s result (ops of
    ``EPILOGUE_OPS[entry]``) that ``role_of(op, value)`` gives a slot, each
    slot after the previous one's."""
    steps, value, at = [], anchor.results[0], 0
    ops = EPILOGUE_OPS[entry]
    while at < len(slots):
        user = _only_user(value)
        found = role_of(user, value) if user is not None and user.name in ops else None
        if found is None or slots.index(found[0]) < at:
            break
        steps.append((user, found[1]))
        at = slots.index(found[0]) + 1
        value = user.results[0]
    return steps


def gemm_steps(op) -> list[tuple[object, str]]:
    """The steps the native GEMM's call applies after the f32 ``kiln.matmul`` ``op``."""
    from .library import native_enabled

    info = _info(op.results[0])
    if str(info.dtype) != "f32" or len(info.dims) < 2 or not info.dims[-1].is_static or not native_enabled():
        return []
    n = info.dims[-1].value
    return _chain(op, "native.gemm", GEMM_ROLES, lambda user, value: _gemm_role(user, value, n))


def conv_steps(op) -> list[tuple[object, str]]:
    """The steps the native convolution's call applies after the f32 ``kiln.conv2d`` ``op``."""
    from .library import weight_a_enabled

    if str(_info(op.results[0]).dtype) != "f32" or not weight_a_enabled():
        return []
    return _chain(op, "native.conv2d", CONV_ROLES, _conv_role)


def role_of(op) -> str | None:
    """The part of a chosen call the linalg op ``op`` is (``"bias"``,
    ``"relu"``, ``"pad"``, ...: its ``kiln.call_part``), or None."""
    return ir.StringAttr(op.attributes[CALL_PART]).value if CALL_PART in op.attributes else None
