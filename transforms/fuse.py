"""``kiln-fuse``: group producer chains into ``kiln.fused`` kernels.

Four fusion rules, applied greedily in program order:

- **elementwise**: chains (and trees) of elementwise ops (unary, binary,
  comparisons, ``where``, ``cast``; broadcasting allowed) form one group;
- **matmul_epilogue**: a ``kiln.matmul`` takes the elementwise ops that
  consume it (bias add, GELU/ReLU/SiLU, a residual add) as its epilogue, as
  long as each produces the matmul's result shape;
- **conv_epilogue**: the same for a ``kiln.conv2d`` (a ResNet block's
  residual add and ReLU, which the CPU backend applies inside its
  convolution call), and last a ``reduce_mean`` / ``reduce_sum`` over the
  spatial dims (2, 3) of that result: a classifier's global average pool,
  which the CPU backend sums inside the call instead of storing the
  convolution's output (:func:`kiln.backends.cpu.conv.conv_epilogue`);
- **reduction**: a ``softmax``, ``layer_norm`` or ``reduce_*`` takes the
  elementwise group computing its input as prologue (``x * scale + mask``
  before a softmax), and elementwise consumers of its result shape as
  epilogue (``layer_norm(x) * g + b``);
- **conv_pair**: last, a conv_epilogue group ending in that pool takes the
  conv_epilogue group (no pool, no residual) whose one result is its
  convolution's input and read by nothing else: a small CNN's last two
  convolutions, which the CPU backend runs in one call
  (``kiln_conv2d_pair``: the first's output never leaves the thread's
  cache).  The Triton pipeline leaves this rule out.

A group has at most one anchor (matmul, conv2d or reduction), a conv_pair two.  Shapes are compared as
symbolic dims (``["B", "L", 256]`` equals ``["B", "L", 256]`` whatever B and L
are), so dynamic dims do not block fusion; only ``?`` dims, which cannot be
proven equal, keep an op out of an anchored group.  A group is formed only
when it stays *convex* (no path leaves it and comes back, so it can run as
one kernel) and fits the op's limits (16 inputs, 4 outputs); groups of one op
are left alone.  Single-element constants used by a group are cloned into
it, so kernels see them as immediates; other constants (weights, biases) are
inputs.

Each group becomes a ``kiln.fused`` op (see :mod:`kiln.dialects.kiln.fused`)
whose ``kind`` names the rule.  Option ``kinds`` restricts the rules used.
Statistics: ``groups fused``, ``ops fused``, and ``<kind> groups`` per rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .._mlir import ir
from ..dialects.kiln import (
    BINARY_OPS,
    COMPARE_OPS,
    FUSED_KINDS,
    MAX_FUSED_RESULTS,
    MAX_VARIADIC,
    UNARY_OPS,
    create_fused,
    create_yield,
    tensor_info,
)
from ..errors import KilnError
from ..pipelines.registry import Option, Pass, register_pass
from ._graph import block_ops, functions

__all__ = ["ELEMENTWISE_OPS", "Fuse", "REDUCTION_OPS", "fusion_role"]

#: Ops fused by the elementwise rule.
ELEMENTWISE_OPS = frozenset(
    [c.OPERATION_NAME for c in BINARY_OPS + COMPARE_OPS]
    + [c.OPERATION_NAME for c in UNARY_OPS]
    + ["kiln.cast", "kiln.where"]
)
#: Reduction-like anchors.
REDUCTION_OPS = frozenset(["kiln.softmax", "kiln.layer_norm", "kiln.reduce_sum", "kiln.reduce_mean", "kiln.reduce_max"])



#: The ops a conv_pair group's first and second convolution groups may hold.
_PAIR_FIRST = frozenset(["kiln.conv2d", "kiln.relu"])
_PAIR_SECOND = frozenset(["kiln.conv2d", "kiln.relu", "kiln.reduce_mean", "kiln.reduce_sum"])

#: The fused kind of a group by its anchor (reductions: "reduction").
_ANCHOR_KINDS = {"kiln.matmul": "matmul_epilogue", "kiln.matmul_w8": "matmul_epilogue", "kiln.conv2d": "conv_epilogue"}


def fusion_role(op) -> str | None:
    """``"elementwise"``, ``"matmul"`` (a matmul or conv2d: anchors that take
    an epilogue), ``"reduction"`` or None (never fused)."""
    name = op.name
    if name in ELEMENTWISE_OPS:
        return "elementwise"
    if name in _ANCHOR_KINDS:
        return "matmul"
    if name in REDUCTION_OPS:
        return "reduction"
    return None


def _dims(value):
    dims = tuple(tensor_info(value.type).dims)
    return None if any(d.is_unknown for d in dims) else dims


def _keeps_prologue_apart(op) -> bool:
    """Whether reduction ``op`` (a ``reduce_*``) should not take its input's
    elementwise group as prologue: it reduces over a symbolic dim (its kernel
    cannot be split along that symbol, so the prologue's work would run on one
    thread) and its input is read elsewhere too (the prologue's values are
    stored anyway).  A dynamic-quantized model's ``gelu`` over ``[B, L, 3072]``
    fused into the next DynamicQuantizeLinear's ``reduce_max`` ran 7 ms a layer
    at B = 8, 4 ms apart."""
    x = op.operands[0]
    if not op.name.startswith("kiln.reduce_") or len(list(x.uses)) < 2:
        return False
    dims = _dims(x)
    if dims is None:
        return False
    axes = list(ir.DenseI64ArrayAttr(op.attributes["axes"])) if "axes" in op.attributes else []
    axes = [int(a) % len(dims) for a in axes] or list(range(len(dims)))  # none: all of them
    return any(not dims[a].is_static for a in axes)


def _producer(value):
    owner = value.owner
    return None if isinstance(owner, ir.Block) else owner.operation


def _inlined_constant(value) -> bool:
    """Single-element constants are cloned into the groups using them."""
    p = _producer(value)
    if p is None or p.name != "kiln.constant":
        return False
    return all(d.is_static for d in tensor_info(value.type).dims) and _numel(value) == 1


def _numel(value) -> int:
    n = 1
    for d in tensor_info(value.type).dims:
        n *= d.value
    return n


@dataclass(eq=False)
class _Group:
    ops: list = field(default_factory=list)
    anchor: object = None
    # The anchor and the ops downstream of it (the epilogue).
    post: set = field(default_factory=set)
    # The rule that formed the group when it is not the anchor's (conv_pair).
    rule: str | None = None

    @property
    def kind(self) -> str:
        if self.rule is not None:
            return self.rule
        if self.anchor is None:
            return "elementwise"
        return _ANCHOR_KINDS.get(self.anchor.name, "reduction")


class _Graph:
    """Block-level queries: op order, convexity, group boundaries."""

    def __init__(self, block):
        self.block = block
        self.order = {op: i for i, op in enumerate(block_ops(block))}

    def boundary(self, members: set):
        """(inputs, outputs) of a set of ops: outside values read, results read outside."""
        inputs, outputs = {}, {}
        for op in sorted(members, key=self.order.__getitem__):
            for v in op.operands:
                p = _producer(v)
                if (p is None or p not in members) and not _inlined_constant(v):
                    inputs.setdefault(v, None)
            for r in op.results:
                if any(u.owner.operation not in members for u in r.uses):
                    outputs.setdefault(r, None)
        return list(inputs), list(outputs)

    def convex(self, members: set) -> bool:
        """True when no path leaves ``members`` and comes back into it."""
        lo = min(self.order[o] for o in members)
        seen: set = set()
        stack = []
        for op in members:
            for v in op.operands:
                p = _producer(v)
                if p is not None and p not in members and p in self.order and self.order[p] > lo:
                    stack.append(p)
        while stack:
            op = stack.pop()
            if op in seen:
                continue
            seen.add(op)
            for v in op.operands:
                p = _producer(v)
                if p is None or p not in self.order or self.order[p] < lo:
                    continue
                if p in members:
                    return False
                stack.append(p)
        return True

    def fits(self, members: set) -> bool:
        """Convex and within the operand/result limits of ``kiln.fused``."""
        if not self.convex(members):
            return False
        inputs, outputs = self.boundary(members)
        return len(inputs) <= MAX_VARIADIC and len(outputs) <= MAX_FUSED_RESULTS


@register_pass
class Fuse(Pass):
    """Group elementwise chains, matmul epilogues and reductions into kiln.fused ops."""

    name = "kiln-fuse"
    summary = "Group producer chains (elementwise, matmul/conv2d+epilogue, conv2d+global pool, reductions) into kiln.fused kernels"
    options = (Option("kinds", list, list(FUSED_KINDS), f"fusion rules to use: {', '.join(FUSED_KINDS)}"),)

    def run(self, module) -> None:
        kinds = set(self.option("kinds"))
        unknown = kinds - set(FUSED_KINDS)
        if unknown:
            raise KilnError(f"kiln-fuse: unknown kind(s) {', '.join(sorted(unknown))} (kinds: {', '.join(FUSED_KINDS)})")
        self.kinds = kinds
        for fn in functions(module):
            for block in fn.regions[0].blocks:
                self._fuse_block(block)

    # -- grouping -------------------------------------------------------------

    def _fuse_block(self, block) -> None:
        graph = _Graph(block)
        group_of: dict = {}
        for op in block_ops(block):
            role = fusion_role(op)
            if role is None:
                continue
            group = self._place(op, role, group_of, graph)
            for member in group.ops:
                group_of[member] = group
        groups = list(dict.fromkeys(group_of.values()))
        if "conv_pair" in self.kinds:
            groups = self._pair_convs(groups, group_of, graph)
        for g in (g for g in groups if len(g.ops) > 1):
            self._materialize(block, g)

    def _producer_groups(self, op, group_of) -> list:
        out = []
        for v in op.operands:
            p = _producer(v)
            g = group_of.get(p) if p is not None else None
            if g is not None and g not in out:
                out.append(g)
        return out

    def _place(self, op, role, group_of, graph) -> _Group:
        producers = self._producer_groups(op, group_of)
        if role == "elementwise":
            if self.kinds & {"matmul_epilogue", "conv_epilogue", "reduction"}:
                for g in producers:
                    if g.anchor is not None and self._epilogue_ok(op, g, graph):
                        g.ops.append(op)
                        g.post.add(op)
                        return g
            group = _Group([op])
            if "elementwise" in self.kinds or "reduction" in self.kinds:
                for g in producers:
                    if g.anchor is None:
                        self._try_merge(group, g, graph)
            return group
        if role == "reduction" and "conv_epilogue" in self.kinds:
            for g in producers:
                if self._pool_ok(op, g, graph):
                    g.ops.append(op)
                    g.post.add(op)
                    return g
        group = _Group([op], anchor=op, post={op})
        if role == "reduction" and "reduction" in self.kinds:
            p = _producer(op.operands[0])
            g = group_of.get(p) if p is not None else None
            if g is not None and g.anchor is None and not _keeps_prologue_apart(op):
                self._try_merge(group, g, graph)
        return group

    def _epilogue_ok(self, op, g: _Group, graph: _Graph) -> bool:
        rule = g.kind
        if rule not in self.kinds:
            return False
        if not any(_producer(v) in g.post for v in op.operands):
            return False  # not downstream of the anchor
        want = _dims(g.anchor.results[0])
        if want is None or _dims(op.results[0]) != want:
            return False
        return graph.fits(set(g.ops) | {op})

    @staticmethod
    def _pool_ok(op, g: _Group, graph: _Graph) -> bool:
        """Whether the reduction ``op`` ends the convolution group ``g`` as its
        spatial pool: a mean or sum over dims (2, 3) of the group's 4-D result
        (the anchor's shape), which nothing else in the group reads."""
        if g.kind != "conv_epilogue" or op.name not in ("kiln.reduce_mean", "kiln.reduce_sum"):
            return False
        x = op.operands[0]
        if _producer(x) not in g.post or _dims(x) != _dims(g.anchor.results[0]):
            return False
        if any(o.name in REDUCTION_OPS for o in g.ops):
            return False  # one pool a group
        axes = [int(a) % 4 for a in ir.DenseI64ArrayAttr(op.attributes["axes"])] if "axes" in op.attributes else []
        return sorted(axes) == [2, 3] and graph.fits(set(g.ops) | {op})

    @staticmethod
    def _pair_convs(groups: list, group_of: dict, graph: _Graph) -> list:
        """``groups`` with each conv_epilogue group that ends in a pool
        merged with the conv_epilogue group computing its convolution's input
        (its only output, read only there) into a conv_pair group, where both
        hold only the convolution, a ReLU and (the second) the pool, and the
        union stays convex and within the limits."""
        merged = set()
        for second in groups:
            if second.kind != "conv_epilogue" or not any(o.name in REDUCTION_OPS for o in second.ops):
                continue
            x = second.anchor.operands[0]
            first = group_of.get(_producer(x))
            if first is None or first is second or first in merged or first.kind != "conv_epilogue":
                continue
            if any(o.name not in _PAIR_FIRST for o in first.ops) or any(o.name not in _PAIR_SECOND for o in second.ops):
                continue  # the pair's call applies a ReLU and the second's pool, nothing else
            members = set(first.ops) | set(second.ops)
            if graph.boundary(set(first.ops))[1] != [x] or len(list(x.uses)) != 1 or not graph.fits(members):
                continue
            second.ops = sorted(members, key=graph.order.__getitem__)
            second.rule = "conv_pair"
            merged.add(first)
        return [g for g in groups if g not in merged]

    @staticmethod
    def _try_merge(group: _Group, other: _Group, graph: _Graph) -> None:
        members = set(group.ops) | set(other.ops)
        if graph.fits(members):
            group.ops = sorted(members, key=graph.order.__getitem__)
            other.ops = group.ops  # the other group is now this one

    # -- materialization ------------------------------------------------------

    def _materialize(self, block, group: _Group) -> None:
        graph = _Graph(block)  # orders change as groups are materialized
        members = set(group.ops)
        if any(op not in graph.order for op in members) or not graph.fits(members):
            return
        ops = sorted(members, key=graph.order.__getitem__)
        inputs, outputs = graph.boundary(members)
        first, last = ops[0], ops[-1]
        # Ops between the group's first and last op, in order (the positions
        # must be read before the group's ops move into the body).
        between = [op for op in block_ops(block)[graph.order[first] + 1 : graph.order[last]] if op not in members]
        fused = create_fused(inputs, [v.type for v in outputs], kind=group.kind, loc=last.location, ip=ir.InsertionPoint(last))
        fused_op = fused.operation
        fused_op.move_after(last)
        for v, r in zip(outputs, fused_op.results):
            v.replace_all_uses_except(r, ops)
        body = fused_op.regions[0].blocks[0]
        args = dict(zip(inputs, body.arguments))
        ip = ir.InsertionPoint(body)
        cloned: dict = {}
        for op in ops:
            for i, v in enumerate(op.operands):
                if v in args:
                    op.operands[i] = args[v]
                elif _inlined_constant(v) and _producer(v) not in members:
                    if v not in cloned:
                        cloned[v] = _producer(v).clone(ip=ip).results[0]
                    op.operands[i] = cloned[v]
        for op in ops:
            op.detach_from_parent()
            ip.insert(op)
        create_yield(outputs, loc=last.location, ip=ip)
        for v in cloned:
            p = _producer(v)
            if not list(v.uses):
                p.erase()
        self._move_dependents(between, fused_op)
        self.bump("groups fused")
        self.bump("ops fused", len(ops))
        self.bump(f"{group.kind} groups")

    @staticmethod
    def _move_dependents(between, fused_op) -> None:
        """Ops between the group's first and last op that read its results now
        read the fused op, which sits after the last one: move them after it."""
        tainted = {fused_op}
        anchor = fused_op
        for op in between:
            if any(_producer(v) in tainted for v in op.operands):
                op.move_after(anchor)
                anchor = op
                tainted.add(op)
