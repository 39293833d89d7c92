"""Benchmark any model: ``kiln-bench --model MODEL --shape ...`` (what ``trtexec`` gives TensorRT users).

:func:`bench_model` compiles the model twice -- *cold*, into an empty
temporary kernel cache, and *warm*, again with that cache filled (in the same
process: imports and the native library are loaded already) -- then, per
shape, runs ``warmup`` untimed and ``iters`` timed calls on random inputs
(:func:`kiln.validate.random_array`) with :func:`kiln.bench.harness.measure`
and reports p50 / p95 / p99 latency, throughput (calls/s, and samples/s where
a batch symbol exists), the peak resident set size while that shape ran (the
kernel's high-water mark, reset before each shape through
``/proc/self/clear_refs``), the arena bytes and kernel launches per call
from the model's ``report()``.  :func:`format_table` prints it.

A shape is ``B=8,L=128`` (symbol values), ``0=8x128`` or ``x=8x128`` (an
input's dims, by position or name), or both; symbols not given come from the
dims of the inputs that are, then from a factory's example arguments, then
from the symbol's declared ``opt``.
"""

from __future__ import annotations

import contextlib
import functools
import os
import resource
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from ..errors import KilnError
from .harness import measure, summarize

__all__ = ["ShapeSpec", "bench_model", "format_table", "parse_shape", "peak_rss_bytes", "reset_peak_rss",
           "rss_bytes"]


# ----------------------------------------------------------------------------
# Resident memory
# ----------------------------------------------------------------------------


