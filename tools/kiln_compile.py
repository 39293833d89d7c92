"""``kiln-compile``: compile a model to an artifact directory, or print the IR at a stage.

    kiln-compile model.onnx -o out/ [--symbol B=1:64 ...]
    kiln-compile pkg.module:factory -o out/
    kiln-compile model.mlir --stop-after=convert-kiln-to-linalg [-o lowered.mlir]

A source is a kiln ``.mlir`` file, an ONNX model, or a PyTorch factory
(``pkg.module:factory`` returning ``(module, example_args, dynamic_shapes)``).
``--stop-after=<stage>`` prints the IR after that stage (``import`` for the
kiln IR itself, ``kiln-default-cpu`` after the graph passes ``kiln.compile``
runs first, or one of the lowering stages after it; ``--list-stages`` lists
them) instead of writing an artifact, so any step can be reproduced with
``kiln-opt --pass-pipeline`` from the printed file; ``--no-optimize`` skips
the graph passes.  Errors print as ``kiln-compile: error: ...`` with exit
status 1.  ``-v`` logs the compile's stages and times (and one ``compile
stages:`` line with the seconds of each), kernel cache hits and fallbacks
on stderr (``-vv``: debug); ``--threads N`` sets the native pool's
size.  A compile that takes longer than a couple of seconds shows a progress
line on stderr (:class:`kiln.progress.ProgressLine`); ``-q`` hides it.
"""

from __future__ import annotations

import argparse
import sys
import time

from ..errors import KilnError
from ..progress import ProgressLine
from ..sources import source_args

__all__ = ["entry", "main", "source_args"]


def main(argv=None) -> int:
    """Run the tool; returns the exit status."""
    from ..compiler import GRAPH_PIPELINE, STAGES
    from ._cli import add_runtime_arguments, apply_runtime_arguments

    p = argparse.ArgumentParser(prog="kiln-compile", description=__doc__.split("\n\n")[0])
    p.add_argument("source", nargs="?", help="model.mlir, model.onnx, or pkg.module:factory")
    p.add_argument("-o", "--output", help="artifact directory (or the IR file with --stop-after; default stdout)")
    p.add_argument("--symbol", action="append", default=[], metavar="NAME=MIN:MAX",
                   help="range of an ONNX dim_param symbol (repeatable)")
    p.add_argument("--stop-after", metavar="STAGE", help="print the IR after STAGE instead of compiling")
    p.add_argument("--list-stages", action="store_true", help="print the stage names and exit")
    p.add_argument("--vectorize", type=int, default=1, help="vectorization level (0: none)")
    p.add_argument("--no-optimize", action="store_true",
                   help=f"with --stop-after: lower without the graph passes ({GRAPH_PIPELINE})")
    add_runtime_arguments(p, verbose=True)
    p.add_argument("-q", "--quiet", action="store_true", help="no progress line on stderr for a long compile")
    args = p.parse_args(argv)
    apply_runtime_arguments(args)
    if args.list_stages:
        print("\n".join(("import", GRAPH_PIPELINE, *STAGES)))
        return 0
    if not args.source:
        p.error("a source is required")
    source, example_args, dynamic_shapes, symbols = source_args(args.source, args.symbol)
    if not args.stop_after and not args.output:
        raise KilnError("give the artifact directory with -o (or --stop-after=STAGE to print IR)")
    # -v logs each stage already: a progress line would only break its lines.
    with ProgressLine("kiln-compile", enabled=not (args.quiet or args.verbose)):
        if args.stop_after:
            return _stop_after(args, source, example_args, dynamic_shapes, symbols)
        from ..compiler import save

        start = time.perf_counter()
        model = save(source, args.output, example_args, dynamic_shapes, symbols, vectorize=args.vectorize)
    print(f"kiln-compile: wrote {args.output} ({time.perf_counter() - start:.2f} s): {model}", file=sys.stderr)
    return 0


def _stop_after(args, source, example_args, dynamic_shapes, symbols) -> int:
    from .._mlir import ir
    from ..compiler import GRAPH_PIPELINE, STAGES, load_source, lower
    from ..pipelines import Pipeline

    stages = ("import", GRAPH_PIPELINE, *STAGES)
    if args.stop_after not in stages:
        raise KilnError(f"--stop-after: no stage '{args.stop_after}' (stages: {', '.join(stages)})")
    if args.no_optimize and args.stop_after == GRAPH_PIPELINE:
        raise KilnError(f"--stop-after={GRAPH_PIPELINE} with --no-optimize: that stage is the graph passes")
    module = load_source(source, example_args, dynamic_shapes, symbols)
    if args.stop_after != "import" and not args.no_optimize:
        # As kiln.compile does: without it the IR differs from what is compiled
        # (no batch norm folded, no fusion, torch's unused max-pool indices kept).
        with module.context, ir.Location.unknown():
            Pipeline.named(GRAPH_PIPELINE).run(module)
    if args.stop_after not in ("import", GRAPH_PIPELINE):
        # kiln-select-kernels as kiln.compile runs it: the library kernels are chosen on kiln IR.
        from ..backends.select_kernels import select_kernels

        with module.context, ir.Location.unknown():
            select_kernels(module)
        lower(module, stop_after=args.stop_after, vectorize=args.vectorize)
    with module.context:
        text = module.operation.get_asm(enable_debug_info=False)
    if args.output and args.output != "-":
        with open(args.output, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


def entry() -> None:
    """Console-script wrapper: exit with main's status."""
    from ._cli import run_tool

    run_tool("kiln-compile", main)


if __name__ == "__main__":
    entry()
