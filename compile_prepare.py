"""From a kiln module to what the runtime runs: partition, plan, split off
what PyTorch runs (compile time).

:func:`prepare` runs the ``kiln-infer-shapes``, ``kiln-partition`` and
``kiln-plan-memory`` passes over a kiln module and returns a
:class:`~kiln.runtime.executor.Prepared`: the detached schedule, the memory
plan, the fallback kernels and the constants, which is all the runtime keeps.
:func:`view_aliases` picks the kernels that run as views.  These used to live
in ``runtime/executor.py``; they read MLIR and run passes, so they live on the
compiler's side of the layering (``test_layering.py``): a loaded artifact
imports none of this.
"""

from __future__ import annotations

import hashlib
import logging
import warnings

import numpy as np
import torch

from ._mlir import ir
from .backends.fallback_build import fallback_kernel
from .dialects.dims import dim
from .errors import KilnError
from .frontends.names import MUTATED_INPUT
from .locations import location_text
from .options import current
from .pipelines import Pipeline
from .runtime.executor import Prepared
from .transforms._graph import NUMPY_DTYPES, resource_array
from .transforms.plan_memory import expr_text, read_plan
from .transforms.row_split import split_symbol

__all__ = ["INPLACE_ATTR", "MUTATED_INPUT", "constant_tensor", "donations", "prepare", "view_aliases"]

#: Kernel function attribute (``array<i64>``, one entry per result): the
#: argument whose buffer the result is written into (-1: its own buffer);
#: see :func:`donations` and ``kiln-cpu-prepare``.
INPLACE_ATTR = "kiln.inplace"

_log = logging.getLogger("kiln.compile")


def constant_tensor(op) -> torch.Tensor:
    """The data of a ``kiln.constant`` op as a torch tensor (a splat is expanded).

    A ``dense_resource`` constant is read through
    :func:`~kiln.transforms._graph.resource_array` and shared, not copied:
    that array is kiln's own (the private copy its frontend or a fold made
    it from, or its blob printed alone), never written (kernels write no
    constant), and a copy doubled the memory a model's weights take.
    """
    attr = op.operation.attributes["value"]
    t = ir.RankedTensorType(attr.type)
    if str(t.element_type) == "bf16":
        return _bf16_tensor(op, attr, tuple(t.shape))
    shape, dtype = tuple(t.shape), NUMPY_DTYPES[str(t.element_type)]
    if isinstance(attr, ir.DenseElementsAttr):
        if attr.is_splat:
            splat = attr.get_splat_value()
            return torch.from_numpy(np.full(shape, getattr(splat, "value", splat), dtype=dtype))
        return torch.from_numpy(np.array(attr).reshape(shape).astype(dtype, copy=True))
    data = resource_array(op.operation, shape, dtype) if str(attr).startswith("dense_resource<") else None
    if data is None:
        raise KilnError(f"cannot read the data of constant {str(attr)[:60]}")
    with warnings.catch_warnings():  # read-only as numpy sees it: kernels only read constants
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return torch.from_numpy(data)


def _bf16_tensor(op, attr, shape) -> torch.Tensor:
    """A bf16 constant's data as a ``torch.bfloat16`` tensor (numpy has no bf16): a blob's bits
    viewed as bf16 without a copy, or a splat.  (The bindings cannot read other bf16
    ``DenseElementsAttr`` data; kiln-partition copies those into the kernels instead.)"""
    if isinstance(attr, ir.DenseElementsAttr) and attr.is_splat:
        splat = attr.get_splat_value()
        return torch.full(shape, float(getattr(splat, "value", splat)), dtype=torch.bfloat16)
    data = resource_array(op.operation, shape, np.uint16) if str(attr).startswith("dense_resource<") else None
    if data is None:
        raise KilnError(f"cannot read the data of constant {str(attr)[:60]}")
    with warnings.catch_warnings():  # read-only as numpy sees it: kernels only read constants
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return torch.from_numpy(data).view(torch.bfloat16)


