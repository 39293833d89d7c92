"""PyTorch frontend: ``torch.export`` -> torch-mlir FX importer -> kiln.

The program is exported with the caller's ``dynamic_shapes``, decomposed to
core ATen *except* for the high-level ops kiln has (linear, layer_norm, gelu,
silu, scaled_dot_product_attention), imported with its symbolic shape
expressions (``torch.symbolic_int`` / ``torch.bind_symbolic_shape``), and
converted by ``convert-torch-to-kiln``.  torch names its symbols ``s77``; they
are renamed back to the user's ``Dim`` names from ``dynamic_shapes``.
"""

from __future__ import annotations

import logging
import time
import warnings

from .. import progress
from .._mlir import ir
from ..context import make_context
from ..errors import ConversionError, KilnError, UnsupportedError
from .names import name_signature
from .report import ImportReport, finish

__all__ = ["import_torch", "export_program"]

#: Stage times at INFO (kiln.compile's first stages), as the ONNX importer's.
_log = logging.getLogger("kiln.import")

def _converts(name: str) -> bool:
    """Whether convert-torch-to-kiln has a pattern (or a structural rule) for torch-mlir op ``name``."""
    from ..conversions.torch_to_kiln.aten import ATEN_PATTERNS
    from ..conversions.torch_to_kiln.driver import STRUCTURAL

    return name in ATEN_PATTERNS or name in STRUCTURAL


def _check_dynamic_shapes(dynamic_shapes) -> None:
    def visit(spec):
        if isinstance(spec, dict):
            for d in spec.values():
                visit(d)
        elif isinstance(spec, (list, tuple)):
            for d in spec:
                visit(d)
        elif spec is not None and hasattr(spec, "min") and hasattr(spec, "max"):
            lo, hi = getattr(spec, "min", None), getattr(spec, "max", None)
            if lo is not None and hi is not None and lo > hi:
                raise KilnError(f"symbol '{spec.__name__}' has min {lo} > max {hi}")

    visit(dynamic_shapes)


def export_program(module, example_args, dynamic_shapes=None):
    """``torch.export.export`` with kiln's decompositions; KilnError when torch rejects it."""
    import torch

    _check_dynamic_shapes(dynamic_shapes)
    if not isinstance(example_args, tuple):
        example_args = tuple(example_args) if isinstance(example_args, list) else (example_args,)
    example_args = _unaliased(example_args)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if isinstance(module, torch.export.ExportedProgram):
                ep = module
            else:
                ep = torch.export.export(module, example_args, dynamic_shapes=dynamic_shapes)
            # The fixes torch-mlir's importer needs on real models (view ->
            # reshape, non-persistent buffers), around kiln's decompositions.
            from .export_fixes import prepare_exported_program

            return prepare_exported_program(ep, converts=_converts)
    except KilnError:
        raise
    except Exception as e:  # torch raises many types; the user wants one
        raise KilnError(f"torch.export failed for {type(module).__name__}: {type(e).__name__}: "
                        f"{_export_message(e)}") from None


def _export_message(e: Exception) -> str:
    """torch.export's message, short: its first line, and for violated
    constraints the lines that say which values fail and the suggested
    ``Dim`` fixes (the part a user acts on: "L <= 512 ... guard L != 512"),
    without the advice on logs and ``draft_export`` that follows."""
    lines = str(e).strip().splitlines()
    if not lines:
        return ""
    keep = [lines[0]]
    for line in lines[1:]:
        if line.startswith("The error above occurred") or len(keep) >= 12:
            break
        if line.strip():
            keep.append(line.rstrip())
    return "\n".join(keep)


def _unaliased(example_args: tuple) -> tuple:
    """``example_args`` with every tensor that shares memory with an earlier
    one cloned: torch.export traces aliased inputs as one value, so
    ``f(x, x, x)`` would export ``f(q, k, v)`` as a function of ``v`` alone
    (the others unused), silently wrong for distinct inputs."""
    import torch

    seen, out = set(), []
    for a in example_args:
        if isinstance(a, torch.Tensor) and a.numel() > 0:
            key = a.untyped_storage().data_ptr()
            if key in seen:
                a = a.clone()
            seen.add(key)
        out.append(a)
    return tuple(out)


