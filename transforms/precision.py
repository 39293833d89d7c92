"""``kiln-reduce-precision``: run an fp32 model's contractions in bf16 (``kiln.compile(..., precision=...)``).

The one place the ``precision`` compile keyword is dispatched
(:func:`check_precision`, :func:`with_precision`):

* ``"fp32"`` (default): nothing changes.
* ``"bf16"``: every f32 ``kiln.matmul`` reads bf16 operands -- a constant
  weight becomes a bf16 constant here, at compile time (rounded to nearest
  even), an activation goes through a ``kiln.cast`` -- and its bf16 result is
  cast back to f32.  The lowering sums bf16 products in an f32 accumulator
  (``convert-kiln-to-linalg``), and the CPU backend runs the product in
  kiln's bf16 GEMM (AVX512-BF16 ``vdpbf16ps`` where the CPU has it,
  :mod:`kiln.backends.cpu.lowp_gemm`).  A ``kiln.conv2d`` of one group is
  such a product too (its bias rounded to bf16 as well; the CPU backend
  runs its im2col product in the same GEMM).  Grouped (depthwise)
  convolutions, ``kiln.attention`` and ``kiln.packed_attention`` read their
  inputs rounded to bf16 (the weights rounded once here, activations cast
  to bf16 and back) and run on the f32 kernels, which have no bf16 form
  yet: the same numbers as a bf16 kernel with f32 accumulation, not its
  speed.  Inputs and outputs stay f32.
* ``"int8-weights"``: weight-only quantization.  Every f32 ``kiln.matmul``
  whose right operand is a 2-D constant weight ``[K, N]`` (or the transpose of
  one, as ``nn.Linear`` imports when the weight is too large to fold) becomes
  ``kiln.matmul_w8(x, w, scale)``: ``w`` the weight as int8 rows ``[N, K]``,
  one symmetric scale per output channel and group of ``group-size`` (128)
  consecutive k (``max |group| / 127``, values rounded to nearest and
  clipped to +-127; GPTQ's and AWQ's usual groups: on the bench LLM, greedy
  tokens given fp32's prefix agreed with fp32's on 95% of 64 positions,
  86% with one scale per channel).  Activations stay f32; the CPU
  backend runs the product in ``kiln_w8_gemm`` (int8 widened in registers,
  f32 accumulation), so a decode step streams a quarter of the weight bytes.

It runs after the graph passes' simplification (so attention is already
recognised: casts between its matmuls would hide it) and before fusion,
which then groups the casts with their neighbours.  Each rewritten op carries
``kiln.precision = "bf16"``; :func:`kernel_precisions` reads the precision
each kernel ran in for ``report()``.
"""

from __future__ import annotations

import numpy as np

from .._mlir import ir
from ..dialects.kiln import CastOp, MatmulW8Op, TransposeOp, create_op, tensor_info, tensor_type
from ..dialects.kiln.elementwise import ReluOp
from ..dialects.kiln.quant import EXACT_ATTR
from ..errors import KilnError
from ..pipelines.registry import Option, Pass, register_pass
from ._graph import block_ops, constant_array, functions, is_constant, is_weight_transpose, make_constant
from ._resources import register_resource

__all__ = ["GROUP_SIZE", "PRECISIONS", "PRECISION_ATTR", "ReducePrecision", "bf16_bits", "check_precision", "int8_rows",
           "kernel_precisions", "with_precision"]

#: The values of ``kiln.compile(..., precision=...)``.
PRECISIONS = ("fp32", "bf16", "int8-weights")
#: The discardable attribute marking an op this pass rewrote: the precision it runs in.
PRECISION_ATTR = "kiln.precision"
#: Ops whose operands become bf16 (a bf16 product with an f32 accumulator; a convolution of one group).
_CONTRACTIONS = ("kiln.matmul", "kiln.conv2d")
#: Ops whose float operands are rounded to bf16 and stay f32 (no bf16 kernel yet; grouped convolutions).
_ROUNDED = ("kiln.conv2d", "kiln.attention", "kiln.packed_attention")
#: Precisions from least to most precise, for a kernel's precision.
_ORDER = ("int8", "int8-weights", "bf16", "f16", "f32", "f64")


