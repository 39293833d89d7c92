"""Context-free kernel descriptions and the partitioning of a kiln function.

The Triton backend does not keep MLIR objects past partitioning: a kernel
outlives the ``ir.Context`` it came from (mixing or outliving contexts crashes
the bindings, MLIR_NOTES sharp edge 10).  :func:`partition_function` walks a
``func.func`` of kiln ops once and turns it into :class:`KernelSpec` records:
plain Python data (op names, decoded attributes, symbolic dims) that code
generation, the kernel cache key and the registry all read.

Grouping (used when the function carries no ``kiln.fused`` regions):

- an *anchor* op (matmul, conv2d, softmax, layer_norm, reduce_*, pooling,
  attention) starts a kernel; the elementwise ops that consume its result,
  one after another, each the only user of the previous value and of the same
  shape, join it as the **epilogue** (``matmul + bias + gelu``);
- elementwise ops with no anchor form a **pointwise** kernel the same way;
- view ops (transpose, reshape, expand, slice) are not kernels: they become
  strided views of a kernel *input*, applied on the host before the launch,
  so a transposed weight costs nothing;
- everything else (concat, pad, gather, fallback) runs in PyTorch.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ...dialects.dims import Dim, dim, evaluate
from ...dialects.kiln import TensorInfo
from ...errors import UnsupportedError

__all__ = [
    "ANCHORS",
    "POINTWISE_OPS",
    "VIEW_OPS",
    "Input",
    "KernelSpec",
    "Node",
    "Program",
    "Step",
    "TensorSpec",
    "View",
    "partition_function",
]

UNARY = {"neg", "abs", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "relu", "gelu", "silu", "erf",
         "floor", "ceil", "sin", "cos"}
BINARY = {"add", "sub", "mul", "div", "pow", "maximum", "minimum"}
COMPARE = {"eq", "ne", "lt", "le", "gt", "ge"}
#: Ops computed elementwise inside a pointwise kernel or an epilogue.
POINTWISE_OPS = {f"kiln.{n}" for n in UNARY | BINARY | COMPARE | {"where", "cast", "batch_norm"}}
#: Ops that are host-side views of their operand.
VIEW_OPS = {"kiln.transpose", "kiln.reshape", "kiln.expand", "kiln.slice"}
#: Ops that start a kernel of their own kind.
ANCHORS = {
    "kiln.matmul": "matmul",
    "kiln.conv2d": "conv2d",
    "kiln.softmax": "softmax",
    "kiln.layer_norm": "layer_norm",
    "kiln.reduce_sum": "reduce",
    "kiln.reduce_mean": "reduce",
    "kiln.reduce_max": "reduce",
    "kiln.reduce_min": "reduce",
    "kiln.max_pool2d": "pool",
    "kiln.avg_pool2d": "pool",
    "kiln.attention": "attention",
    "kiln.custom": "custom",  # a registered kernel (kiln.backends.user), chosen by the registry
}
# Anchors whose result may take an elementwise epilogue.
_EPILOGUE_KINDS = {"matmul", "conv2d", "softmax", "layer_norm", "reduce", "pool"}


@dataclass(frozen=True)
class TensorSpec:
    """Dims (symbolic) and dtype name (``"f32"``) of one tensor."""

    dims: tuple[Dim, ...]
    dtype: str

    @property
    def rank(self) -> int:
        return len(self.dims)

    def shape(self, binding: Mapping[str, int]) -> tuple[int, ...]:
        """The concrete shape under ``binding`` (symbol -> size)."""
        return tuple(evaluate(d, binding) for d in self.dims)

    def info(self) -> TensorInfo:
        """As a kiln ``TensorInfo`` (the dtype is its name: no MLIR object outlives the context)."""
        return TensorInfo(self.dims, self.dtype)

    def text(self) -> str:
        return f"[{', '.join(str(d) for d in self.dims)}]{self.dtype}"

    @staticmethod
    def of(t) -> TensorSpec:
        """From a ``!kiln.tensor`` type."""
        from ...dialects.kiln import tensor_info

        info = tensor_info(t)
        return TensorSpec(tuple(info.dims), str(info.dtype))


@dataclass(frozen=True)
class View:
    """One host-side view step: ``("transpose", perm)``, ``("reshape", dims)``,
    ``("expand", dims)`` or ``("slice", (starts, ends, axes, steps))``."""

    op: str
    arg: Any

    def apply(self, t, binding: Mapping[str, int]):
        """The torch view of tensor ``t``."""
        if self.op == "transpose":
            return t.permute(*self.arg)
        if self.op == "reshape":
            return t.reshape([evaluate(d, binding) for d in self.arg])
        if self.op == "expand":
            shape = [evaluate(d, binding) for d in self.arg]
            return t.reshape([1] * (len(shape) - t.dim()) + list(t.shape)).expand(shape)
        if self.op == "slice":
            starts, ends, axes, steps = self.arg
            index = [slice(None)] * t.dim()
            for s, e, a, st in zip(starts, ends, axes, steps):
                index[a % t.dim()] = slice(s, None if e >= 2**62 else e, st)
            return t[tuple(index)]
        raise UnsupportedError(f"unknown view '{self.op}'")

    def text(self) -> str:
        arg = [str(a) for a in self.arg] if self.op in ("reshape", "expand") else self.arg
        return f"{self.op}{json.dumps(arg)}"


@dataclass(frozen=True)
class Input:
    """A kernel input: the tensor the runtime passes (``base``), the views
    applied to it on the host, and the spec of the viewed tensor."""

    base: TensorSpec
    views: tuple[View, ...] = ()
    viewed: TensorSpec | None = None

    @property
    def spec(self) -> TensorSpec:
        """The spec the kernel body sees (after the views)."""
        return self.viewed or self.base

    def apply(self, t, binding):
        for v in self.views:
            t = v.apply(t, binding)
        return t


@dataclass
class Node:
    """One kiln op inside a kernel: operands are ``("in", k)`` (kernel input
    ``k``) or ``("node", j)`` (an earlier node)."""

    op: str
    args: tuple[tuple[str, int], ...]
    attrs: dict[str, Any]
    out: TensorSpec

    def text(self) -> str:
        args = ", ".join(f"%{a[0]}{a[1]}" for a in self.args)
        return f"{self.op}({args}) {json.dumps(self.attrs, sort_keys=True)} -> {self.out.text()}"


@dataclass
class KernelSpec:
    """A kernel to generate: its kind, inputs, nodes and the nodes whose
    values it writes.  For non-pointwise kinds ``nodes[prologue]`` is the
    anchor; the nodes before it are an elementwise prologue computing the
    anchor's first operand (row kernels only), the nodes after it the
    epilogue."""

    kind: str
    inputs: list[Input]
    nodes: list[Node]
    outputs: list[int]
    name: str = "kernel"
    prologue: int = 0

    @property
    def output_specs(self) -> list[TensorSpec]:
        return [self.nodes[i].out for i in self.outputs]

    @property
    def anchor(self) -> Node:
        return self.nodes[self.prologue]

    @property
    def epilogue(self) -> list[Node]:
        """The elementwise nodes after the anchor."""
        return self.nodes[self.prologue + 1 :] if self.kind != "pointwise" else self.nodes

    @property
    def prologue_nodes(self) -> list[Node]:
        """The elementwise nodes before the anchor."""
        return self.nodes[: self.prologue] if self.kind != "pointwise" else []

    @property
    def dtype(self) -> str:
        """The dtype that selects candidates: the anchor's first operand's."""
        first = self.anchor.args[0] if self.anchor.args else None
        if first is not None and first[0] == "in":
            return self.inputs[first[1]].spec.dtype
        if first is not None:
            return self.nodes[first[1]].out.dtype
        return self.anchor.out.dtype

    @property
    def pattern(self) -> str:
        """The op or fused pattern name: ``kiln.matmul+kiln.add+kiln.gelu``."""
        return "+".join(n.op for n in self.nodes)

    def text(self) -> str:
        """Canonical text of the kernel's IR: what the cache key hashes."""
        lines = [f"kernel {self.kind}"]
        for k, i in enumerate(self.inputs):
            views = " ".join(v.text() for v in i.views)
            lines.append(f"  %in{k}: {i.base.text()} {views}".rstrip())
        for j, n in enumerate(self.nodes):
            lines.append(f"  %node{j} = {n.text()}")
        lines.append(f"  outputs {self.outputs} prologue {self.prologue}")
        return "\n".join(lines)

    def digest(self) -> str:
        """sha256 of :meth:`text`."""
        return hashlib.sha256(self.text().encode()).hexdigest()

    def symbols(self) -> set[str]:
        """Symbols the kernel's shapes depend on."""
        out: set[str] = set()
        for i in self.inputs:
            for d in i.base.dims:
                out |= set(d.symbols)
        return out


