"""``kiln.compile``: a model in, a :class:`~kiln.runtime.CompiledModel` out.

The stages, each a registered pass (so ``kiln-opt --pass-pipeline`` and
``kiln-compile --stop-after=<stage>`` reproduce any of them from a file)::

    graph passes → kiln-select-kernels → kiln-partition → kiln-infer-shapes →
    convert-kiln-to-linalg → kiln-cpu-prepare → kiln-cpu-vectorize →
    kiln-cpu-bufferize → kiln-cpu-library-calls → kiln-cpu-library →
    kiln-cpu-lowp-gemm → kiln-cpu-flatten-elementwise → kiln-cpu-to-llvm →
    ExecutionEngine

One compilation serves every shape in the symbols' ranges: dims stay
dynamic down to the machine code, and the runtime binds them per call.
"""

from __future__ import annotations

import logging
import os
import threading
import time

from . import progress
from ._mlir import ir
from .backends.cpu.lowering import STAGES, lower
from .dialects.kiln import TensorType, dtype_name, tensor_info
from .dialects.kiln.data import checked_reshapes, module_checks
from .errors import KilnError, ParseError, UnsupportedError

__all__ = ["GRAPH_PIPELINE", "STAGES", "compilation_count", "compile", "load_source", "lower"]

#: The graph pipeline :func:`compile` runs first (``optimize=True``).
GRAPH_PIPELINE = "kiln-default-cpu"

#: STAGES (the lowering stages in order) and lower() are in kiln.backends.cpu.lowering.

_count_lock = threading.Lock()
_compilations = 0
#: Stages and their times at INFO, fallbacks as a WARNING (see kiln.options on logging).
_log = logging.getLogger("kiln.compile")


def compilation_count() -> int:
    """How many JIT compilations :func:`compile` has run in this process."""
    return _compilations


def _is_torch_module(source) -> bool:
    try:
        import torch
    except ImportError:  # pragma: no cover
        return False
    return isinstance(source, torch.nn.Module) or type(source).__name__ == "ExportedProgram"


def _is_onnx(source) -> bool:
    if isinstance(source, (str, os.PathLike)) and str(source).endswith(".onnx"):
        return True
    return type(source).__name__ == "ModelProto"


def load_source(source, example_args=None, dynamic_shapes=None, symbols=None, fallback=True) -> ir.Module:
    """The kiln module for ``source`` (torch module, ONNX model/path, kiln
    ``ir.Module``, MLIR text or a ``.mlir`` path), in a context of its own."""
    from .context import make_context
    from .module import parse_module

    if _is_torch_module(source):
        from .frontends import import_torch

        if example_args is None:
            raise KilnError("compiling a torch module needs example_args")
        return import_torch(source, tuple(example_args), dynamic_shapes, fallback=fallback)
    if _is_onnx(source):
        from .frontends import import_onnx

        return import_onnx(source, symbols=symbols, fallback=fallback)
    if isinstance(source, ir.Module):
        text, name = source.operation.get_asm(enable_debug_info=True), "<module>"
    elif isinstance(source, (str, os.PathLike)):
        text, name = str(source), "<string>"
        if "\n" not in text and os.path.exists(text):
            name = text
            try:
                with open(text, encoding="utf-8") as f:
                    text = f.read()
            except (OSError, UnicodeDecodeError) as e:
                raise ParseError(f"cannot read '{name}': {e}") from None
    else:
        raise KilnError(f"cannot compile a {type(source).__name__}: expected a torch.nn.Module, an ONNX model "
                        "or path, a kiln ir.Module or MLIR text")
    # A fresh context: the caller's module is not mutated, and one context
    # owns everything this compilation touches (MLIR_NOTES sharp edge 10).
    ctx = make_context()
    with ctx, ir.Location.unknown():
        module = parse_module(text, name)
    return module


def _entry(module: ir.Module):
    funcs = [op.operation for op in module.body.operations if op.operation.name == "func.func"]
    if not funcs:
        raise KilnError("the module has no function to compile")
    for f in funcs:
        if ir.StringAttr(f.attributes["sym_name"]).value in ("main", "forward"):
            return f
    return funcs[0]