def _is_contraction(op) -> bool:
    """Whether ``op`` runs as a bf16 product: a matmul, or a convolution of one group (a grouped or
    depthwise one has no bf16 kernel: its inputs are rounded instead)."""
    if op.name == "kiln.conv2d":
        return op.opview.decoded_attrs()["groups"] == 1
    return op.name in _CONTRACTIONS


def check_precision(precision) -> str:
    """``precision`` when kiln compiles it, else a :class:`KilnError` naming the choices."""
    if precision not in PRECISIONS:
        raise KilnError(f"precision must be one of {', '.join(map(repr, PRECISIONS))}, got {precision!r}")
    return precision


def _split_top(text: str) -> list[str]:
    """``text`` split at the commas outside braces (pipeline elements)."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += {"{": 1, "}": -1, "(": 1, ")": -1}.get(ch, 0)
        cur += ch
    if cur:
        parts.append(cur)
    return [p.strip() for p in parts if p.strip()]


def with_precision(graph, precision):
    """The graph pipeline ``graph`` (a :class:`~kiln.pipelines.Pipeline`, or
    None for no graph passes) with ``kiln-reduce-precision`` for
    ``precision`` before its ``cse`` / ``kiln-dce`` / ``kiln-fuse`` (at its end without them); ``graph``
    itself for ``"fp32"``.  Raises :class:`KilnError` for an unknown precision."""
    from ..pipelines import Pipeline

    precision = check_precision(precision)
    if precision == "fp32":
        return graph
    stage = f"kiln-reduce-precision{{precision={precision}}}"
    if graph is None:
        return Pipeline.parse(f"builtin.module({stage})")
    text = str(graph)
    inner = text[text.index("(") + 1:text.rindex(")")] if text.startswith("builtin.module(") else text
    stages = _split_top(inner)
    # Before CSE / DCE (they merge the casts and drop the f32 weights left unused), fusion and
    # decomposition (the Triton pipeline's: it decomposes kiln.matmul_w8).
    at = next((i for i, s in enumerate(stages)
               if s.partition("{")[0] in ("kiln-decompose", "cse", "kiln-dce", "kiln-fuse")), len(stages))
    stages.insert(at, stage)
    return Pipeline.parse("builtin.module(" + ",".join(stages) + ")")


def bf16_bits(array: np.ndarray) -> np.ndarray:
    """The bf16 bit patterns (uint16) of ``array`` rounded to nearest even (NaN stays NaN)."""
    f = np.ascontiguousarray(array, dtype=np.float32)
    bits = f.view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(f)
    if nan.any():  # rounding could carry a NaN's payload into the infinity pattern
        rounded[nan] = ((bits[nan] >> 16) | 0x40).astype(np.uint16)
    return rounded


def bf16_round(array: np.ndarray) -> np.ndarray:
    """``array`` rounded to bf16 and back to f32."""
    return (bf16_bits(array).astype(np.uint32) << 16).view(np.float32)


#: Consecutive k sharing a scale in ``precision="int8-weights"`` (the pass's ``group-size``).
GROUP_SIZE = 128


def int8_rows(weight: np.ndarray, group_size: int = GROUP_SIZE) -> tuple[np.ndarray, np.ndarray]:
    """``(w, scale)`` for an f32 weight ``[K, N]``: ``w`` int8 ``[N, K]`` and
    ``scale`` f32 ``[N, ceil(K / group_size)]``, ``weight[k, n] ~= w[n, k] *
    scale[n, k // group_size]`` -- symmetric, ``scale = max |group| / 127``
    (1 for a group of zeros), values rounded to nearest even and clipped to
    +-127 (kiln.matmul_w8's operands)."""
    rows = np.ascontiguousarray(np.asarray(weight, dtype=np.float32).T)
    n, k = rows.shape
    groups = -(-k // group_size)
    padded = np.zeros((n, groups * group_size), np.float32)
    padded[:, :k] = rows
    peak = np.abs(padded.reshape(n, groups, group_size)).max(axis=2)
    scale = np.where(peak > 0, peak / 127.0, 1.0).astype(np.float32)
    w = np.clip(np.rint(rows / np.repeat(scale, group_size, axis=1)[:, :k]), -127, 127).astype(np.int8)
    return w, scale


def _constant(array: np.ndarray, element_type: ir.Type, bits: bool, ip) -> ir.Value:
    """A ``kiln.constant`` of ``array`` as ``element_type`` (``bits``: ``array`` holds bf16 bit patterns).

    bf16 data is a ``dense_resource`` blob of the bits (a splat a splat), as the frontends'
    weights: kiln-partition passes it to the kernels as a weight past its ``inline-limit`` (one
    buffer the runtime reads without a copy -- the bindings cannot read a bf16
    ``DenseElementsAttr`` back --, a packing slot, identical layers compiled once) instead of
    copying it into each kernel."""
    from ..dialects.kiln import ConstantOp

    shape = list(array.shape)
    if not bits:
        return make_constant(np.ascontiguousarray(array, dtype=np.float32), element_type, ip=ip)
    data = np.array(array, dtype=np.uint16, order="C", copy=True)
    ttype = ir.RankedTensorType.get(shape, element_type)
    if data.size and (data == data.flat[0]).all():
        value = (np.uint32(data.flat[0]) << np.uint32(16)).view(np.float32)
        attr = ir.DenseElementsAttr.get_splat(ttype, ir.FloatAttr.get(element_type, float(value)))
    else:
        data.flags.writeable = False
        attr = ir.DenseResourceElementsAttr.get_from_buffer(data, "kiln_constant", ttype)
        register_resource(attr, data)
    return create_op(ConstantOp, attrs={"value": attr}, ip=ip).result


def _cast(value: ir.Value, dtype: ir.Type, ip) -> ir.Value:
    info = tensor_info(value.type)
    return create_op(CastOp, [value], results=[tensor_type(info.dims, dtype)], ip=ip).result


def _weight_rows(value: ir.Value) -> tuple[np.ndarray, str] | None:
    """The f32 data of a matmul's right operand as ``(array, layout)`` when it
    is a 2-D constant (``"kn"``) or the transpose of one (``"nk"``), else None."""
    if is_constant(value):
        layout, src = "kn", value
    else:
        owner = value.owner
        if not isinstance(owner, (ir.Operation, ir.OpView)) or owner.name != "kiln.transpose":
            return None
        if list(owner.opview.attr("perm")) != [1, 0] or not is_constant(owner.operands[0]):
            return None
        layout, src = "nk", owner.operands[0]
    array = constant_array(src)
    if array is None or array.dtype != np.float32 or array.ndim != 2:
        return None
    return array, layout


@register_pass
class ReducePrecision(Pass):
    """Contractions of an fp32 graph in bf16 or with int8 weights (see the module docstring)."""

    name = "kiln-reduce-precision"
    summary = ("Run f32 matmuls in bf16 (f32 accumulation), convolutions / attention on bf16-rounded inputs; or "
               "matmuls by constant weights with int8 weights (int8-weights)")
    options = (Option("precision", str, "bf16", "the precision: bf16 or int8-weights (fp32 leaves the graph alone)"),
               Option("group-size", int, GROUP_SIZE, "int8-weights: consecutive k sharing a scale"))

    def run(self, module) -> None:
        precision = check_precision(self.option("precision"))
        if precision == "fp32":
            return
        bf16, f32 = ir.BF16Type.get(), ir.F32Type.get()
        self._weights: dict = {}  # (constant op, rounded only) -> its bf16 form, shared by its users
        if precision == "int8-weights":
            self._int8_weights(module)
            return
        for fn in functions(module):
            for block in fn.regions[0].blocks:
                for op in block_ops(block):
                    if EXACT_ATTR in op.attributes:  # an integer product's exact f32 chunk: bf16 sums would round
                        continue
                    if _is_contraction(op) and self._all_f32(op):
                        self._contraction(op, bf16, f32)
                    elif op.name in _ROUNDED and self._all_f32(op):
                        self._rounded(op, bf16, f32)
        self._relus_in_bf16(module, bf16)

    def _relus_in_bf16(self, module, bf16) -> None:
        """``cast_bf16(relu(cast_f32(x)))`` for a bf16 ``x`` -- a product's result through a ReLU
        into the next product, as the rewrite leaves a convolutional network -- becomes
        ``relu(x)`` in bf16: the same values (ReLU commutes with the rounding, the widening is
        exact), two elementwise passes fewer per layer.  Only where every user of the ReLU is
        such a cast (a ReLU also read in f32, a residual stream, stays)."""
        for fn in functions(module):
            for block in fn.regions[0].blocks:
                for op in block_ops(block):
                    if op.name != "kiln.relu":
                        continue
                    src = op.operands[0].owner
                    if not isinstance(src, (ir.Operation, ir.OpView)) or src.name != "kiln.cast":
                        continue
                    x = src.operands[0]
                    users = [u.owner for u in op.results[0].uses]
                    if str(tensor_info(x.type).dtype) != "bf16" or not users or any(
                            u.name != "kiln.cast" or str(tensor_info(u.results[0].type).dtype) != "bf16"
                            for u in users):
                        continue
                    relu = create_op(ReluOp, [x], results=[x.type], loc=op.location, ip=ir.InsertionPoint(op))
                    for u in users:
                        u.results[0].replace_all_uses_with(relu.result)
                        u.erase()
                    op.erase()
                    self.bump("ReLUs in bf16")

    def _int8_weights(self, module) -> None:
        """``precision="int8-weights"``: each f32 matmul by a 2-D constant weight
        becomes ``kiln.matmul_w8`` (the module docstring); a weight shared by
        several matmuls is quantized once."""
        group = self.option("group-size")
        if group < 1:
            raise KilnError(f"kiln-reduce-precision: group-size must be positive, got {group}")
        done = []  # (constant op, layout, (w, scale) values); ops compare equal, they do not hash alike
        for fn in functions(module):
            for block in fn.regions[0].blocks:
                for op in block_ops(block):
                    if op.name != "kiln.matmul" or EXACT_ATTR in op.attributes or not self._all_f32(op):
                        continue
                    rhs = op.operands[1]
                    found = _weight_rows(rhs)
                    if found is None:
                        continue
                    array, layout = found
                    source = rhs.owner if layout == "kn" else rhs.owner.operands[0].owner
                    params = next((p for s, lay, p in done if s == source and lay == layout), None)
                    size = min(group, array.shape[0 if layout == "kn" else 1])  # one group: per channel
                    if params is None:
                        w, scale = int8_rows(array if layout == "kn" else array.T, size)
                        ip = ir.InsertionPoint(source)
                        params = (make_constant(w, "i8", loc=source.location, ip=ip),
                                  make_constant(scale, "f32", loc=source.location, ip=ip))
                        done.append((source, layout, params))
                        self.bump("weights quantized to int8")
                    new = create_op(MatmulW8Op, [op.operands[0], *params], attrs={"group_size": size},
                                    results=[op.results[0].type], loc=op.location, ip=ir.InsertionPoint(op))
                    new.operation.attributes[PRECISION_ATTR] = ir.StringAttr.get("int8-weights")
                    op.results[0].replace_all_uses_with(new.result)
                    op.erase()
                    self.bump("matmuls with int8 weights")

    @staticmethod
    def _all_f32(op) -> bool:
        return all(str(tensor_info(v.type).dtype) == "f32" for v in op.operands) and \
            all(str(tensor_info(r.type).dtype) == "f32" for r in op.results)

    def _weight(self, value: ir.Value, rounded: bool, bf16, f32):
        """A constant operand in bf16 (``rounded``: its bf16 values as f32), built once per constant; None when
        its data cannot be read."""
        key = (value.owner, rounded)
        for k, v in self._weights.items():
            if k[0] == key[0] and k[1] == rounded:
                return v
        array = constant_array(value)
        if array is None or array.dtype != np.float32:
            return None
        ip = ir.InsertionPoint(value.owner)
        with value.owner.location:
            new = _constant(bf16_round(array), f32, False, ip) if rounded else _constant(bf16_bits(array), bf16,
                                                                                         True, ip)
        self._weights[key] = new
        self.bump("weights converted")
        return new

    def _operand(self, value: ir.Value, rounded: bool, bf16, f32, ip) -> ir.Value:
        if is_constant(value):
            new = self._weight(value, rounded, bf16, f32)
            if new is not None:
                return new
        owner = value.owner
        if not rounded and is_weight_transpose(owner):
            # nn.Linear's W^T (kept a transpose for the product to read through its map): the
            # weight itself in bf16, transposed as before -- a cast of it would run every call
            # and leave the product no constant to pack once.
            new = self._weight(owner.operands[0], False, bf16, f32)
            if new is not None:
                info = tensor_info(value.type)
                t = create_op(TransposeOp, [new], attrs={"perm": owner.opview.attr("perm")},
                              results=[tensor_type(info.dims, bf16)], ip=ip)
                return t.result
        low = _cast(value, bf16, ip)
        return _cast(low, f32, ip) if rounded else low

    def _contraction(self, op, bf16, f32) -> None:
        ip = ir.InsertionPoint(op)
        with op.location:
            for i, v in enumerate(list(op.operands)):
                op.operands[i] = self._operand(v, False, bf16, f32, ip)
            res = op.results[0]
            info = tensor_info(res.type)
            res.set_type(tensor_type(info.dims, bf16))
            after = ir.InsertionPoint.after(op)
            back = _cast(res, f32, after)
            res.replace_all_uses_with(back)
            back.owner.operands[0] = res  # the cast itself read its own result after the replacement
        op.attributes[PRECISION_ATTR] = ir.StringAttr.get("bf16")
        self.bump("contractions in bf16")

    def _rounded(self, op, bf16, f32) -> None:
        ip = ir.InsertionPoint(op)
        with op.location:
            for i, v in enumerate(list(op.operands)):
                if op.name == "kiln.conv2d" and i == 2:
                    continue  # the bias is added in f32 after the sums, as a bf16 kernel would
                op.operands[i] = self._operand(v, True, bf16, f32, ip)
        op.attributes[PRECISION_ATTR] = ir.StringAttr.get("bf16")
        self.bump("ops on bf16-rounded inputs")


def _ops_of(step) -> list:
    """The operations of a schedule step: its kernel function's, or its op."""
    ops = []
    if step.func is not None:
        step.func.walk(lambda o: ops.append(o) or ir.WalkResult.ADVANCE)
    elif step.op is not None:
        ops.append(step.op.operation)
    return ops


def kernel_precisions(schedule) -> list[str | None]:
    """Per step of ``schedule`` (a :class:`~kiln.transforms.partition.Schedule`
    still holding its MLIR functions): the precision its arithmetic ran in --
    ``int8`` for an integer product (``kiln.matmul_integer``), an op's
    ``kiln.precision`` where this pass set one, else the least precise float
    dtype among its ops' operands -- or None (no float data)."""
    out = []
    for step in schedule.steps:
        ops = _ops_of(step)
        found = set()
        for o in ops:
            if not o.name.startswith("kiln.") or o.name in ("kiln.cast", "kiln.constant", "kiln.yield"):
                continue
            if o.name == "kiln.matmul_integer":
                found.add("int8")
                continue
            if PRECISION_ATTR in o.attributes:
                found.add(ir.StringAttr(o.attributes[PRECISION_ATTR]).value)
                continue
            for v in o.operands:
                try:
                    found.add(str(tensor_info(v.type).dtype))
                except Exception:  # noqa: BLE001 - not a kiln tensor (an index, a memref)
                    pass
        floats = [d for d in _ORDER if d in found]
        out.append(floats[0] if floats else None)
    return out