@dataclass
class Step:
    """One launch of a program: a kernel spec with the value ids it reads and writes."""

    spec: KernelSpec
    inputs: list[str]
    outputs: list[str]


@dataclass
class Program:
    """A partitioned kiln function: value ids are ``arg<i>`` for arguments
    and ``v<n>`` for op results; ``constants`` holds torch (CPU) tensors."""

    name: str
    arg_specs: list[TensorSpec]
    steps: list[Step] = field(default_factory=list)
    results: list[str] = field(default_factory=list)
    result_specs: list[TensorSpec] = field(default_factory=list)
    constants: dict[str, Any] = field(default_factory=dict)
    symbols: dict[str, Any] = field(default_factory=dict)


def _json_attr(v):
    if isinstance(v, Dim):
        return str(v)
    if isinstance(v, (list, tuple)):
        return [_json_attr(x) for x in v]
    if isinstance(v, (bool, int, float, str)) or v is None:
        return v
    return str(v)


def _attrs(op) -> dict[str, Any]:
    view = op.opview
    if not hasattr(view, "decoded_attrs"):
        return {}
    return {k: _json_attr(v) for k, v in view.decoded_attrs().items()}


def _view_of(op, attrs) -> View:
    name = op.name
    if name == "kiln.transpose":
        return View("transpose", tuple(attrs["perm"]))
    if name in ("kiln.reshape", "kiln.expand"):
        return View(name.split(".")[1], tuple(dim(d) for d in attrs["shape"]))
    starts, ends, axes = attrs["starts"], attrs["ends"], attrs["axes"]
    steps = attrs["steps"] or [1] * len(axes)
    return View("slice", (tuple(starts), tuple(ends), tuple(axes), tuple(steps)))