def _signature(module: ir.Module):
    """Input specs and output value infos of the entry function (kiln types)."""
    from .runtime.contract import InputSpec
    from .runtime.model import ValueInfo

    fn = _entry(module)
    name = ir.StringAttr(fn.attributes["sym_name"]).value
    ftype = ir.FunctionType(ir.TypeAttr(fn.attributes["function_type"]).value)
    arg_names = _arg_names(fn, len(ftype.inputs))
    inputs, outputs = [], []
    for i, t in enumerate(ftype.inputs):
        if not isinstance(t, TensorType):
            raise UnsupportedError(f"function '{name}' argument #{i} has type {t}, not a !kiln.tensor")
        info = tensor_info(t)
        inputs.append(InputSpec.make(arg_names[i], info.dims, dtype_name(info.dtype)))
    from .frontends.names import value_names

    out_names = value_names(fn, "res_attrs", len(ftype.results), "output")
    for j, t in enumerate(ftype.results):
        info = tensor_info(t)
        outputs.append(ValueInfo(out_names[j], tuple(info.dims), dtype_name(info.dtype)))
    return name, inputs, outputs


def _arg_names(fn, n: int) -> list[str]:
    from .frontends.names import value_names

    return value_names(fn, "arg_attrs", n, "arg")


def compile(source, example_args=None, dynamic_shapes=None, symbols=None, device="cpu", **options):  # noqa: A001
    """Compile ``source`` for ``device`` and return a :class:`~kiln.runtime.CompiledModel`.

    ``source`` is a ``torch.nn.Module`` (imported with ``example_args`` and
    ``dynamic_shapes`` through :func:`kiln.import_torch`), an ONNX model or
    path (``symbols`` names/ranges its dynamic dims, see
    :func:`kiln.import_onnx`), a kiln ``ir.Module``, MLIR text or a ``.mlir``
    path.  Options: ``vectorize`` (0 turns vectorization off) and
    ``keep_ir`` (keep each stage's IR text in ``model.ir``); the runtime's
    ``profiles`` (``[{"B": (min, opt, max)}, ...]``), ``policy`` outside them
    (``"error"``, ``"specialize"``, ``"generic"``), ``budget`` (specialized
    buckets per symbol), ``profiling`` (per-kernel times in the report) and
    ``fallback`` (False: an op kiln cannot lower is an error instead of a
    PyTorch kernel), ``optimize`` (the graph pipeline run first: ``True``
    for ``kiln-default-cpu``, a pipeline name or text, or False) and
    ``static_kernels`` (each profile and specialization also compiles its
    kernels with the dims static at its opt point and keeps those measured
    faster there: ``"auto"``; ``True`` keeps them all, ``False`` compiles
    none), ``arena_pool_bytes`` (what the pool of arenas keeps between
    calls, in bytes or as ``"512M"``; default twice the largest arena, at
    least 32 MiB; ``KILN_ARENA_POOL_BYTES`` overrides the default).  The
    settings of :class:`kiln.options.Options` that are compile keywords
    (:func:`kiln.options.compile_keywords`) override the environment:
    ``threads`` and ``pin`` for the process (the native pool is
    process-wide: it is resized now, and ``report()["threads"]`` shows it),
    the others (``fast``, ``small_m``, ``cache_dir``, ...) for this compile.  The
    graph is split into kernels by ``kiln-partition`` and run out of one
    arena planned by ``kiln-plan-memory``.

    The model is callable on numpy arrays or torch CPU tensors and returns
    the same kind; one compilation serves every shape in the symbols' ranges.
    """
    from .options import compile_keywords, configure, using

    settings = {k: options.pop(k) for k in list(options) if k in compile_keywords()}
    if settings:  # runtime ones for the process, the rest for this compile (kiln.options)
        pool = {k: settings.pop(k) for k in ("threads", "pin") if k in settings}
        if pool:
            configure(**pool)
        with using(**settings):
            # _settings: what a model compiled later, at call time, compiles with (value inputs).
            return compile(source, example_args, dynamic_shapes, symbols, device,
                           _settings={**pool, **settings}, **options)
    later = options.pop("_settings", None) or {}
    if _is_onnx(source) and not options.pop("_values_resolved", False):
        valued = _value_input_model(source, example_args, dynamic_shapes, symbols, device, {**options, **later})
        if valued is not None:
            return valued
    options.pop("value_specializations", None)
    if device == "cuda":  # the Triton backend (TRITON_INTERPRET=1 runs it on CPU)
        from .backends.triton.model import compile_cuda

        return compile_cuda(source, example_args, dynamic_shapes, symbols, **options)
    if device != "cpu":
        raise UnsupportedError(f"device '{device}' is not supported by kiln.compile (only 'cpu' and 'cuda')")
    # Each stage's seconds (export, import, graph passes, ..., LLVM) for report()["compile_stages_s"].
    with progress.StageClock() as clock:
        model = _compile_cpu(source, example_args, dynamic_shapes, symbols, options)
    model.runtime.compile_stages_s = clock.seconds
    _log.info("compile stages: %s", progress.format_stages(clock.seconds))
    return model


