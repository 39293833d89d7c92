"""``kiln-partition``: group kiln ops into kernels, one function each, and a schedule.

Every public function is split into kernels.  A kernel is a private
``func.func`` holding a group of kiln ops; the function itself becomes the
*schedule*: its constants, then one ``func.call`` per kernel in execution
order.  Groups are formed as follows:

- a ``kiln.fused`` op (formed by ``kiln-fuse``) is one kernel; its body is
  inlined into the kernel function, and its ``kind`` becomes ``kiln.group``;
- a ``kiln.fallback`` op is a kernel of its own (``kiln.kernel =
  "fallback"``): the runtime runs it in PyTorch;
- a ``kiln.custom`` op is a kernel of its own (``kiln.kernel = "user"``):
  the runtime runs the kernel registered from user code
  (:mod:`kiln.backends.user`);
- any other op starts a kernel, and with ``fuse=true`` (the default) the
  elementwise ops that directly follow it and consume its group's values join
  it (``matmul + add + relu`` is one kernel), up to ``max-ops`` ops;
- ``kiln.constant`` ops stay in the schedule: kernels receive weights as
  arguments, so one compiled kernel serves every weight; with
  ``inline-constants`` (the default) each generated kernel gets copies of
  the constants it reads instead, up to ``inline-limit`` bytes each, and of
  a weight's ``kiln.transpose`` that only products read (``nn.Linear``'s
  ``W^T``, which kiln-fold-constants leaves past its ``keep-transposed``
  size), which the lowering reads through the product's map.  A constant
  past the limit stays an argument (a copied transpose reads it there): a
  model's weights do not go through LLVM into the object code (a 110 M
  decoder's 476 MB took its compile from 1.9 to 4.5 GB), and the runtime
  passes the same buffer on every call.  A kernel lists the arguments that
  are constants in ``kiln.weights``, so the lowering can give them the
  packing slots it gives inlined weights.

::

    func.func @main(%x: !kiln.tensor<["B", 64], f32>) -> !kiln.tensor<["B", 32], f32>
        attributes {kiln.schedule = ["main_k0"]} {
      %w = "kiln.constant"() {value = ...} : () -> !kiln.tensor<[64, 32], f32>
      %0 = call @main_k0(%x, %w) : (...) -> !kiln.tensor<["B", 32], f32>
      return %0 : ...
    }
    func.func private @main_k0(...) -> ... attributes {kiln.group = "matmul", kiln.kernel = "generated",
                                                       kiln.ops = ["kiln.matmul", "kiln.relu"]}

:func:`read_schedule` reads that structure back for the runtime and the
memory planner.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .._mlir import ir
from ..dialects.kiln import BINARY_OPS, COMPARE_OPS, UNARY_OPS, TensorInfo, TensorType, tensor_info
from ..errors import KilnError
from ..pipelines.registry import Option, Pass, register_pass
from ._graph import IMPL_ATTR, PARTS_ATTR, constant_nbytes, is_constant, is_weight_transpose

__all__ = ["INLINE_LIMIT", "WEIGHTS_ATTR", "Partition", "Schedule", "Step", "ValueInfo", "is_elementwise",
           "read_schedule"]

#: ``inline-limit``'s default (and ``KILN_INLINE_LIMIT``'s): 64 bytes.  Splats
#: and a few scalars stay in the code; every weight, bias and norm scale is an
#: argument, so identical layers are the same kernel but for their arguments
#: and compile once (kiln.compile_prepare); at 1 MiB the bench rows ran the
#: same (worker pairs), but a trained model's biases made every layer's
#: kernel a different one.
INLINE_LIMIT = 64

#: Kernel attribute (``array<i64>``): the arguments that are constants of the
#: schedule, bound to the same buffer on every call.
WEIGHTS_ATTR = "kiln.weights"


def _names(ops) -> set[str]:
    out = set()
    for o in ops:
        name = getattr(o, "OPERATION_NAME", o)
        out.add(name if isinstance(name, str) else str(name))
    return out


_ELEMENTWISE = _names(list(UNARY_OPS) + list(BINARY_OPS) + list(COMPARE_OPS)) | {"kiln.cast", "kiln.where"}

# Ops that stay in the schedule function instead of becoming kernels.
_HOST_OPS = {"kiln.constant"}
# Kernel kinds that are one op run by something else than generated code (never merged).
_OWN_KINDS = {"fallback", "user"}


def is_elementwise(name: str) -> bool:
    """True for kiln's elementwise ops (unary, binary, comparisons, cast, where)."""
    return name in _ELEMENTWISE