class _Group:
    """A kernel being built: nodes, external inputs and the value at its tail."""

    def __init__(self, kind: str):
        self.kind = kind
        self.inputs: list[Input] = []
        self.input_ids: list[str] = []
        self.nodes: list[Node] = []
        self.local: dict[str, int] = {}  # value id -> node index
        self.tail: str | None = None
        self.op_ids: set[int] = set()
        self.prologue = 0

    def ref(self, vid: str, virtual: dict, specs: dict) -> tuple[str, int]:
        if vid in self.local:
            return ("node", self.local[vid])
        base, views = virtual.get(vid, (vid, ()))
        for k, (b, i) in enumerate(zip(self.input_ids, self.inputs)):
            if b == base and i.views == views:
                return ("in", k)
        self.input_ids.append(base)
        self.inputs.append(Input(specs[base], views, specs[vid] if views else None))
        return ("in", len(self.inputs) - 1)

    def add(self, op_name, arg_refs, attrs, out_spec, vid):
        self.nodes.append(Node(op_name, tuple(arg_refs), attrs, out_spec))
        self.local[vid] = len(self.nodes) - 1
        self.tail = vid


def _constant_tensor(op, spec: TensorSpec):
    """The data of a ``kiln.constant`` as a torch CPU tensor (a copy: the
    attribute dies with its context).  bf16, which numpy lacks, is read as
    its 16-bit patterns and reinterpreted."""
    import numpy as np
    import torch

    from ...transforms._graph import constant_array, resource_array

    shape = spec.shape({})
    if spec.dtype == "bf16":
        from ..._mlir import ir

        attr = op.attributes["value"]
        if isinstance(attr, ir.DenseElementsAttr) and attr.is_splat:
            return torch.full(shape, float(attr.get_splat_value().value), dtype=torch.bfloat16)
        bits = resource_array(op.operation, shape, np.uint16)
        if bits is not None:
            return torch.from_numpy(bits.copy()).view(torch.bfloat16)
        array = None
    else:
        array = constant_array(op)
    if array is None:
        raise UnsupportedError(f"cannot read the data of a {spec.text()} kiln.constant")
    return torch.from_numpy(np.array(array))


