"""Fold the parts of an exported graph that depend on no input, before import.

Models compute some tensors from constants alone, at every call: torchvision's
Swin builds its shifted-window attention mask by writing window ids into
``new_zeros((H, W))`` slice by slice (``aten.slice_scatter`` / ``aten.copy``
after functionalization) and rolls its windows through an index
``fmod(arange(n) + shift, n)``.  Those ops had no kiln pattern and ran as
PyTorch fallbacks on every call, although their results never change.

:func:`fold_constant_subgraphs` evaluates such subgraphs once, in PyTorch,
and hands each result to its consumers as a ``get_attr`` constant, which the
importer imports as a literal.  A node folds when every node it reads is
itself folded or a lifted tensor constant (so nothing reaches it from an
input, a parameter, a buffer or a size of one), its op is deterministic, and it evaluates without
error.  Only the frontier is replaced (folded results that a non-folded node
reads), and only results that computed something from other folded nodes
(a bare ``full`` / ``arange`` already has a cheap kiln form) through an op
kiln does not convert (what kiln imports well keeps its form: the attention
matcher still sees a causal mask built from ``arange``).
"""

from __future__ import annotations

import torch

__all__ = ["FOLD_LIMIT", "fold_constant_subgraphs"]

#: The most elements of one folded result (larger ones stay computed: a
#: constant that big costs more as weights than as a kernel).
FOLD_LIMIT = 1 << 20


def _foldable(node: torch.fx.Node) -> bool:
    if node.op != "call_function":
        return False
    target = node.target
    tags = getattr(target, "tags", ())
    if torch.Tag.nondeterministic_seeded in tags:
        return False
    name = getattr(target, "__name__", "")
    # Checks are kept where they are (they return nothing worth folding).
    return not name.startswith(("_assert", "sym_constrain"))


def _rejected(node: torch.fx.Node, converts) -> bool:
    """Whether ``node`` is an ATen op that ``converts`` rejects (size arithmetic and getitem are not)."""
    from .export_fixes import mlir_op_name

    name = mlir_op_name(node.target)
    return name is not None and not converts(name)


#: Writes into a tensor (functionalized ``mask[a:b] = v``): kiln converts
#: them (``kiln.update_slice``), but into a constant never in place, so the
#: whole constant would be copied on every call; they fold.
_WRITES = {"aten::slice_scatter", "aten::copy", "aten::index_put", "aten::index_copy", "aten::select_scatter"}


def _writes(node: torch.fx.Node) -> bool:
    return isinstance(node.target, torch._ops.OpOverload) and node.target._schema.name in _WRITES


#: Fills that read only their first operand's dtype and device, not its
#: values (``x.new_zeros((6, 6))``: Swin's mask starts as one).  kiln converts
#: them whole, so the export's decomposition no longer makes them ``full``.
_FILLS_LIKE = frozenset({"aten::new_zeros", "aten::new_ones", "aten::new_full"})


def _data_inputs(node: torch.fx.Node) -> list:
    """The nodes whose values ``node`` reads: its inputs, less a fill's model operand."""
    ins = list(node.all_input_nodes)
    if isinstance(node.target, torch._ops.OpOverload) and node.target._schema.name in _FILLS_LIKE \
            and node.args and node.args[0] is not None and ins and ins[0] is node.args[0]:
        ins = ins[1:]
    return ins


def _arg_value(n: torch.fx.Node, values: dict):
    """``n``'s folded value; a node folding does not read (a fill's model
    operand) stands in as an empty tensor of its dtype."""
    if n in values:
        return values[n]
    val = n.meta.get("val")
    return torch.empty(0, dtype=val.dtype if isinstance(val, torch.Tensor) else torch.float32)


def fold_constant_subgraphs(ep: torch.export.ExportedProgram, converts=None, limit: int = FOLD_LIMIT) -> int:
    """Replace input-independent subgraphs of ``ep``'s graph by constants; returns how many results were folded.

    ``converts``: a predicate on torch-mlir op names (the ops kiln converts);
    with it, only subgraphs holding an op it rejects are folded, so what kiln
    imports well already keeps its form (a causal mask built from ``arange``
    is still recognized as one).

    Each use gets its own ``get_attr`` node (torch-mlir's importer binds a
    ``get_attr`` value once per node); they share one tensor, so the
    module holds one literal.  The graph left is for the importer only
    (torch.export's verifier rejects tensor ``get_attr`` nodes): apply it
    after the decompositions.
    """
    graph, gm = ep.graph, ep.graph_module
    values: dict[torch.fx.Node, object] = {}
    # Lifted tensor constants (``mask[a:b] = 1`` lifts the 1) are constants;
    # parameters and buffers are not folded into (weights stay weights).
    lifted = ep.graph_signature.inputs_to_lifted_tensor_constants
    # Whether a folded node's subgraph holds an op kiln would not convert.
    needed: dict[torch.fx.Node, bool] = {}
    for node in graph.nodes:
        if node.op == "placeholder" and lifted.get(node.name) in ep.constants:
            values[node] = ep.constants[lifted[node.name]]
            needed[node] = False
            continue
        if not _foldable(node) or any(n not in values for n in _data_inputs(node)):
            continue
        args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), lambda n: _arg_value(n, values))
        try:
            with torch.no_grad():
                values[node] = node.target(*args, **kwargs)
        except Exception:  # noqa: BLE001 - an op that does not evaluate here stays in the graph
            continue
        needed[node] = (converts is None or any(needed[n] for n in _data_inputs(node))
                        or _rejected(node, converts) or _writes(node))
    folded = 0
    for node, value in values.items():
        if not needed[node] or not isinstance(value, torch.Tensor) or value.numel() > limit or not _data_inputs(node):
            continue
        users = [u for u in node.users if u not in values]
        if not users:
            continue
        tensor = value.detach().contiguous().clone()
        attr = f"_kiln_folded_{folded}"
        # A buffer of the graph module, so FX knows the get_attr target.
        gm.register_buffer(attr, tensor, persistent=False)
        for user in users:
            def getter(n, user=user, attr=attr, node=node):
                if n is not node:
                    return n
                with graph.inserting_before(user):
                    g = graph.get_attr(attr)
                g.meta["val"] = node.meta.get("val")
                return g

            # One getter per occurrence: the importer binds each get_attr node once.
            user.args, user.kwargs = torch.fx.node.map_arg((user.args, user.kwargs), getter)
        folded += 1
    if folded:
        graph.eliminate_dead_code()
        gm.recompile()
    return folded