def symbol_names(ep, dynamic_shapes) -> dict[str, str]:
    """torch's symbol names (``s77``) -> the user's Dim names (``B``), from
    the user inputs' dims in the exported program."""
    if dynamic_shapes is None:
        return {}
    specs = list(dynamic_shapes.values()) if isinstance(dynamic_shapes, dict) else list(dynamic_shapes)
    user_inputs = [
        s.arg.name for s in ep.graph_signature.input_specs if s.kind.name == "USER_INPUT"
    ]
    nodes = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    out = {}
    for spec, name in zip(specs, user_inputs):
        val = nodes[name].meta.get("val")
        if val is None or spec is None:
            continue
        items = spec.items() if isinstance(spec, dict) else enumerate(spec)
        for axis, d in items:
            if d is None or not hasattr(d, "__name__"):
                continue
            s = val.shape[axis]
            text = str(s)
            if text.isidentifier() and text not in out:
                out[text] = d.__name__
            elif hasattr(d, "root") and hasattr(s, "node"):
                # A derived Dim (``2*L``): its one free symbol is the root's,
                # which may appear in no input as itself.
                free = [str(f) for f in s.node.expr.free_symbols]
                if len(free) == 1 and free[0] not in out:
                    out[free[0]] = d.root.__name__
    return out


def mark_mutated_inputs(mod, ep) -> None:
    """Record which results are new values of user inputs (``cache[:, :, p:p+L]
    = new`` in ``forward``: torch.export's ``user_inputs_to_mutate``) as the
    ``kiln.mutated_input`` (input number) of those results: ``kiln.compile``
    writes them into the caller's arrays in place, as torch does, instead of
    returning them (see :func:`kiln.compile_prepare.donations`).  torch-mlir's
    importer returns the program's outputs in the signature's order."""
    from .names import MUTATED_INPUT

    sig = ep.graph_signature
    if not sig.user_inputs_to_mutate:
        return
    users = [s.arg.name for s in sig.input_specs if s.kind.name == "USER_INPUT"]
    marks = {}
    for j, spec in enumerate(sig.output_specs):
        if spec.kind.name == "USER_INPUT_MUTATION" and spec.target in users:
            marks[j] = users.index(spec.target)
    for op in mod.body.operations:
        fn = op.operation
        if fn.name != "func.func":
            continue
        n = len(ir.FunctionType(ir.TypeAttr(fn.attributes["function_type"]).value).results)
        if n != len(sig.output_specs):
            raise ConversionError(f"torch-mlir returned {n} results for {len(sig.output_specs)} outputs "
                                  "of a program that mutates its inputs")
        old = list(ir.ArrayAttr(fn.attributes["res_attrs"])) if "res_attrs" in fn.attributes else []
        attrs = []
        for j in range(n):
            entries = {}
            if j < len(old):
                d = ir.DictAttr(old[j])
                entries = {d[k].name: d[k].attr for k in range(len(d))}
            if j in marks:
                entries[MUTATED_INPUT] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), marks[j])
            attrs.append(ir.DictAttr.get(entries))
        fn.attributes["res_attrs"] = ir.ArrayAttr.get(attrs)


def import_torch(module, example_args, dynamic_shapes=None, fallback=True, *, with_report=False):
    """Import a ``torch.nn.Module`` (or ExportedProgram) into kiln.

    ``dynamic_shapes`` is as for ``torch.export.export`` (one ``{axis: Dim}``
    per argument); every dynamic dim becomes a ``kiln.symbol`` with the Dim's
    name and range, and derived dims become dim expressions.  Ops kiln cannot
    lower become ``kiln.fallback`` unless ``fallback=False``, which raises
    :class:`~kiln.errors.UnsupportedError` listing them.

    Returns the verified kiln ``ir.Module``; its context (``module.context``,
    made by ``make_context(torch=True)``) is the one to use with it.  With
    ``with_report=True`` returns ``(module, ImportReport)``.
    """
    from torch_mlir.extras.fx_importer import FxImporter

    from .export_fixes import install_importer_fixes
    from .torch_literals import FastLiterals

    install_importer_fixes()
    progress.stage("export", detail="torch.export")
    start = time.perf_counter()
    ep = export_program(module, example_args, dynamic_shapes)
    _log.info("torch.export of %s: %.3f s", type(module).__name__, time.perf_counter() - start)
    names = symbol_names(ep, dynamic_shapes)
    ctx = make_context(torch=True)
    with ctx, ir.Location.unknown():
        # Weights are copied into their blobs directly, not through
        # tensor.tolist() (see torch_literals).
        importer = FxImporter(context=ctx, hooks=FastLiterals())
        progress.stage("import", detail="torch-mlir FX importer")
        start = time.perf_counter()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                importer.import_frozen_program(ep, func_name="main", import_symbolic_shape_expressions=True)
        except Exception as e:
            raise ConversionError(f"torch-mlir's FX importer failed: {type(e).__name__}: {e}") from None
        mod = importer.module
        _log.info("torch-mlir FX import: %.3f s", time.perf_counter() - start)
        report = finish(mod, fallback=fallback, symbol_names=names, source=type(module).__name__)
        # forward()'s parameter names: shape errors say input 'x', and model(x=...) works.
        name_signature(mod, [s.arg.name for s in ep.graph_signature.input_specs if s.kind.name == "USER_INPUT"])
        mark_mutated_inputs(mod, ep)
    return (mod, report) if with_report else mod


__all__ += ["ImportReport", "UnsupportedError"]