def _functions(module):
    for op in module.regions[0].blocks[0].operations:
        if op.operation.name == "func.func":
            yield op.operation


def _is_kernel(fn) -> bool:
    return "kiln.kernel" in fn.attributes


def _sym_name(fn) -> str:
    return ir.StringAttr(fn.attributes["sym_name"]).value


@dataclass
class _Group:
    ops: list = field(default_factory=list)
    kind: str = "generated"
    group: str = ""

    def defines(self, value) -> bool:
        owner = value.owner
        return isinstance(owner, (ir.Operation, ir.OpView)) and any(owner == o for o in self.ops)


@register_pass
class Partition(Pass):
    """Split public functions into kernel functions called in schedule order."""

    name = "kiln-partition"
    summary = "Group kiln ops into kernels (one private function each); the function becomes the schedule"
    options = (
        Option("fuse", bool, True, "fuse elementwise consumers into the kernel of their producer"),
        Option("max-ops", int, 16, "most ops in one fused kernel"),
        Option("inline-constants", bool, True, "copy constants into the generated kernels that use them"),
        Option("inline-limit", int, INLINE_LIMIT,
               "largest constant (bytes) inline-constants copies into a kernel; larger ones are arguments (-1: no limit)"),
    )

    def run(self, module) -> None:
        taken = {_sym_name(f) for f in _functions(module)}
        for fn in list(_functions(module)):
            if _is_kernel(fn) or "kiln.schedule" in fn.attributes:
                continue
            if "sym_visibility" in fn.attributes and ir.StringAttr(fn.attributes["sym_visibility"]).value == "private":
                continue
            if len(fn.regions[0].blocks) == 0:
                continue
            self._partition(module, fn, taken)

    # -- grouping ---------------------------------------------------------

    def _groups(self, block) -> list[_Group]:
        groups: list[_Group] = []
        cur: _Group | None = None
        fuse, max_ops = self.option("fuse"), self.option("max-ops")
        inline = self.option("inline-constants")
        for op in block.operations:
            op = op.operation
            name = op.name
            if name in _HOST_OPS or (inline and is_weight_transpose(op)):
                continue  # constants may sit between the ops of a group; their users get copies
            if not name.startswith("kiln.") or name in ("kiln.yield",):
                cur = None  # a foreign op (or the terminator) ends the group
                continue
            for r in op.results:
                if isinstance(r.type, TensorType) and any(d.is_unknown for d in tensor_info(r.type).dims):
                    op.location.emit_error(f"'{name}' op result has a '?' dim: run kiln-infer-shapes before kiln-partition")
                    raise KilnError("partitioning failed")
            if name == "kiln.fallback":
                groups.append(_Group([op], "fallback", "fallback"))
                cur = None
            elif name == "kiln.custom":
                groups.append(_Group([op], "user", "custom"))
                cur = None
            elif name == "kiln.fused":
                groups.append(_Group([op], "generated", op.opview.attr("kind")))
                cur = None
            elif (
                fuse
                and cur is not None
                and is_elementwise(name)
                and len(cur.ops) < max_ops
                and any(cur.defines(v) for v in op.operands)
            ):
                cur.ops.append(op)
                if cur.group == "elementwise" or not cur.group:
                    cur.group = cur.group or "elementwise"
            else:
                cur = _Group([op], "generated", "elementwise" if is_elementwise(name) else name.split(".", 1)[1])
                groups.append(cur)
        return self._close_symbols(groups)

    def _close_symbols(self, groups: list[_Group]) -> list[_Group]:
        """Merge a kernel with its neighbour while it uses a symbol that none
        of its arguments has as an exact dim: a kernel recovers each symbol's
        value from its arguments' dims, so a kernel reading ``[B*L, 16]`` and
        producing ``[B, L, 4, 4]`` cannot stand alone."""
        i = 0
        while i < len(groups):
            g = groups[i]
            if g.kind in _OWN_KINDS or not _missing_symbols(g):
                i += 1
                continue
            if i > 0 and groups[i - 1].kind not in _OWN_KINDS:
                groups[i - 1] = _merge(groups[i - 1], g)
                del groups[i]
                i -= 1
                self.bump("kernels merged for symbols")
            elif i + 1 < len(groups) and groups[i + 1].kind not in _OWN_KINDS:
                groups[i] = _merge(g, groups[i + 1])
                del groups[i + 1]
                self.bump("kernels merged for symbols")
            else:
                i += 1  # nothing to merge with: _outline adds an argument that carries it
        return groups

    # -- outlining --------------------------------------------------------

    def _partition(self, module, fn, taken: set[str]) -> None:
        block = fn.regions[0].blocks[0]
        base = _sym_name(fn)
        names = []
        carriers = _symbol_carriers(block)
        for index, group in enumerate(self._groups(block)):
            name = f"{base}_k{index}"
            while name in taken:
                name += "_"
            taken.add(name)
            self._outline(module, group, name, carriers)
            names.append(name)
            self.bump("kernels")
            if group.kind == "fallback":
                self.bump("fallback kernels")
        for op in reversed(list(block.operations)):  # users before the constants they read
            op = op.operation
            if op.name in ("kiln.constant", "kiln.transpose") and not any(True for r in op.results for _ in r.uses):
                op.erase()  # every user got a copy
        fn.attributes["kiln.schedule"] = ir.ArrayAttr.get([ir.StringAttr.get(n) for n in names])

    def _outline(self, module, group: _Group, name: str, carriers: dict | None = None) -> None:
        loc = group.ops[0].location
        inner = group.ops
        fused = group.ops[0] if group.ops[0].name == "kiln.fused" else None
        if fused is not None:
            body = fused.regions[0].blocks[0]
            inner = [o.operation for o in body.operations]
            yield_op = inner.pop()
            inputs = _unique(list(fused.operands))
            outputs = list(fused.results)
            inner_outputs = list(yield_op.operands)
        else:
            inputs = _unique([v for o in inner for v in o.operands if not group.defines(v)])
            outputs = []
            for o in inner:
                for r in o.results:
                    if any(not any(u.owner == g for g in inner) for u in r.uses):
                        outputs.append(r)
            if not outputs:  # dead group: keep its last results so nothing dangles
                outputs = list(inner[-1].results)
            inner_outputs = outputs

        if group.kind == "generated":
            # A symbol no input has as an exact dim (a kiln.range over B next to
            # fallbacks only): the function argument that carries it becomes one
            # more input, so the kernel reads its value from that argument's dim.
            for sym in sorted(_missing_symbols(group)):
                carrier = (carriers or {}).get(sym)
                if carrier is not None and not any(carrier == v for v in inputs):
                    inputs.append(carrier)
                    self.bump("symbol arguments added")
        consts = []
        if self.option("inline-constants") and group.kind == "generated":
            limit = self.option("inline-limit")
            consts = [v for v in inputs if (is_constant(v) and _inlined(v, limit)) or is_weight_transpose(v.owner)]
            inputs = [v for v in inputs if not any(v == c for c in consts)]
            # A copied transpose of a constant past the limit reads it as an argument.
            for c in consts:
                source = c.owner.operands[0] if not is_constant(c) else None
                if source is not None and not _inlined(source, limit) and not any(source == v for v in inputs):
                    inputs.append(source)
        weights = [i for i, v in enumerate(inputs) if is_constant(v)]
        ftype = ir.FunctionType.get([v.type for v in inputs], [v.type for v in outputs])
        op_names = [o.name for o in inner]
        kernel = ir.Operation.create(
            "func.func",
            regions=1,
            attributes={
                "sym_name": ir.StringAttr.get(name),
                "function_type": ir.TypeAttr.get(ftype),
                "sym_visibility": ir.StringAttr.get("private"),
                "kiln.kernel": ir.StringAttr.get(group.kind),
                "kiln.group": ir.StringAttr.get(group.group),
                "kiln.ops": ir.ArrayAttr.get([ir.StringAttr.get(n) for n in op_names]),
            },
            loc=loc,
            ip=ir.InsertionPoint(module.regions[0].blocks[0]),
        )
        if weights and group.kind == "generated":
            kernel.attributes[WEIGHTS_ATTR] = ir.DenseI64ArrayAttr.get(weights)
            self.bump("weight arguments", len(weights))
        kblock = kernel.regions[0].blocks.append(*[v.type for v in inputs], arg_locs=[loc] * len(inputs))

        # The call goes where the group's last op is: every input is defined
        # by then, and every outside use of an output comes later.
        anchor = group.ops[-1]
        call = ir.Operation.create(
            "func.call",
            results=[v.type for v in outputs],
            operands=inputs,
            attributes={"callee": ir.FlatSymbolRefAttr.get(name)},
            loc=loc,
            ip=ir.InsertionPoint.after(anchor),
        )

        ip = ir.InsertionPoint(kblock)
        copies = _copy_host_values(consts, ip, list(zip(inputs, kblock.arguments)))
        for o in inner:
            o.detach_from_parent()
            ip.insert(o)
        if fused is not None:
            for barg, outer in zip(fused.regions[0].blocks[0].arguments, fused.operands):
                if any(outer == c for c in consts):
                    barg.replace_all_uses_with(copies[_index(consts, outer)])
                else:
                    barg.replace_all_uses_with(kblock.arguments[_index(inputs, outer)])
        else:
            for o in inner:
                for outer, karg in list(zip(inputs, kblock.arguments)) + list(zip(consts, copies)):
                    o.replace_uses_of_with(outer, karg)
        ir.Operation.create("func.return", operands=inner_outputs, loc=loc, ip=ip)
        for outer, res in zip(outputs, call.results):
            if fused is not None:
                outer.replace_all_uses_with(res)
            else:
                outer.replace_all_uses_except(res, [o.operation for o in kblock.operations])
        if fused is not None:
            yield_op.erase()
            fused.erase()