def _compile_cpu(source, example_args, dynamic_shapes, symbols, options: dict):
    """:func:`compile` for ``device="cpu"`` once the settings and value inputs are resolved."""
    global _compilations
    from .backends.cpu import CpuKernel, jit
    from .backends.cpu.jit import remember_key
    from .compile_prepare import prepare
    from .module import symbols_of
    from .runtime.executor import ModelRuntime
    from .runtime.model import CompiledModel, Step, ValueInfo
    from .transforms.precision import with_precision

    unknown = set(options) - {"vectorize", "keep_ir", "profiles", "policy", "budget", "profiling", "fallback",
                              "optimize", "static_kernels", "arena_pool_bytes", "precision"}
    if unknown:
        raise KilnError(f"unknown kiln.compile option(s): {', '.join(sorted(unknown))}")
    static_kernels = options.get("static_kernels", "auto")
    if not (static_kernels == "auto" or isinstance(static_kernels, bool)):
        raise KilnError(f"static_kernels must be 'auto', True or False, got {static_kernels!r}")
    start = time.perf_counter()
    progress.stage("import")
    module = load_source(source, example_args, dynamic_shapes, symbols, fallback=options.get("fallback", True))
    _log.info("import (%s): %.3f s", type(source).__name__, time.perf_counter() - start)
    engine = None
    with module.context, ir.Location.unknown():
        syms = symbols_of(module.operation)
        fname, inputs, outputs = _signature(module)
        # Taken before the graph passes, which may fold a reshape away: its
        # check is the model's (ONNX Runtime would refuse those values too).
        checks = checked_reshapes(module.operation) + module_checks(module.operation)
        kept = {}
        if options.get("keep_ir"):
            kept["kiln"] = str(module)
        # Kernels registered from user code for kiln ops replace kiln's code
        # (kiln-select-kernels): before the graph passes fuse those ops away.
        from .backends.select_kernels import select_user_kernels

        select_user_kernels(module)
        optimize = options.get("optimize", True)
        if optimize:
            # The graph passes (kiln-default-cpu, or the pipeline text given).
            from .pipelines import Pipeline

            name = optimize if isinstance(optimize, str) else GRAPH_PIPELINE
            graph = Pipeline.parse(name) if "(" in name else Pipeline.named(name)
            fuse = _late_fuse(name)
            if fuse is not None:  # decompositions of kiln ops from user code: after kiln-simplify, before kiln-fuse
                graph = Pipeline.named(name, without=["kiln-fuse"])
            # precision="bf16": kiln-reduce-precision joins the graph passes (kiln.transforms.precision).
            graph = with_precision(graph, options.get("precision", "fp32"))
            t = time.perf_counter()
            progress.stage("graph passes", detail=name)
            graph.run(module, verify_each=None)  # verified once at the end (KILN_VERIFY_EACH=1: per pass)
            if fuse is not None:
                select_user_kernels(module)
                Pipeline.parse(f"builtin.module({fuse})").run(module, verify_each=None)
            _log.info("graph passes (%s): %.3f s", name, time.perf_counter() - t)
            if options.get("keep_ir"):
                kept["optimized"] = str(module)
        elif options.get("precision", "fp32") != "fp32":
            with_precision(None, options["precision"]).run(module, verify_each=None)
        # kiln-partition + kiln-plan-memory: the schedule, the arena plan and
        # the fallback kernels come out; the module keeps the generated kernels.
        # And for the ops the graph passes made (kiln.attention); kiln's library kernels are chosen here.
        from .backends.select_kernels import select_kernels

        select_kernels(module)
        t = time.perf_counter()
        progress.stage("partition + memory plan")
        prepared = prepare(module, fname, keep_text=bool(options.get("keep_ir")))
        _log_partition(prepared, time.perf_counter() - t)
        if options.get("keep_ir"):
            kept["partitioned"] = prepared.text
        # Profiles and "specialize" buckets compile static kernels from the
        # kernel module as it is now (kiln dialect, dims symbolic).
        wants_static = static_kernels is not False and (
            bool(options.get("profiles")) or options.get("policy") == "specialize")
        kernel_text = module.operation.get_asm() if prepared.generated and wants_static else None
        if prepared.generated:
            from .backends.cpu import objcache

            names = prepared.kernel_names()
            vectorize = int(options.get("vectorize", 1))
            # Keyed before lowering, so a cached library skips the lowering
            # too (keep_ir wants the LLVM text, so it always lowers).
            key = None if options.get("keep_ir") else objcache.kernel_key(module, vectorize)
            t = time.perf_counter()
            progress.stage("kernel cache")
            engine = objcache.load(key, names) if key else None
            if engine is not None:
                remember_key(engine, key)  # kiln.save reads the object code back from this entry
            if engine is None:
                # Verified once at the end, as the graph passes are (per stage it
                # was 0.18 of resnet50's 1.2 s warm compile; KILN_VERIFY_EACH=1).
                lower(module, vectorize=vectorize, verify_each=None)
                _log.info("lowering to the LLVM dialect: %d kernel(s) in %.3f s", len(names), time.perf_counter() - t)
                if options.get("keep_ir"):
                    kept["llvm"] = str(module)
                progress.stage("LLVM", detail=f"{len(names)} kernels")
                t_llvm = time.perf_counter()
                try:
                    # Materializes the code now: missing symbols fail here.
                    engine = jit(module, names=names, key=key)
                except Exception as e:  # the engine reports unresolved symbols as a RuntimeError
                    raise KilnError(f"the CPU JIT failed: {e}") from None
                _log.info("LLVM: %d kernel(s) compiled to machine code in %.3f s", len(names),
                          time.perf_counter() - t_llvm)
            _log.info("kernels: %d generated, %s in %.3f s", len(names),
                      "loaded from the kernel cache" if getattr(engine, "cache", None) == "hit"
                      else "lowered and compiled by LLVM", time.perf_counter() - t)
            with _count_lock:
                _compilations += 1
    progress.stage("runtime setup")  # hoisted constant steps, views, the runtime
    kernels = prepared.kernels(lambda name, ins, outs: CpuKernel(name, ins, outs, engine, module))
    # Kernels of constants only run once, here (kiln.backends.cpu.hoist).
    from .backends.cpu.hoist import hoist_constant_steps

    kernels = hoist_constant_steps(prepared, kernels, syms)
    # Reshapes, and slices of leading rows, run as views of their input: no
    # launch, no copy, no arena space.
    from .compile_prepare import view_aliases
    from .transforms.plan_memory import plan_memory

    aliases = view_aliases(prepared.schedule)
    if aliases:
        prepared.plan, _ = plan_memory(prepared.schedule, syms, aliases=aliases,
                                       inplace=prepared.plan.inplace, donated=prepared.plan.donated)
    specialize = None
    if kernel_text is not None:
        specialize = _static_kernels(kernel_text, prepared, int(options.get("vectorize", 1)))
    runtime = ModelRuntime(
        prepared, kernels, syms,
        profiles=options.get("profiles"), policy=options.get("policy"), budget=options.get("budget", 4),
        profiling=bool(options.get("profiling", False)), compile_time_s=time.perf_counter() - start,
        specialize=specialize, static_kernels=static_kernels, arena_pool_bytes=options.get("arena_pool_bytes"),
    )
    runtime.kernel_cache = getattr(engine, "cache", None)
    sched = prepared.schedule
    values = [ValueInfo(f"%{v.id}", tuple(v.info.dims), str(v.info.dtype)) for v in sched.values]
    for spec, vid in zip(inputs, sched.inputs):
        values[vid] = ValueInfo(spec.name, spec.dims, spec.dtype)
    schedule = [Step(k, list(s.inputs), list(s.outputs)) for k, s in zip(kernels, sched.steps)]
    model = CompiledModel(
        inputs=inputs,
        values=values,
        schedule=schedule,
        # A mutated input's new value is written into the caller's array, not returned (torch's semantics).
        output_ids=[v for v in sched.outputs if v not in prepared.plan.donated],
        output_names=[o.name for o, v in zip(outputs, sched.outputs) if v not in prepared.plan.donated],
        symbols=syms,
        base_compilations=1 if engine is not None else 0,
        ir=kept,
        keepalive=[module.context, module, engine],
        runtime=runtime,
        checks=checks,
    )
    if engine is not None:  # weights packed by the native GEMM are freed with the model
        from .runtime.native import release_on_collect

        release_on_collect(model, engine)
    _log.info("compiled in %.3f s: %d kernel(s)", time.perf_counter() - start, len(schedule))
    return model


