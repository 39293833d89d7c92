"""Fixes applied to a ``torch.export`` program before torch-mlir imports it.

torch-mlir's ``fx.export_and_import`` fails on the models most people deploy
(Hugging Face transformers built from a config).  Each fix below is for one
failure seen here; the case that needed it is named in its docstring.

The order matters, and :func:`prepare_exported_program` applies it:

1. :func:`views_to_reshapes` before decomposition;
2. ``run_decompositions`` (the decomposition table, minus what kiln keeps whole),
   skipped when it would change nothing kiln cares about
   (:func:`needs_decomposition`);
3. :func:`restore_non_persistent_buffers` after it (doing it before trips
   torch.export's verifier: "Non-persistent buffer ... is in the state dict");
4. :func:`list_state_to_get_attr` last (the graph it leaves is for the
   importer only: torch.export's verifier rejects tensor ``get_attr`` nodes).

One fix is to the importer itself rather than the program:
:func:`install_importer_fixes` teaches its symbolic-shape translation torch's
integer division (strided slices, stride-2 convolutions over a symbolic dim).
"""

from __future__ import annotations

import operator

import torch

__all__ = [
    "decomposition_table", "drop_runtime_asserts", "functionalize_inplace", "install_importer_fixes",
    "list_state_to_get_attr", "needs_decomposition", "prepare_exported_program", "restore_non_persistent_buffers",
    "views_to_reshapes",
]

#: Ops kept whole by the decomposition because kiln has a pattern for them:
#: every overload of each (``"aten.linear."``), or the one named
#: (``"aten.split.Tensor"``: kiln converts no other).  A program whose ops
#: all stay whole needs no decomposition pass at all
#: (:func:`needs_decomposition`): BERT's only other op was ``arange``, GPT-2's
#: and LLaMA's the mask code's ``diff``, ``new_ones``, ``&`` and ``to``.
KEEP_WHOLE = (
    "aten.linear.", "aten.layer_norm.", "aten.gelu.", "aten.silu.", "aten.scaled_dot_product_attention.",
    "aten.hardtanh.", "aten.adaptive_avg_pool2d.", "aten.flatten.", "aten.transpose.", "aten.unbind.",
    "aten.arange.default", "aten.squeeze.", "aten.split.Tensor",
    "aten.conv2d.default", "aten.unflatten.int", "aten.diff.default", "aten.new_ones.default",
    "aten.new_zeros.default", "aten.__and__.Tensor", "aten.to.dtype_layout", "aten.to.device",
    "aten.max_pool2d.default",
)


def views_to_reshapes(ep: torch.export.ExportedProgram) -> int:
    """Turn ``aten.view`` into ``aten.reshape`` in place; returns how many.

    GPT-2 (``transformers.GPT2Model``): the decomposition pass re-traces
    ``view(x, [-1, 64])`` of a *transposed* tensor under symbolic shapes and
    fails ("Cannot view a tensor with shape [s23, s27, 64] and strides (64,
    64*s23, 1)").  Tensors carry no strides in kiln, so ``reshape`` (which
    copies only when it must) has the same meaning and always traces.
    """
    count = 0
    for node in ep.graph.nodes:
        if node.op == "call_function" and node.target is torch.ops.aten.view.default:
            node.target = torch.ops.aten.reshape.default
            count += 1
    if count:
        ep.graph_module.recompile()
    return count


def restore_non_persistent_buffers(ep: torch.export.ExportedProgram) -> list[str]:
    """Make non-persistent buffers visible where torch-mlir looks for them.

    BERT (``embeddings.position_ids``) and LLaMA (``rotary_emb.inv_freq``)
    register buffers with ``persistent=False``.  torch.export keeps their
    values in ``ep.constants``, but torch-mlir's frozen import reads every
    buffer from ``ep.state_dict`` and fails with "Could not find state
    mapping for buffer".  Returns the names restored.
    """
    restored = []
    for name in ep.graph_signature.inputs_to_buffers.values():
        if name not in ep.state_dict and name in ep.constants:
            ep.state_dict[name] = ep.constants[name]
            restored.append(name)
    return restored


