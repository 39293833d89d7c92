"""``kiln-run``: run a compiled artifact (or compile and run a model); print outputs and timing.

    kiln-run out/ --input x=x.npy
    kiln-run model.mlir --input arg0=7x33x16 --repeat 20
    kiln-run kiln.bench.models:tiny_mlp --input 0=64x16

``--input NAME=VALUE`` (NAME is the input's name, as the source names it: an
ONNX graph input's name, a torch forward() parameter's; or its position) takes a
``.npy`` file or a shape such as ``7x33x16`` (random data of the input's
dtype, seeded by ``--seed``); inputs not given use their example shape when
the source is a factory.  Prints each output's shape, dtype and a few
values, then the compile time and the per-call time (median of
``--repeat`` calls).  ``--save DIR`` writes the outputs as ``.npy``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

from ..errors import KilnError
from ..runtime.dtypes import NUMPY_DTYPES

__all__ = ["entry", "main"]


def _load_npy(path: str) -> np.ndarray:
    """The array in the ``.npy`` file ``path``, read without pickle: a user's
    file must never run code (``allow_pickle=False``) nor be anything but one
    numeric array."""
    try:
        arr = np.load(path, allow_pickle=False)
    except OSError as e:
        raise KilnError(f"--input: cannot read '{path}': {e.strerror or e}") from None
    except Exception as e:  # numpy's errors for a bad file: ValueError, EOFError, ...
        raise KilnError(f"--input: '{path}' is not a readable .npy array: {e}") from None
    if not isinstance(arr, np.ndarray):  # an .npz archive under a .npy name
        close = getattr(arr, "close", None)
        if close is not None:
            close()
        raise KilnError(f"--input: '{path}' holds an archive of arrays (.npz), not one array")
    if arr.dtype.kind not in "biuf":
        raise KilnError(f"--input: '{path}' holds an array of dtype {arr.dtype}, not numbers")
    return arr


def _value(text: str, dtype: str, rng) -> np.ndarray:
    if text.endswith(".npy"):
        return _load_npy(text)
    if os.path.exists(text):
        raise KilnError(f"--input: '{text}' is not a .npy file (give NAME=FILE.npy or a shape like 7x33x16)")
    try:
        shape = tuple(int(s) for s in text.replace(",", "x").split("x") if s.strip() != "")
    except ValueError:
        shape = None
    if not shape or any(d < 0 for d in shape):
        raise KilnError(f"--input value must be a .npy file or a shape like 7x33x16, got '{text}'")
    t = NUMPY_DTYPES.get(dtype, np.float32)
    try:
        if dtype == "i1":
            return rng.integers(0, 2, shape).astype(np.bool_)
        if np.issubdtype(t, np.integer):
            return rng.integers(0, 10, shape).astype(t)
        return rng.standard_normal(shape).astype(t)
    except (MemoryError, ValueError) as e:  # a shape too large to allocate
        raise KilnError(f"--input: cannot make random data of shape {text}: {e}") from None


def main(argv=None) -> int:
    """Run the tool; returns the exit status."""
    from ..runtime.artifact import is_artifact, load  # an artifact runs without the compiler (torch-mlir)
    from ._cli import add_runtime_arguments, apply_runtime_arguments
    from .kiln_compile import source_args

    p = argparse.ArgumentParser(prog="kiln-run", description=__doc__.split("\n\n")[0])
    p.add_argument("model", help="artifact directory, model.mlir, model.onnx or pkg.module:factory")
    p.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy|SHAPE")
    p.add_argument("--symbol", action="append", default=[], metavar="NAME=MIN:MAX", help="ONNX symbol range")
    p.add_argument("--repeat", type=int, default=10, help="timed calls (default 10)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--save", metavar="DIR", help="write outputs as DIR/output<i>.npy")
    p.add_argument("--report", action="store_true",
                   help="print the runtime report (kernels, fallback share, arena bytes, profiles; per-kernel times)")
    add_runtime_arguments(p)
    p.add_argument("-q", "--quiet", action="store_true", help="no progress line on stderr for a long compile")
    args = p.parse_args(argv)
    apply_runtime_arguments(args)
    if args.seed < 0:
        p.error(f"--seed must be a non-negative integer, got {args.seed}")

    start = time.perf_counter()
    example = None
    # --report times every kernel (profiling), so the report has per-kernel times.
    options = {"profiling": True} if args.report else {}
    if is_artifact(args.model):
        model = load(args.model, **options)
    else:
        from ..compiler import compile as kiln_compile
        from ..progress import ProgressLine

        source, example, dynamic_shapes, symbols = source_args(args.model, args.symbol)
        with ProgressLine("kiln-run", enabled=not args.quiet):
            model = kiln_compile(source, example, dynamic_shapes, symbols, **options)
    compile_s = time.perf_counter() - start

    rng = np.random.default_rng(args.seed)
    given = {}
    for item in args.input:
        name, sep, value = item.partition("=")
        if not sep:
            raise KilnError(f"--input expects NAME=FILE.npy|SHAPE, got '{item}'")
        given[name] = value
    names = [s.name for s in model.inputs]
    for name in given:
        if name not in names and not (name.isdigit() and int(name) < len(names)):
            raise KilnError(f"the model has no input '{name}' (inputs: {', '.join(names)})")
    inputs = []
    for i, spec in enumerate(model.inputs):
        text = given.get(spec.name, given.get(str(i)))
        if text is not None:
            inputs.append(_value(text, spec.dtype, rng))
        elif example is not None:
            inputs.append(np.ascontiguousarray(example[i].detach().numpy()))
        else:
            raise KilnError(f"give input '{spec.name}' {spec.shape_text()} {spec.dtype} with --input {spec.name}=...")
    outputs = model(*inputs)
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    times = []
    for _ in range(max(args.repeat, 0)):
        t = time.perf_counter()
        model(*inputs)
        times.append(time.perf_counter() - t)
    out_names = getattr(model, "output_names", None) or [f"output{i}" for i in range(len(outputs))]
    for i, (info, out) in enumerate(zip(model.outputs, outputs)):
        flat = np.asarray(out).reshape(-1)
        head = np.array2string(flat[:6], precision=5, separator=", ")
        label = f"output{i}" + (f" '{out_names[i]}'" if out_names[i] != f"output{i}" else "")  # the source's name
        print(f"{label}: shape {list(out.shape)} {info.dtype} {head}{' ...' if flat.size > 6 else ''}")
        if args.save:
            os.makedirs(args.save, exist_ok=True)
            np.save(os.path.join(args.save, f"output{i}.npy"), out)
    shapes = ", ".join(f"{s.name}={list(a.shape)}" for s, a in zip(model.inputs, inputs))
    print(f"inputs: {shapes}")
    print(f"compile: {compile_s * 1e3:.1f} ms")
    if times:
        print(f"run: median {statistics.median(times) * 1e3:.3f} ms, min {min(times) * 1e3:.3f} ms "
              f"over {len(times)} calls")
    if args.report:
        from ..runtime.report import format_report

        print("report:")
        print(format_report(model.report()))
    return 0


def entry() -> None:
    """Console-script wrapper: exit with main's status."""
    from ._cli import run_tool

    run_tool("kiln-run", main)


if __name__ == "__main__":
    entry()