def _late_fuse(name: str) -> str | None:
    """The ``kiln-fuse`` stage of the named graph pipeline ``name`` when
    decompositions of kiln ops are registered from user code (they run
    again after the graph passes, whose kiln-simplify may have recognised
    the decomposed form as the op again, and before fusion); else None."""
    from .backends.user import kiln_decompositions
    from .pipelines.named import named_pipeline

    named = named_pipeline(name) if "(" not in name else None
    if named is None or not kiln_decompositions():
        return None
    return next((s for s in named.stages if s.partition("{")[0] == "kiln-fuse"), None)


def _value_input_model(source, example_args, dynamic_shapes, symbols, device, options):
    """A :class:`~kiln.runtime.value_inputs.ValueInputModel` for an ONNX model
    with inputs whose values decide shapes (see
    :mod:`kiln.frontends.onnx_values`), else None.  Shape inputs get symbols
    named after them (ranges from ``symbols``); every other such input is
    specialized on its values at call time (``value_specializations``: how
    many compiled models are cached, default 16)."""
    from .dialects.dims import SYMBOL_MAX
    from .frontends import onnx_values as ov
    from .frontends.onnx_import import load_model
    from .runtime.value_inputs import ValueInputModel

    try:  # the graph alone (no external weights) tells whether any input is one
        graph = ov.read_graph(source)
    except Exception:  # noqa: BLE001 - unreadable: the import below reports it as it always did
        return None
    if not ov.value_inputs(graph):
        return None
    model, _ = load_model(source)
    valued = ov.value_inputs(model)
    shaped = ov.shape_inputs(model, valued)
    syms = ov.symbol_names(model, shaped)
    declared = dict(symbols or {})
    fixed = ov.broadcast_fixed(model, shaped)  # Expand dims the values may only be 1 or d at
    labels = {n.name or f"{n.op_type}_{i}": n for i, n in enumerate(model.graph.node)}
    broadcasts = {}
    for label, dims in fixed.items():
        for k, d in dims.items():
            broadcasts.setdefault(labels[label].input[1], []).append((k, d, f"node '{label}' (Expand)"))
    sym_names = {s for v in syms.values() for s in v}
    capacity = options.pop("value_specializations", 16)
    # Slice bounds' symbols take 0 too (a slice from the start) unless declared.
    floors = {s: 0 for n in ov.zero_valued(model, shaped) for s in syms[n]}

    def build(frozen, dynamic, pins):
        m = ov.freeze(model, frozen)
        if dynamic:
            m = ov.carrier_model(m, {n: syms[n] for n in shaped}, fixed, pins)
        names = ov.dim_params(m)
        given = {**{k: (0, SYMBOL_MAX) for k in floors}, **declared}
        given = {k: v for k, v in given.items() if k in names}
        return compile(m, example_args, dynamic_shapes, given or None, device, _values_resolved=True, **options)

    unknown = sorted(set(declared) - sym_names - ov.dim_params(model))
    if unknown:
        known = sorted(sym_names | ov.dim_params(model))
        raise KilnError(f"symbols {', '.join(unknown)} are neither dim_params of the model's inputs nor "
                        f"symbols of its shape inputs (known: {', '.join(known) or 'none'})")
    ranges = {k: tuple(v) for k, v in declared.items() if k in sym_names}
    _log.info("ONNX inputs whose values decide shapes: shape inputs %s, specialized %s",
              ", ".join(shaped) or "none", ", ".join(n for n in valued if n not in shaped) or "none")
    return ValueInputModel([i.name for i in ov.graph_inputs(model)], syms,
                           [n for n in valued if n not in shaped], build, ranges=ranges, capacity=capacity,
                           inputs=ov.input_specs(model), broadcasts=broadcasts, floors=floors)