def _flat_ops(ops) -> list:
    """The ops of a group with every ``kiln.fused`` inlined (in place)."""
    from ..dialects.kiln.fused import inline_fused

    out = []
    for o in ops:
        if o.name == "kiln.fused":
            body = [x.operation for x in o.regions[0].blocks[0].operations][:-1]
            inline_fused(o)
            out.extend(body)
        else:
            out.append(o)
    return out


def _merge(a: _Group, b: _Group) -> _Group:
    ops = _flat_ops(a.ops + b.ops)
    return _Group(ops, "generated", f"{a.group}+{b.group}")


def _type_symbols(t) -> set[str]:
    if not isinstance(t, TensorType):
        return set()
    return set().union(*(d.symbols for d in tensor_info(t).dims)) if tensor_info(t).dims else set()


def _missing_symbols(group: _Group) -> set[str]:
    """Symbols the group's ops use that no group input has as an exact dim."""
    needed: set[str] = set()
    bound: set[str] = set()
    inputs = []

    def visit(op):
        for r in op.results:
            needed.update(_type_symbols(r.type))
        view = op.opview
        for name, spec in getattr(view, "ATTRS", {}).items():
            if spec.kind == "dims" and name in op.attributes:
                for d in view.attr(name):
                    needed.update(d.symbols)
        return ir.WalkResult.ADVANCE

    for o in group.ops:
        o.walk(visit)
        if o.name == "kiln.fused":
            inputs.extend(o.operands)
        else:
            inputs.extend(v for v in o.operands if not group.defines(v))
    for v in inputs:
        if isinstance(v.type, TensorType):
            bound.update(str(d) for d in tensor_info(v.type).dims if d.is_symbol)
    return needed - bound