def list_state_to_get_attr(ep: torch.export.ExportedProgram) -> list[str]:
    """Make every parameter, buffer or constant that an op takes inside a
    list argument a ``get_attr`` of the graph module; returns their names.

    timm's LeViT and EfficientFormer index a parameter table with a buffer
    (``biases[:, idxs]``: ``aten.index.Tensor(biases, [None, idxs])``).
    torch-mlir's frozen import replaces each state placeholder by its
    ``torch.Tensor`` and imports a tensor found directly in an argument as a
    literal, but inside a list it expects graph nodes only: "Heterogeneous
    lists are not supported: expected vtensor, got <class 'torch.Tensor'>".
    A ``get_attr`` node is what its list path imports as a literal.  Uses
    outside lists keep the placeholder (the importer binds a ``get_attr``
    node's value once and asserts on a second top-level use); the literal is
    the same either way (one tensor, one blob).
    """
    sig = ep.graph_signature
    state = {**sig.inputs_to_parameters, **sig.inputs_to_buffers, **sig.inputs_to_lifted_tensor_constants}
    values = {**ep.state_dict, **ep.constants}
    graph, gm = ep.graph, ep.graph_module
    getters: dict[str, torch.fx.Node] = {}
    # After every placeholder: the importer binds placeholders to the
    # function's arguments in order.
    first_op = next(n for n in graph.nodes if n.op != "placeholder")

    def getter(node):
        if node.name not in getters:
            attr = f"_kiln_list_state_{len(getters)}"
            setattr(gm, attr, values[state[node.name]])
            with graph.inserting_before(first_op):
                getters[node.name] = graph.get_attr(attr)
        return getters[node.name]

    def in_list(arg):
        if isinstance(arg, (list, tuple)):
            return type(arg)(
                getter(a) if isinstance(a, torch.fx.Node) and a.op == "placeholder" and a.name in state
                and state[a.name] in values else in_list(a)
                for a in arg
            )
        return arg

    for node in list(graph.nodes):
        if node.op == "call_function":
            node.args = tuple(in_list(a) for a in node.args)
            node.kwargs = {k: in_list(v) for k, v in node.kwargs.items()}
    if getters:
        gm.recompile()
    return list(getters)