def _log_partition(prepared, seconds: float) -> None:
    """The partition's kernel counts at INFO; fallbacks as one WARNING naming their ops and locations."""
    steps = prepared.schedule.steps
    fallback = [s for s in steps if s.kind == "fallback"]
    _log.info("partition + memory plan: %d kernel(s), %d generated, %d fallback in %.3f s",
              len(steps), len(prepared.generated), len(fallback), seconds)
    warn_fallbacks([site for s in fallback for site in s.sites])


def fallback_sites(module: ir.Module) -> list[list[str]]:
    """``[op, location, runtime]`` of each ``kiln.fallback`` op of ``module``
    (what :attr:`kiln.transforms.partition.Step.sites` holds, for a backend
    that does not partition through :func:`kiln.compile_prepare.prepare`)."""
    from .frontends.report import fallback_runtimes
    from .locations import location_text

    runtimes = fallback_runtimes(module.operation)
    sites = []

    def visit(op):
        if op.name == "kiln.fallback":
            name = ir.StringAttr(op.attributes["op_name"]).value
            sites.append([name, location_text(op.location), runtimes.get(name, "pytorch")])
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return sites


def warn_fallbacks(sites) -> None:
    """Log :func:`fallback_warning` of ``sites`` (nothing without any): the
    one warning of a compile whose model has fallbacks."""
    message = fallback_warning(sites)
    if message:
        _log.warning("%s", message)