def _symbol_carriers(block) -> dict:
    """``symbol -> the first argument of the function with it as an exact dim``."""
    carriers: dict = {}
    for arg in block.arguments:
        if isinstance(arg.type, TensorType):
            for d in tensor_info(arg.type).dims:
                if d.is_symbol:
                    carriers.setdefault(str(d), arg)
    return carriers


def _inlined(v, limit: int) -> bool:
    """Whether the constant ``v`` is copied into kernels under ``inline-limit``
    ``limit``: a splat always (it costs the object code nothing)."""
    if limit < 0:
        return True
    attr = v.owner.operation.attributes["value"]
    if isinstance(attr, ir.DenseElementsAttr) and attr.is_splat:
        return True
    size = constant_nbytes(v.owner)
    return size is None or size <= limit


def _copy_host_values(values: list, ip, args: list) -> list:
    """Copies at ``ip`` of constants and weight transposes (with their
    constants: one copy of a constant that is both, a tied embedding); a
    transpose's constant that is among the kernel's arguments (``args``:
    (outer value, block argument) pairs) is read there."""
    copies: list = []
    sources: list = list(args)  # (constant, its copy or argument)

    def copy_constant(c):
        for orig, dup in sources:
            if orig == c:
                return dup
        dup = c.owner.clone(ip=ip).results[0]
        sources.append((c, dup))
        return dup

    for v in values:
        if v.owner.name == "kiln.constant":
            copies.append(copy_constant(v))
        else:
            source = copy_constant(v.owner.operands[0])
            copy = v.owner.clone(ip=ip)
            copy.operands[0] = source
            copies.append(copy.results[0])
    return copies