def prepare(module, function: str, keep_text: bool = False) -> Prepared:
    """Partition and plan ``module`` (in place), then strip it down to the
    generated kernel functions (public, ready for the backend's lowering).

    ``keep_text`` keeps the partitioned, planned IR as ``Prepared.text``
    (None otherwise: printing the weights costs 0.2 s for the bench MLP).
    Must run inside the module's context.
    """
    # Verified once after the three passes (KILN_VERIFY_EACH=1: after each).
    partition = {"inline_limit": current().inline_limit}
    Pipeline().add("kiln-infer-shapes").add("kiln-partition", **partition).add("kiln-plan-memory").run(
        module, verify_each=None)
    schedule, plan = read_plan(module.operation, function)
    fallback, generated = {}, {}
    for i, step in enumerate(schedule.steps):
        if step.kind == "fallback":
            body = step.func.regions[0].blocks[0] if step.func is not None else None
            op = step.op if body is None else next(
                o for o in body.operations if o.operation.name == "kiln.fallback"
            )
            fallback[i] = fallback_kernel(op, step.name, None if body is None else _returned_results(op, body))
            # Where the model uses it, for report() and the compile's warning.
            step.sites = [[op.operation.opview.attr("op_name"), location_text(op.operation.location),
                           getattr(fallback[i], "runtime", "pytorch")]]
        elif step.kind == "user":  # a kiln.custom op: the kernel registered from user code (kiln.backends.user)
            from .backends.user import user_kernel

            body = step.func.regions[0].blocks[0] if step.func is not None else None
            op = step.op if body is None else next(o for o in body.operations if o.operation.name == "kiln.custom")
            fallback[i] = user_kernel(op, step.name, None if body is None else _returned_results(op, body))
        else:
            generated[i] = step.name
            if step.func is not None:
                step.split = split_symbol(step.func)
                if list(step.ops) == ["kiln.slice"] and len(step.inputs) == len(step.outputs) == 1:
                    step.view_offset = _slice_offset(step.func, schedule.values[step.inputs[0]].info.dims,
                                                     schedule.values[step.outputs[0]].info.dims)
    inplace, donated = donations(module.operation, function, schedule)
    text = str(module) if keep_text else None  # after donations() marked the in-place updates
    if inplace or donated:
        from .module import symbols_of
        from .transforms.plan_memory import plan_memory

        plan, _ = plan_memory(schedule, symbols_of(module.operation), inplace=inplace, donated=donated)
    constants = {vid: constant_tensor(op) for vid, op in schedule.constants.items()}
    detached = schedule.detached()
    from .transforms.precision import kernel_precisions

    for step, precision in zip(detached.steps, kernel_precisions(schedule)):  # for report()
        step.precision = precision
    keep = set(generated.values())
    for op in list(module.body.operations):
        op = op.operation
        if op.name != "func.func":
            continue
        name = ir.StringAttr(op.attributes["sym_name"]).value
        if name not in keep:
            op.erase()
            continue
        for attr in ("sym_visibility", "kiln.kernel", "kiln.group", "kiln.ops"):
            if attr in op.attributes:
                del op.attributes[attr]
    generated = _share_identical_kernels(module, generated)
    return Prepared(detached, plan, fallback, generated, constants, text)


def _share_identical_kernels(module, generated: dict[int, str]) -> dict[int, str]:
    """One kernel function for the steps whose kernels are the same function
    but for their name (a transformer's identical layers: their weights are
    arguments past kiln-partition's ``inline-limit``, so only the arguments
    differ); the others are erased and their steps call the first.  The
    lowering and LLVM then compile each distinct kernel once, and a packing
    slot in it keeps one packed copy per weight it is called with.  Returns
    ``generated`` with the shared names (each step keeps its own name in the
    schedule, for reports and profiles)."""
    first: dict[bytes, str] = {}
    shared: dict[str, str] = {}
    for op in list(module.body.operations):
        op = op.operation
        if op.name != "func.func":
            continue
        name = ir.StringAttr(op.attributes["sym_name"]).value
        op.attributes["sym_name"] = ir.StringAttr.get("kernel")  # printed under one name
        body = hashlib.sha256(op.get_asm(binary=True, assume_verified=True)).digest()  # (verified once already)
        op.attributes["sym_name"] = ir.StringAttr.get(name)
        if body in first:
            shared[name] = first[body]
            op.erase()
        else:
            first[body] = name
    if shared:
        _log.info("%d kernel(s) the same as another: compiled once", len(shared))
    return {i: shared.get(n, n) for i, n in generated.items()}


def view_aliases(schedule) -> dict[int, int]:
    """The kernels of ``schedule`` that can run as views, as ``{output value
    id: input value id}`` (for :func:`plan_memory`'s ``aliases``).

    A reshape of a contiguous tensor is a view of it, and every tensor the
    runtime hands a kernel is contiguous (arena views, fresh outputs, inputs
    made contiguous).  So is a slice that keeps whole trailing dims and cuts
    one dim after leading dims of extent 1 (q, k and v out of a stacked
    ``[3, B, H, L, D]``): a view from ``Step.view_offset``, which
    :func:`prepare` sets.  Only intermediates become
    views: a model output must own its memory.  ``KILN_RESHAPE_VIEWS=0``
    keeps every reshape and slice a kernel.
    """
    if not current().reshape_views:  # KILN_RESHAPE_VIEWS=0
        return {}
    out = {}
    values = schedule.values
    for step in schedule.steps:
        ops = list(step.ops)
        if step.kind != "generated" or ops not in (["kiln.reshape"], ["kiln.slice"]):
            continue
        if len(step.inputs) != 1 or len(step.outputs) != 1:
            continue
        src, dst = values[step.inputs[0]], values[step.outputs[0]]
        if not (dst.kind == "intermediate" and src.kind in ("intermediate", "input") and
                str(src.info.dtype) == str(dst.info.dtype)):
            continue
        if ops == ["kiln.slice"] and step.view_offset is None:
            continue
        out[dst.id] = src.id
    return out