#: Fallback sites a warning lists before it says how many more there are.
WARN_SITES = 12


def fallback_warning(sites) -> str | None:
    """The one warning of a compile whose model has fallbacks (``sites``:
    ``[op, location, runtime]`` each, :attr:`kiln.transforms.partition.Step.sites`),
    or None without any: how many ops run as PyTorch / ONNX Runtime
    fallbacks, and each op with where the model uses it (``model.py:42``,
    ``node 'Mul_3' (Mul)``), one entry per op and place (``x3`` when the
    place repeats, as in a loop)."""
    if not sites:
        return None
    labels = {"pytorch": "PyTorch", "onnxruntime": "ONNX Runtime"}
    counts: dict = {}
    for op, loc, runtime in sites:
        counts[(op, loc, runtime)] = counts.get((op, loc, runtime), 0) + 1
    runtimes = sorted({r for _, _, r in sites}, key=lambda r: (r != "pytorch", r))
    mixed = len(runtimes) > 1
    entries = [f"{op} at {loc}" + (f" x{n}" if n > 1 else "") + (f" ({labels.get(rt, rt)})" if mixed else "")
               for (op, loc, rt), n in counts.items()]
    if len(entries) > WARN_SITES:
        entries = entries[:WARN_SITES] + [f"... {len(entries) - WARN_SITES} more (report()['fallback']['sites'])"]
    kinds = " and ".join(labels.get(r, r) for r in runtimes)
    return (f"{len(sites)} op(s) of this model run as {kinds} fallbacks, not compiled by kiln: "
            + ", ".join(entries))