def _index(values: list, v) -> int:
    return next(i for i, w in enumerate(values) if w == v)


def _unique(values: list) -> list:
    out = []
    for v in values:
        if not any(v == w for w in out):
            out.append(v)
    return out


# ----------------------------------------------------------------------------
# Reading the schedule back.
# ----------------------------------------------------------------------------


@dataclass
class ValueInfo:
    """One tensor of the schedule: ``kind`` is ``input``, ``constant``,
    ``intermediate`` or ``output``; ``step`` the step defining it (-1 if none)."""

    id: int
    kind: str
    info: TensorInfo
    step: int = -1
    index: int = 0  # argument / result number / output position


@dataclass
class Step:
    """One scheduled kernel: its function (or the op itself when the module
    was not partitioned), what it reads and writes (value ids)."""

    name: str
    kind: str  # "generated", "fallback" or "user" (a kernel registered from user code)
    ops: list[str]
    inputs: list[int]
    outputs: list[int]
    op: object = None  # the call (or kiln op) in the schedule
    func: object = None  # the kernel's func.func, when partitioned
    torch_ops: list[str] = field(default_factory=list)  # original names of fallback ops
    split: str | None = None  # the symbol the kernel may run split along (kiln.transforms.row_split)
    view_offset: str | None = None  # a lone slice that is a contiguous run of its input: where it starts
    # [op name, location, runtime] of each fallback op (kiln.compile_prepare.prepare fills it in).
    sites: list = field(default_factory=list)
    # What runs it beside generated code: "user.<registered kernel>", or the library kernels chosen for its
    # ops ("native.layer_norm", "generated+native.max_pool2d"); None: generated code alone.
    impl: str | None = None
    precision: str | None = None  # the float type its arithmetic runs in (kiln.transforms.precision), for report()


@dataclass
class Schedule:
    """Values (by id) and steps of one scheduled function."""

    function: str
    values: list[ValueInfo]
    steps: list[Step]
    inputs: list[int]
    outputs: list[int]
    constants: dict = field(default_factory=dict)  # value id -> kiln.constant op

    def detached(self) -> Schedule:
        """A copy holding no MLIR objects (dtypes as names, no op references),
        safe to keep after the compilation's Context is gone."""
        values = [ValueInfo(v.id, v.kind, TensorInfo(v.info.dims, str(v.info.dtype)), v.step, v.index) for v in self.values]
        steps = [
            Step(s.name, s.kind, list(s.ops), list(s.inputs), list(s.outputs), torch_ops=list(s.torch_ops),
                 split=s.split, view_offset=s.view_offset, sites=[list(x) for x in s.sites], impl=s.impl,
                 precision=s.precision)
            for s in self.steps
        ]
        return Schedule(self.function, values, steps, list(self.inputs), list(self.outputs), {})

    def kernel_counts(self) -> dict[str, int]:
        """Number of steps of each kind."""
        out: dict[str, int] = {}
        for s in self.steps:
            out[s.kind] = out.get(s.kind, 0) + 1
        return out