def _returned_results(op, body) -> list[int]:
    """Which results of the fallback ``op`` its outlined kernel returns, in
    return order: kiln-partition keeps only the used ones (``sort(x).values``
    drops the indices), and the kernel writes those alone."""
    ret = body.operations[len(body.operations) - 1]
    results = list(op.operation.results)
    picked = []
    for v in ret.operands:
        k = next((k for k, r in enumerate(results) if r == v), None)
        if k is None:
            raise KilnError(f"fallback kernel of '{op.operation.opview.attr('op_name')}' returns a value it does not compute")
        picked.append(k)
    return picked


def _slice_offset(func, src_dims, dst_dims) -> str | None:
    """The element offset (dim-grammar text) at which the lone slice of the
    kernel ``func`` starts in its contiguous input, when its result is one
    contiguous run of it; else None."""
    ops = [op for op in func.regions[0].blocks[0].operations if op.operation.name == "kiln.slice"]
    if len(ops) != 1:
        return None
    attrs = ops[0].operation.opview.decoded_attrs()
    rank = len(src_dims)
    steps = attrs.get("steps") or [1] * len(attrs["axes"])
    cut = {}
    for start, axis, st in zip(attrs["starts"], attrs["axes"], steps):
        axis = axis % rank
        if st != 1 or start < 0:
            return None
        if dim(dst_dims[axis]) != dim(src_dims[axis]):
            cut[axis] = start
    if not cut:
        return "0"
    if len(cut) > 1:
        return None
    (axis, start), = cut.items()
    # Dims before the cut one must be 1 in the result (whole trailing dims: nothing else is cut).
    if any(not (dim(d).is_static and dim(d).value == 1) for d in dst_dims[:axis]):
        return None
    inner = 1
    for d in src_dims[axis + 1:]:
        inner = inner * dim(d).expr
    return expr_text(start * inner)


def donations(module_op, function: str, schedule) -> tuple[dict[int, int], dict[int, int]]:
    """Buffer donation: ``(inplace, donated)`` value-id maps for
    :func:`~kiln.runtime.memplan.plan_memory`, with each in-place kernel
    marked (:data:`INPLACE_ATTR`) for the backend.

    ``donated`` maps each model output that is the new value of a model
    input (:data:`MUTATED_INPUT`) to that input.  ``inplace`` maps the
    result of a ``kiln.update_slice`` returned by its kernel to the
    kernel's argument it updates (its dest), when that buffer may be
    overwritten: dest is an intermediate or a donated input (never a
    constant, nor a model output), the kernel reads it only there, and no
    later step reads it or a view of it.  Such a kernel writes the update
    into dest's buffer and copies nothing else of it, so a call's cost
    grows with the update, not with dest.
    """
    from .transforms.plan_memory import schedule_function

    fn = schedule_function(module_op, function)
    donated = {}
    if "res_attrs" in fn.attributes:
        for j, d in enumerate(ir.ArrayAttr(fn.attributes["res_attrs"])):
            d = ir.DictAttr(d)
            if MUTATED_INPUT in d and j < len(schedule.outputs):
                out, inp = schedule.outputs[j], schedule.inputs[ir.IntegerAttr(d[MUTATED_INPUT]).value]
                if out != inp and out not in donated:
                    donated[out] = inp
    views = view_aliases(schedule)

    def root(v):
        while v in views:
            v = views[v]
        return v

    last_read: dict[int, int] = {}
    for i, step in enumerate(schedule.steps):
        for v in step.inputs:
            last_read[root(v)] = i
    values, outputs = schedule.values, set(schedule.outputs)
    inplace = {}
    for i, step in enumerate(schedule.steps):
        if step.kind != "generated" or step.func is None or "kiln.update_slice" not in step.ops:
            continue
        block = step.func.regions[0].blocks[0]
        ret = block.operations[len(block.operations) - 1]
        marks = [-1] * len(ret.operands)
        for op in block.operations:
            if op.operation.name != "kiln.update_slice":
                continue
            dest = op.operation.operands[0]
            if not isinstance(dest.owner, ir.Block) or sum(1 for _ in dest.uses) != 1:
                continue
            k = ir.BlockArgument(dest).arg_number
            src = step.inputs[k]
            kind = values[src].kind
            if kind not in ("input", "intermediate") or src in outputs or last_read.get(root(src), i) > i:
                continue
            if kind == "input" and src not in donated.values():
                continue
            for r, v in enumerate(ret.operands):
                if v == op.operation.results[0] and marks[r] < 0 and step.outputs[r] not in inplace:
                    marks[r] = k
                    inplace[step.outputs[r]] = src
                    op.operation.attributes["in_place"] = ir.BoolAttr.get(True)
                    break
        if any(m >= 0 for m in marks):
            step.func.attributes[INPLACE_ATTR] = ir.DenseI64ArrayAttr.get(marks)
    return inplace, donated