def _native_group_norm(x, weight, bias, n, c, hxw, groups, eps):
    """``aten.native_group_norm`` in ops kiln lowers (MobileViTv2's and
    PoolFormer's GroupNorm fell back: a core ATen op with three results).

    torch's own decomposition ends in ``as_strided`` with a symbolic size,
    which torch-mlir's importer rejects ("size must be a static int list");
    this one only reshapes, and only the channel dim: flattening the
    spatial dims and back types a symbolic ``W`` as ``(H*W)//H``.  The
    statistics are in the input's dtype, as eager's CPU kernel for fp32."""
    spatial = list(x.shape[2:])
    xg = x.reshape([n, groups, c // groups] + spatial)
    axes = list(range(2, xg.dim()))
    mean = xg.mean(dim=axes, keepdim=True)
    centered = xg - mean
    rstd = torch.rsqrt((centered * centered).mean(dim=axes, keepdim=True) + eps)
    out = (centered * rstd).reshape([n, c] + spatial)
    per_channel = [1, c] + [1] * (x.dim() - 2)
    if weight is not None:
        out = out * weight.reshape(per_channel)
    if bias is not None:
        out = out + bias.reshape(per_channel)
    return out, mean.reshape(n, groups), rstd.reshape(n, groups)


#: kiln's own decompositions of core ATen ops it has no pattern for.
KILN_DECOMPOSITIONS = {torch.ops.aten.native_group_norm.default: _native_group_norm}


def decomposition_table(keep=KEEP_WHOLE):
    """torch.export's default decomposition table without the ops kiln keeps
    whole (``keep``: op names or overloads, as :data:`KEEP_WHOLE`).

    Every overload of a kept op is popped by name: listing the table's keys
    would materialize each custom op's decomposition, which
    ``run_decompositions`` does again anyway (0.05 s per compile)."""
    table = torch.export.default_decompositions()
    # Core ATen ops torch.export keeps but kiln has no pattern for: without
    # a decomposition they become fallbacks.
    table.update(KILN_DECOMPOSITIONS)
    for entry in keep:
        _, op, overload = entry.split(".")
        packet = getattr(torch.ops.aten, op)
        for name in [overload] if overload else packet.overloads():
            table.pop(getattr(packet, name), None)
    return table


#: Python-level calls an exported graph makes on sizes; the importer maps them to torch ops.
_SIZE_ARITHMETIC = (operator.getitem, operator.mul, operator.add, operator.sub, operator.floordiv)


def mlir_op_name(target) -> str | None:
    """The torch-mlir name of an ATen overload (``torch.aten.add.Tensor``,
    ``torch.aten.linear`` for a default overload), None for anything else."""
    if not isinstance(target, torch._ops.OpOverload):
        return None
    name = "torch." + target._schema.name.replace("::", ".")
    return name if target._overloadname == "default" else f"{name}.{target._overloadname}"


def needs_decomposition(ep: torch.export.ExportedProgram, table, converts) -> bool:
    """Whether ``ep`` must go through ``run_decompositions`` before import.

    It need not when no op of its graph is in ``table`` and ``converts(name)``
    holds for each (its torch-mlir name): the pass would re-trace the whole
    program (0.8 of the bench transformer's 1.3 s warm compile) and change
    nothing.  A program that mutates buffers or inputs, or calls anything
    but ATen overloads and size arithmetic, is decomposed as before.
    """
    sig = ep.graph_signature
    if sig.buffers_to_mutate or sig.user_inputs_to_mutate:
        return True
    # Only ATen overloads get this far, and torch's lazy table holds all of
    # those in its ``decomp_table`` from the start: asking the table itself
    # would first materialize every custom op's decomposition (0.12 s).
    aten_table = getattr(table, "decomp_table", table)
    for node in ep.graph.nodes:
        if node.op != "call_function" or node.target in _SIZE_ARITHMETIC:
            continue
        name = mlir_op_name(node.target)
        if name is None or not converts(name):
            return True
        if node.target in aten_table and node.target is not torch.ops.aten.sym_size.int:
            return True  # sym_size is in torch's table, yet the decomposed graph keeps it
    return False


#: In-place ops of the training IR and their functional twins (``nn.ReLU(inplace=True)``,
#: ``out += identity``: torchvision's ResNet and MobileNetV2).
_FUNCTIONAL = {
    "relu_.default": "relu.default", "hardtanh_.default": "hardtanh.default", "silu_.default": "silu.default",
    "sigmoid_.default": "sigmoid.default", "tanh_.default": "tanh.default", "add_.Tensor": "add.Tensor",
    "sub_.Tensor": "sub.Tensor", "mul_.Tensor": "mul.Tensor", "div_.Tensor": "div.Tensor",
}


def _returns_alias(node) -> bool:
    """Whether ``node`` (an op call) returns a view or alias of an operand."""
    schema = getattr(node.target, "_schema", None)
    return schema is None or any(r.alias_info is not None for r in schema.returns)


def _same_dtype(node, x) -> bool:
    """Whether the functional twin of ``node`` (an in-place op on ``x``) keeps
    ``x``'s dtype: its other tensors have it (an in-place op keeps the
    dtype; ``add`` would promote an f16 ``x`` plus an f32 tensor), and a
    number operand meets a floating ``x``."""
    val = x.meta.get("val")
    if not isinstance(val, torch.Tensor):
        return False
    for a in list(node.args[1:]) + list(node.kwargs.values()):
        if isinstance(a, torch.fx.Node):
            other = a.meta.get("val")
            if not isinstance(other, torch.Tensor) or other.dtype != val.dtype:
                return False
        elif isinstance(a, (int, float)) and not isinstance(a, bool) and not val.dtype.is_floating_point:
            return False
    return True


def functionalize_inplace(ep: torch.export.ExportedProgram) -> int:
    """Rewrite in-place ops on fresh intermediates into their functional
    twins (:data:`_FUNCTIONAL`); returns how many.

    ``y = relu_(x)`` where ``x`` is computed in the graph by an op that
    returns a new tensor, and nothing takes a view of ``x``, is ``y =
    relu(x)`` with every later use of ``x`` reading ``y``: what
    functionalization makes of it, without ``run_decompositions`` tracing
    the whole program again for it.  An in-place op on an input, a
    parameter, a buffer or a view, or one that mixes dtypes, is left to the
    decomposition.
    """
    graph = ep.graph_module.graph
    order = {n: i for i, n in enumerate(graph.nodes)}
    count = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        name = f"{node.target._schema.name.split('::')[1]}.{node.target._overloadname}"
        if name not in _FUNCTIONAL or not node.args:
            continue
        x = node.args[0]
        if not isinstance(x, torch.fx.Node) or x.op != "call_function" or _returns_alias(x) or not _same_dtype(node, x):
            continue
        if any(u is not node and u.op == "call_function" and _returns_alias(u) for u in x.users):
            continue  # a view of x would see the write
        op, overload = _FUNCTIONAL[name].split(".")
        with graph.inserting_before(node):
            y = graph.call_function(getattr(getattr(torch.ops.aten, op), overload), node.args, node.kwargs)
        y.meta = dict(node.meta)
        order[y] = order[node]  # where it stands: reads of x before it keep x
        node.replace_all_uses_with(y)
        later = [u for u in x.users if u is not y and order.get(u, len(order)) > order[node]]
        for user in later:
            user.replace_input_with(x, y)
        graph.erase_node(node)
        count += 1
    if count:
        ep.graph_module.recompile()
    return count


def prepare_exported_program(ep: torch.export.ExportedProgram, table=None, converts=None):
    """Apply every fix and the decompositions; returns the program to import.

    Import the result with torch-mlir's importer *without* decomposing again
    (``decomposition_table={}``).  ``table``: the decompositions (default
    :func:`decomposition_table`).  ``converts``: a predicate on torch-mlir op
    names (the ops the converter handles); with it, a program that needs no
    decomposition (:func:`needs_decomposition`) skips it.
    """
    views_to_reshapes(ep)
    functionalize_inplace(ep)
    table = decomposition_table() if table is None else table
    if converts is None or needs_decomposition(ep, table, converts):
        ep = ep.run_decompositions(table)
    restore_non_persistent_buffers(ep)
    drop_runtime_asserts(ep)
    list_state_to_get_attr(ep)
    # Input-independent subgraphs with an op kiln rejects (Swin's attention mask) become constants.
    from .constant_fold import fold_constant_subgraphs

    fold_constant_subgraphs(ep, converts)
    return ep


def drop_runtime_asserts(ep: torch.export.ExportedProgram) -> int:
    """Erase ``aten._assert_scalar`` nodes and the size arithmetic only they use; returns how many.

    A program exported with ``prefer_deferred_runtime_asserts_over_guards``
    (a KV-cache decode step, :mod:`kiln.lm.export`: torch cannot prove
    ``Min(16*P + 16, 32*P + 32) == 16*P + 16`` for ``repeat_kv`` over
    ``cat(past, new)``) keeps such guards as assertions over ``sym_min``,
    which torch-mlir's importer rejects ("Unimplemented call_function:
    sym_min").  The converter drops ``_assert_scalar`` anyway (kiln checks
    shapes against its symbols), so erasing them here loses nothing.
    """
    graph = ep.graph_module.graph
    asserts = [n for n in graph.nodes if n.op == "call_function" and n.target is torch.ops.aten._assert_scalar.default]
    for node in asserts:
        graph.erase_node(node)
    if asserts:
        # Only the pure scalar arithmetic the assertions used: the rest of the
        # graph is left as is (eliminate_dead_code would also drop impure ops).
        changed = True
        while changed:
            changed = False
            for node in reversed(list(graph.nodes)):
                if node.op == "call_function" and not node.users and _is_size_arithmetic(node):
                    graph.erase_node(node)
                    changed = True
        ep.graph_module.recompile()
    return len(asserts)


def _is_size_arithmetic(node) -> bool:
    """A node computing a Python scalar from sizes (``sym_size``, ``+``, ``==``, ``sym_min``, ...)."""
    if node.target is torch.ops.aten.sym_size.int:
        return True
    module = getattr(node.target, "__module__", "") or ""
    return module in ("_operator", "operator") or node.target in (torch.sym_min, torch.sym_max, torch.sym_not)


def install_importer_fixes() -> None:
    """Teach torch-mlir's FX importer the integer divisions of torch's symbolic shapes.

    ``x[:, ::2]`` (a length ``FloorDiv(L + 1, 2)``) and a stride-2 or unpadded
    convolution over a symbolic dim (``FloorDiv(L - 3, 2) + 1``) failed with
    "Translation of sympy.Expr of type FloorDiv not implemented yet": the
    importer turns each shape into an affine map and knows only ``+ * **
    Mod``.  Affine maps have floor and ceil division, and kiln reads them back
    as its own ``/`` (``driver.affine_dims``), so the shapes stay exact.

    The importer's translation function is wrapped once, module-wide: the
    wrapper handles these cases and hands every other expression to the
    original, so any import through this process only gains cases.
    """
    import torch_mlir.extras.fx_importer as fx

    if getattr(fx.sympy_expr_to_semi_affine_expr, "_kiln_fixed", False):
        return
    from torch.utils._sympy import functions as tf
    from torch_mlir.ir import AffineCeilDivExpr, AffineFloorDivExpr, AffineModExpr

    original = fx.sympy_expr_to_semi_affine_expr
    binary = {
        tf.FloorDiv: AffineFloorDivExpr.get,
        tf.CleanDiv: AffineFloorDivExpr.get,  # exact division: floor is the same
        tf.CeilDiv: AffineCeilDivExpr.get,
        tf.PythonMod: AffineModExpr.get,
        tf.Mod: AffineModExpr.get,
    }

    def translate(expr, symbols_map):
        # The importer recurses through its module-level name, which is this
        # wrapper: nested divisions (FloorDiv(FloorDiv(L, 2), 2)) work too.
        build = binary.get(type(expr))
        if build is not None:
            a, b = expr.args
            return build(translate(a, symbols_map), translate(b, symbols_map))
        if isinstance(expr, tf.PowByNatural):
            return original(expr.args[0] ** expr.args[1], symbols_map)
        if isinstance(expr, tf.Identity):
            return translate(expr.args[0], symbols_map)
        return original(expr, symbols_map)

    translate._kiln_fixed = True
    fx.sympy_expr_to_semi_affine_expr = translate