# Row kernels that evaluate an elementwise prologue while loading their input.
_PROLOGUE_KINDS = {"softmax", "layer_norm", "reduce"}


def _prologue_fits(group, operands, users) -> bool:
    """True when ``group`` (pointwise) computes exactly ``operands[0]``: its
    only value read outside is that one, read only by the row op."""
    if group is None or group.kind != "pointwise" or not operands or operands[0] != group.tail:
        return False
    if len(users.get(group.tail, ())) != 1 or any(o in group.local for o in operands[1:]):
        return False
    return [v for v in group.local if users.get(v, set()) - group.op_ids] == [group.tail]


def partition_function(func_op) -> Program:
    """Partition a ``func.func`` of kiln ops into a :class:`Program` of kernel specs.

    Raises UnsupportedError naming the op when the body holds something the
    backend cannot run (a non-kiln op other than ``func.return``).
    """

    from ..._mlir import ir

    fname = ir.StringAttr(func_op.attributes["sym_name"]).value
    block = func_op.regions[0].blocks[0]
    vid: dict = {}
    specs: dict[str, TensorSpec] = {}
    arg_specs = []
    for i, a in enumerate(block.arguments):
        vid[a] = f"arg{i}"
        specs[f"arg{i}"] = TensorSpec.of(a.type)
        arg_specs.append(specs[f"arg{i}"])
    prog = Program(fname, arg_specs)

    # Users of each value (distinct ops; the return counts as one).
    # Flatten kiln.fused regions: their body ops join the op list between
    # two boundaries (None), so a kernel never crosses a fused group's edge.
    ops: list = []
    counter = 0

    def flatten(block_ops):
        nonlocal counter
        for op in block_ops:
            if op.name == "kiln.fused":
                body = op.regions[0].blocks[0]
                for a, v in zip(body.arguments, op.operands):
                    vid[a] = vid[v]
                ops.append(None)
                inner = list(body.operations)
                flatten(inner[:-1])
                for r, y in zip(op.results, inner[-1].operands):
                    vid[r] = vid[y]
                ops.append(None)
                continue
            for r in op.results:
                vid[r] = f"v{counter}"
                counter += 1
            ops.append(op)

    flatten(list(block.operations))
    users: dict[str, set[int]] = {}
    for n, op in enumerate(ops):
        for v in op.operands if op is not None else ():
            users.setdefault(vid[v], set()).add(n)

    virtual: dict[str, tuple[str, tuple[View, ...]]] = {}
    current: _Group | None = None

    def close():
        nonlocal current
        if current is None:
            return
        g = current
        current = None
        outs = [g.tail]
        if g.kind == "pointwise":
            # Every value some op outside the group reads (the return included).
            outs = [v for v in g.local if users.get(v, set()) - g.op_ids] or [g.tail]
        name = f"{fname}_{len(prog.steps)}_{g.kind}"
        spec = KernelSpec(g.kind, g.inputs, g.nodes, [g.local[v] for v in outs], name=name, prologue=g.prologue)
        prog.steps.append(Step(spec, list(g.input_ids), outs))

    def materialize(v: str) -> str:
        """A real value for ``v``: views become a pointwise copy kernel."""
        nonlocal current
        if v not in virtual:
            return v
        close()
        current = _Group("pointwise")
        ref = current.ref(v, virtual, specs)
        out = f"{v}.copy"
        specs[out] = specs[v]
        current.add("kiln.copy", [ref], {}, specs[v], out)
        close()
        return out

    for n, op in enumerate(ops):
        if op is None:
            close()
            continue
        name = op.name
        if name == "func.return":
            close()
            prog.results = [materialize(vid[v]) for v in op.operands]
            prog.result_specs = [specs[r] for r in prog.results]
            break
        if not name.startswith("kiln."):
            raise UnsupportedError(f"the Triton backend cannot run '{name}' (only kiln ops)")
        res = [vid[r] for r in op.results]
        for r, rv in zip(res, op.results):
            specs[r] = TensorSpec.of(rv.type)
        attrs = _attrs(op)
        if name == "kiln.custom":  # the op's recorded arguments, as its registered kernel receives them
            from ..user import custom_attrs

            attrs["attrs"] = {k: _json_attr(v) for k, v in custom_attrs(op).items()}
        if name == "kiln.layer_norm":
            # Which optional operands are present (weight, bias, or both).
            view = op.opview
            attrs["affine"] = [n for n in ("weight", "bias") if getattr(view, n) is not None]
        operands = [vid[v] for v in op.operands]
        if name == "kiln.constant":
            prog.constants[res[0]] = _constant_tensor(op, specs[res[0]])
            continue
        if name in VIEW_OPS:
            base, views = virtual.get(operands[0], (operands[0], ()))
            virtual[res[0]] = (base, views + (_view_of(op, attrs),))
            continue
        out = specs[res[0]]
        if name in POINTWISE_OPS:
            if name == "kiln.batch_norm":
                # Parameters [C] broadcast along axis 1 of [N, C, ...].
                rank = out.rank
                shape = (specs[operands[0]].dims[1],) + (dim(1),) * (rank - 2)
                for p in operands[1:]:
                    base, views = virtual.get(p, (p, ()))
                    pv = f"{p}.bn{rank}"
                    virtual[pv] = (base, views + (View("reshape", shape),))
                    specs[pv] = TensorSpec(shape, specs[p].dtype)
                operands = operands[:1] + [f"{p}.bn{rank}" for p in operands[1:]]
            if current is not None and current.kind == "pointwise":
                # A pointwise kernel takes any elementwise DAG over its shape
                # (values read outside it become extra outputs).
                fuse = any(o in current.local for o in operands) and specs[current.tail].dims == out.dims
            else:
                # An epilogue is a chain: each value's only user is the next op.
                fuse = (
                    current is not None
                    and current.tail in operands
                    and len(users.get(current.tail, ())) == 1
                    and specs[current.tail].dims == out.dims
                    and current.kind in _EPILOGUE_KINDS
                )
            if not fuse:
                close()
                current = _Group("pointwise")
            refs = [current.ref(o, virtual, specs) for o in operands]
            current.add(name, refs, attrs, out, res[0])
            current.op_ids.add(n)
            continue
        kind = ANCHORS.get(name, "torch")
        if kind in _PROLOGUE_KINDS and _prologue_fits(current, operands, users):
            # The pointwise group computing the row kernel's input becomes its
            # prologue: the intermediate never goes to memory.
            current.kind = kind
            current.prologue = len(current.nodes)
            refs = [current.ref(o, virtual, specs) for o in operands]
            current.add(name, refs, attrs, out, res[0])
            current.op_ids.add(n)
            continue
        close()
        current = _Group(kind)
        refs = [current.ref(o, virtual, specs) for o in operands]
        if kind in ("torch", "custom") and len(res) != 1:
            raise UnsupportedError(f"the Triton backend runs '{name}' with one result only")
        current.add(name, refs, attrs, out, res[0])
        current.op_ids.add(n)
        if kind in ("torch", "attention", "custom"):
            close()
    close()
    return prog