def _static_kernels(kernel_text: str, prepared, vectorize: int):
    """``binding -> kernels`` (parallel to ``prepared``'s schedule): the
    generated kernels compiled with the dims static at ``binding``, the
    fallback kernels shared (see :mod:`kiln.backends.cpu.specialize`)."""

    def build(binding):
        global _compilations
        from .backends.cpu import CpuKernel
        from .backends.cpu.specialize import compile_static

        engine, module = compile_static(kernel_text, binding, prepared.kernel_names(), vectorize)
        with _count_lock:
            _compilations += 1
        kernels = prepared.kernels(lambda name, ins, outs: CpuKernel(name, ins, outs, engine, module, static=True))
        generated = [k for k in kernels if isinstance(k, CpuKernel)]
        if generated:  # the set lives and dies together: free its packed weights with it
            from .runtime.native import release_on_collect

            release_on_collect(generated[0], engine)
        return kernels

    # What kiln.save writes into an artifact, so that a loaded model can compile more of them.
    build.kernel_text, build.vectorize = kernel_text, vectorize
    return build


__all__ += ["ParseError"]


ARTIFACT_IR = "model.kiln.mlir"  # the IR file of the previous format (kiln-artifact/1), still read by load
ARTIFACT_META = "kiln-artifact.json"  # the manifest (kiln.runtime.artifact.MANIFEST)


def save(model, directory, example_args=None, dynamic_shapes=None, symbols=None, **options):
    """Write the artifact ``directory`` of ``model`` and return the model.

    ``model`` is a :class:`~kiln.runtime.CompiledModel` (``kiln.save(compiled,
    path)``); anything else is a source, compiled first with
    ``example_args``, ``dynamic_shapes``, ``symbols`` and ``options`` as
    :func:`compile` takes them.  The directory holds the manifest, the
    weights (safetensors) and the kernels' object code: :func:`load` needs
    no compiler (see :mod:`kiln.runtime.artifact`).
    """
    from .runtime.artifact import save as save_artifact
    from .runtime.model import CompiledModel
    from .runtime.value_inputs import ValueInputModel

    if isinstance(model, ValueInputModel):
        raise KilnError(model.save_error())
    if not isinstance(model, CompiledModel):
        model = compile(model, example_args, dynamic_shapes, symbols, **options)
        if isinstance(model, ValueInputModel):
            raise KilnError(model.save_error())
    elif example_args is not None or dynamic_shapes is not None or symbols is not None or options:
        raise KilnError("kiln.save(model, path): the model is compiled already; compile options go to kiln.compile")
    save_artifact(model, directory)
    return model


def is_artifact(path) -> bool:
    """True when ``path`` is a directory written by :func:`save`."""
    from .runtime.artifact import is_artifact as _is_artifact

    return _is_artifact(path)


def load(directory, **options):
    """The :class:`~kiln.runtime.CompiledModel` of an artifact directory:
    :func:`kiln.runtime.artifact.load` (``kiln.load``), which needs no
    compiler; options ``policy``, ``profiling``, ``arena_pool_bytes``.  A
    directory of the previous format (``kiln-artifact/1``: kiln IR) is
    compiled again from its IR."""
    from .runtime.artifact import load as load_artifact

    return load_artifact(directory, **options)


def _artifact_file(directory, name) -> str:
    """The path of the artifact's IR file ``name``, which must be a regular
    file inside ``directory`` (see :func:`kiln.runtime.artifact.artifact_file`)."""
    from .runtime.artifact import artifact_file

    return artifact_file(directory, name, "IR file")


__all__ += ["is_artifact", "load", "save"]