def read_schedule(module, function: str | None = None) -> Schedule:
    """The schedule of ``function`` (the first public one by default).

    Works on partitioned modules (steps are the ``func.call`` ops) and on
    unpartitioned ones (each kiln op is a step of its own).
    """
    funcs = {_sym_name(f): f for f in _functions(module)}
    if function is None:
        public = [f for f in funcs.values() if not _is_kernel(f)]
        if not public:
            raise KilnError("the module has no function to schedule")
        fn = public[0]
    else:
        if function not in funcs:
            raise KilnError(f"no function '@{function}' in the module")
        fn = funcs[function]
    block = fn.regions[0].blocks[0]
    values: list[ValueInfo] = []
    ids: list = []  # parallel to values: the ir.Value

    def add(v, kind, step=-1, index=0) -> int:
        values.append(ValueInfo(len(values), kind, tensor_info(v.type), step, index))
        ids.append(v)
        return len(values) - 1

    def id_of(v) -> int:
        for i, w in enumerate(ids):
            if w == v:
                return i
        raise KilnError(f"value {v.get_name()} is used before it is defined")

    inputs = [add(a, "input", index=i) for i, a in enumerate(block.arguments)]
    steps: list[Step] = []
    constants = {}
    outputs: list[int] = []
    for op in block.operations:
        op = op.operation
        if op.name == "kiln.constant":
            constants[add(op.results[0], "constant")] = op
        elif op.name == "func.return":
            outputs = [id_of(v) for v in op.operands]
        elif op.name == "func.call":
            callee = ir.FlatSymbolRefAttr(op.attributes["callee"]).value
            kfn = funcs.get(callee)
            if kfn is None or not _is_kernel(kfn):
                raise KilnError(f"the schedule calls '@{callee}', which is not a kiln kernel")
            ins = [id_of(v) for v in op.operands]
            n = len(steps)
            outs = [add(r, "intermediate", n, k) for k, r in enumerate(op.results)]
            kind = ir.StringAttr(kfn.attributes["kiln.kernel"]).value
            names = [ir.StringAttr(a).value for a in ir.ArrayAttr(kfn.attributes["kiln.ops"])]
            torch_ops = [
                o.operation.opview.attr("op_name")
                for o in kfn.regions[0].blocks[0].operations
                if o.operation.name == "kiln.fallback"
            ]
            steps.append(Step(callee, kind, names, ins, outs, op, kfn, torch_ops,
                              impl=_kernel_impl(kfn.regions[0].blocks[0].operations)))
        elif op.name.startswith("kiln."):
            ins = [id_of(v) for v in op.operands]
            n = len(steps)
            outs = [add(r, "intermediate", n, k) for k, r in enumerate(op.results)]
            kind = {"kiln.fallback": "fallback", "kiln.custom": "user"}.get(op.name, "generated")
            torch_ops = [op.opview.attr("op_name")] if op.name == "kiln.fallback" else []
            steps.append(Step(f"{op.name}#{n}", kind, [op.name], ins, outs, op, None, torch_ops,
                              impl=_kernel_impl([op])))
        else:
            raise KilnError(f"cannot schedule '{op.name}' in '@{_sym_name(fn)}'")
    for pos, vid in enumerate(outputs):
        if values[vid].kind == "intermediate":
            values[vid].kind = "output"
            values[vid].index = pos
    return Schedule(_sym_name(fn), values, steps, inputs, outputs, constants)


def _kernel_impl(ops) -> str | None:
    """What runs a kernel of ``ops``: ``user.<kernel>`` for a ``kiln.custom``
    op among them; the library kernels kiln-select-kernels chose for them
    (``kiln.impl``; ``generated+native.layer_norm`` when generated code
    runs beside one); None for generated code alone."""
    chosen, generated = set(), False
    for o in ops:
        o = o.operation
        if o.name == "kiln.custom":
            return "user." + o.opview.attr("kernel")
        if o.name == "kiln.fused":
            inner = _kernel_impl(o.regions[0].blocks[0].operations)
            chosen.update(n for n in (inner or "generated").split("+") if n != "generated")
            generated = generated or inner is None or inner.startswith("generated")
        elif IMPL_ATTR in o.attributes:
            chosen.add(ir.StringAttr(o.attributes[IMPL_ATTR]).value)
        elif PARTS_ATTR in o.attributes:  # generated code calling a library kernel for pieces of it
            chosen.add(ir.StringAttr(o.attributes[PARTS_ATTR]).value)
            generated = True
        elif o.name not in ("kiln.yield", "kiln.constant", "func.return"):
            generated = True
    if not chosen:
        return None
    return "+".join((["generated"] if generated else []) + sorted(chosen))