def reset_peak_rss() -> bool:
    """Reset this process's RSS high-water mark (Linux ``clear_refs`` 5);
    False where the kernel does not allow it or accepts the write and keeps
    the mark (seen on a CI host), the mark then covering the whole process
    so far."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    status = _status_kib()
    hwm, rss = status.get("VmHWM"), status.get("VmRSS")
    # Just after a reset the mark is the current RSS; what was allocated
    # meanwhile is a few pages, hence the slack.
    return hwm is not None and rss is not None and hwm <= rss + (16 << 10)


def _status_kib() -> dict[str, int]:
    """The ``Vm*`` lines of ``/proc/self/status`` in KiB (empty elsewhere)."""
    try:
        with open("/proc/self/status") as f:
            return {k: int(v.split()[0]) for k, _, v in (line.partition(":") for line in f) if k.startswith("Vm")}
    except OSError:
        return {}


def peak_rss_bytes() -> int:
    """The RSS high-water mark in bytes (``VmHWM``; ``ru_maxrss`` elsewhere)."""
    hwm = _status_kib().get("VmHWM")
    return hwm * 1024 if hwm is not None else process_peak_rss_bytes()


def process_peak_rss_bytes() -> int:
    """The largest RSS this process has had, compiles included (``getrusage``; KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


# ----------------------------------------------------------------------------
# Shapes
# ----------------------------------------------------------------------------


class ShapeSpec:
    """A parsed ``--shape``: symbol values and input dims as given (``text`` as typed)."""

    def __init__(self, text: str, symbols: dict[str, int], inputs: dict[int, tuple[int, ...]]):
        self.text = text
        self.symbols = symbols
        self.inputs = inputs


def parse_shape(text: str, symbols: Mapping, inputs: Sequence, names: Sequence[str] | None = None) -> ShapeSpec:
    """Parse ``text`` (see the module docstring) against a model's symbols
    (by name) and inputs (:class:`~kiln.runtime.contract.InputSpec` list;
    ``names``, when given, are their names instead, e.g. an ONNX graph's);
    KilnError naming what is wrong."""
    names = list(names) if names is not None else [s.name for s in inputs]
    syms, dims = {}, {}
    for item in (t.strip() for t in text.split(",")):
        key, eq, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not eq or not key or not value:
            raise KilnError(f"--shape expects SYM=N or INPUT=D0xD1x... items separated by ',', got '{text}'")
        if key in symbols and "x" not in value:
            try:
                syms[key] = int(value)
            except ValueError:
                raise KilnError(f"--shape: symbol {key} needs an integer, got '{value}'") from None
            continue
        index = names.index(key) if key in names else (int(key) if key.isdigit() else None)
        if index is None or index >= len(inputs):
            raise KilnError(f"--shape: '{key}' is neither a symbol ({', '.join(sorted(symbols)) or 'none'}) nor an "
                            f"input ({', '.join(names)}, or its position 0..{len(names) - 1})")
        try:
            shape = tuple(int(d) for d in value.split("x")) if value != "scalar" else ()
        except ValueError:
            raise KilnError(f"--shape: input {key} needs dims like 8x128, got '{value}'") from None
        if len(shape) != len(inputs[index].dims):
            raise KilnError(f"--shape: input '{names[index]}' has rank {len(inputs[index].dims)} "
                            f"{inputs[index].shape_text()}, got {len(shape)} dims '{value}'")
        dims[index] = shape
    return ShapeSpec(text, syms, dims)


def _bind_from(inputs: Sequence, shapes: Mapping[int, Sequence[int]], binding: dict) -> None:
    """Bind the symbols that are whole dims of the inputs with known shapes."""
    for i, shape in shapes.items():
        for d, v in zip(inputs[i].dims, shape):
            if d.is_symbol:
                binding.setdefault(str(d), int(v))


def resolve_shape(spec: ShapeSpec, symbols: Mapping, inputs: Sequence, example_shapes=None):
    """``(binding, input shapes)`` for one ``--shape`` (see the module docstring)."""
    from ..dialects.dims import evaluate

    binding = dict(spec.symbols)
    _bind_from(inputs, spec.inputs, binding)
    if example_shapes is not None:
        _bind_from(inputs, dict(enumerate(example_shapes)), binding)
    for name, s in symbols.items():
        if name not in binding:
            if s.opt is None:
                raise KilnError(f"--shape: give symbol {name} a value ({s.range_text()}), e.g. --shape {name}=N")
            binding[name] = s.opt
    shapes = [tuple(spec.inputs[i]) if i in spec.inputs else tuple(evaluate(d, binding) for d in x.dims)
              for i, x in enumerate(inputs)]
    return binding, shapes


def batch_symbol(inputs: Sequence) -> str | None:
    """The symbol of the first input's leading dim, when it is one (its batch)."""
    if inputs and inputs[0].dims and inputs[0].dims[0].is_symbol:
        return str(inputs[0].dims[0])
    return None


# ----------------------------------------------------------------------------
# The benchmark
# ----------------------------------------------------------------------------


def _compile_timed(make: Callable[[], object]):
    start = time.perf_counter()
    model = make()
    return model, time.perf_counter() - start


#: What a first compile imports (torch-mlir's importers most of it: ~7 s of a
#: 9 s first compile of a small model): imported before the cold compile is
#: timed, and reported apart, so "cold" is the compile, not Python's imports.
_HEAVY_MODULES = ("kiln.compiler", "kiln.frontends", "kiln.pipelines", "kiln.backends.cpu", "kiln.runtime.executor",
                  "torch_mlir.extras.fx_importer", "torch_mlir.extras.onnx_importer", "onnx")


def preimport() -> float:
    """Import what a compile needs (those not installed are skipped); the seconds it took."""
    import importlib

    start = time.perf_counter()
    for name in _HEAVY_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    return time.perf_counter() - start


def rss_bytes() -> int | None:
    """The resident set size now (``VmRSS``), None where /proc does not say."""
    rss = _status_kib().get("VmRSS")
    return rss * 1024 if rss is not None else None


def compile_cold_warm(make: Callable[[], object]):
    """``(model, cold_s, warm_s)``: ``make()`` timed into an empty temporary
    kernel cache, then again with that cache filled; the second model is
    returned and the temporary cache removed."""
    from ..runtime import native

    native.load()  # the native library, where it is, before the cache root moves
    with scratch_dir("KILN_CACHE_DIR", "kiln-bench-cold-"):
        cold_model, cold_s = _compile_timed(make)
        del cold_model
        model, warm_s = _compile_timed(make)
    return model, cold_s, warm_s


@contextlib.contextmanager
def scratch_dir(variable: str, prefix: str):
    """An empty temporary directory named by the environment ``variable``
    (a compile cache) for the ``with`` block; the variable's old value is
    restored and the directory removed afterwards."""
    saved = os.environ.get(variable)
    tmp = tempfile.mkdtemp(prefix=prefix)
    try:
        os.environ[variable] = tmp
        yield tmp
    finally:
        if saved is None:
            os.environ.pop(variable, None)
        else:
            os.environ[variable] = saved
        shutil.rmtree(tmp, ignore_errors=True)


def bench_model(model_spec: str, shapes: Sequence[str] = (), *, symbols: Sequence[str] = (), iters: int = 100,
                warmup: int = 10, seed: int = 0, batch: str | None = None, options: Mapping | None = None,
                log: Callable[[str], None] = lambda _m: None) -> dict:
    """Benchmark ``model_spec`` (``pkg.module:factory``, ``model.onnx``,
    ``model.mlir`` or an artifact directory) at each of ``shapes`` (see
    :func:`parse_shape`; none: the factory's example shape, else every
    symbol's opt); ``symbols`` are ``NAME=MIN:MAX`` ranges of an ONNX
    model's dim_params, ``options`` :func:`kiln.compile` options.  Returns
    plain data (see the module docstring)."""
    from ..compiler import compile as kiln_compile
    from ..compiler import is_artifact, load
    from ..sources import source_args
    from ..validate import example_ranges, random_array

    if iters < 1 or warmup < 0:
        raise KilnError(f"--iters must be at least 1 and --warmup at least 0, got {iters} and {warmup}")
    options = dict(options or {})
    example = None
    if is_artifact(model_spec):
        if symbols:
            raise KilnError("--symbol applies to ONNX models, not to a compiled artifact")

        def make():
            return load(model_spec, **options)
    else:
        source, example, dynamic_shapes, syms = source_args(model_spec, list(symbols))

        def make():
            return kiln_compile(source, example, dynamic_shapes, syms, **options)

    imports_s = preimport()
    log(f"compiling {model_spec} (cold, then warm)")
    model, cold_s, warm_s = compile_cold_warm(make)
    example_shapes = [tuple(a.shape) for a in example] if example is not None else None
    names = _onnx_input_names(model_spec, len(model.inputs))
    specs = [parse_shape(t, model.symbols, model.inputs, names) for t in shapes]
    if not specs:
        specs = [ShapeSpec("default", {}, {})]
    batch = batch or batch_symbol(model.inputs)
    if batch is not None and batch not in model.symbols:
        raise KilnError(f"--batch: the model has no symbol '{batch}' (symbols: {', '.join(model.symbols) or 'none'})")
    int_ranges = example_ranges(example) if example is not None else None
    rng = np.random.default_rng(seed)
    rows = []
    for spec in specs:
        binding, in_shapes = resolve_shape(spec, model.symbols, model.inputs, example_shapes)
        inputs = [random_array(shape, s.dtype, rng, int_ranges[i] if int_ranges else None)
                  for i, (s, shape) in enumerate(zip(model.inputs, in_shapes))]
        label = ", ".join(f"{k}={v}" for k, v in sorted(binding.items())) or "static"
        log(f"shape {label}: {warmup} warmup + {iters} timed calls")
        before = rss_bytes()
        exact = reset_peak_rss()
        times = measure(functools.partial(model, *inputs), warmup=warmup, min_iters=iters, max_iters=iters,
                        budget_s=float("inf"), raw=True)
        peak = peak_rss_bytes()
        stats = summarize(times)
        report = model.report()
        calls_per_s = 1000.0 / stats["p50_ms"] if stats["p50_ms"] > 0 else float("inf")
        n = binding.get(batch) if batch is not None else None
        rows.append({
            "shape": spec.text, "binding": binding, "input_shapes": [list(s) for s in in_shapes], **stats,
            "calls_per_s": calls_per_s, "batch": n, "samples_per_s": calls_per_s * n if n is not None else None,
            "kernel_launches_per_call": report.get("kernels_launched_per_call"),
            "arena_bytes": report.get("arena", {}).get("planned_peak_bytes"),
            "arena_no_reuse_bytes": report.get("arena", {}).get("no_reuse_bytes"),
            "rss_before_bytes": before, "peak_rss_bytes": peak,
            "peak_rss_scope": "this shape" if exact else "process",
        })
    report = model.report()
    return {
        "model": model_spec, "iters": iters, "warmup": warmup, "seed": seed, "batch_symbol": batch,
        "compile": {"cold_s": cold_s, "warm_s": warm_s, "imports_s": imports_s,
                    "kernel_cache_warm": report.get("kernel_cache")},
        "kernels_in_schedule": report.get("kernels_in_schedule"),
        "fallback_share_of_time": report.get("fallback", {}).get("share_of_time"),
        "process_peak_rss_bytes": process_peak_rss_bytes(),
        "rows": rows,
    }


def _onnx_input_names(path: str, n: int) -> list[str] | None:
    """The graph input names of an ONNX file (kiln numbers them ``arg0``...), in
    kiln's order: the inputs that are not initializers; None for other models."""
    if not str(path).endswith(".onnx"):
        return None
    try:
        import onnx

        graph = onnx.load(path, load_external_data=False).graph
    except Exception:  # noqa: BLE001 - the compile read it; names are a convenience
        return None
    inits = {t.name for t in graph.initializer}
    names = [i.name for i in graph.input if i.name not in inits]
    return names if len(names) == n else None


def _mib(n) -> str:
    return "-" if n is None else f"{n / (1 << 20):.1f}"


def _size(n) -> str:
    """Bytes in the unit that fits: ``384 B``, ``12.0 KiB``, ``3.5 MiB``."""
    if n is None:
        return "-"
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def format_table(result: Mapping) -> str:
    """The result as a text table, one row per shape, under the compile times."""
    c = result["compile"]
    lines = [
        f"model: {result['model']}",
        f"compile: cold {c['cold_s']:.2f} s (empty kernel cache), warm {c['warm_s']:.2f} s "
        f"(kernel cache {c['kernel_cache_warm'] or '-'}, same process); imports before them {c['imports_s']:.2f} s",
        f"process peak RSS (compiles included): {_mib(result['process_peak_rss_bytes'])} MiB; "
        f"{result['warmup']} warmup + {result['iters']} timed calls per shape",
        "",
        f"{'shape':<24} {'p50 ms':>9} {'p95 ms':>9} {'p99 ms':>9} {'calls/s':>10} {'samples/s':>11} "
        f"{'launches':>8} {'arena':>10} {'peak RSS MiB (+run)':>20}",
    ]
    for r in result["rows"]:
        shape = ", ".join(f"{k}={v}" for k, v in sorted(r["binding"].items())) or "static"
        samples = f"{r['samples_per_s']:.1f}" if r["samples_per_s"] is not None else "-"
        launches = r["kernel_launches_per_call"] if r["kernel_launches_per_call"] is not None else "-"
        lines.append(f"{shape:<24} {r['p50_ms']:>9.3f} {r['p95_ms']:>9.3f} {r['p99_ms']:>9.3f} "
                     f"{r['calls_per_s']:>10.1f} {samples:>11} {launches:>8} {_size(r['arena_bytes']):>10} "
                     f"{_rss_cell(r):>20}")
    return "\n".join(lines)


def _rss_cell(row: Mapping) -> str:
    """``540.1 (+0.8)``: the peak while the shape ran, and its rise over the RSS before."""
    peak, before = row["peak_rss_bytes"], row.get("rss_before_bytes")
    if before is None or row.get("peak_rss_scope") != "this shape":
        return _mib(peak)
    return f"{_mib(peak)} (+{_mib(max(peak - before, 0))})"
