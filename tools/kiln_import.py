"""``kiln-import``: import an ONNX model or a PyTorch factory into kiln IR.

    kiln-import model.onnx -o m.mlir [--symbol B=1:64 ...] [--report] [--report-json r.json]
    kiln-import pkg.module:factory -o m.mlir [--report]

A factory returns ``(module, example_args, dynamic_shapes)`` (see
``kiln.bench.models``).  ``--report`` prints, per op type, how many ops were
converted directly, decomposed, or fell back, the fallback rate, and where
each fallback runs (PyTorch, or ONNX Runtime for an ONNX node: exactly what
``kiln.compile`` of the same model runs); ``--report-json`` writes the same
as JSON.  ``--no-fallback`` makes an
unsupported op an error.  The report lists each fallback op with where the
model uses it: ``file.py:LINE`` of the model's code for PyTorch, the node
(``node 'Mul_3' (Mul)``) for ONNX.  An import longer than a couple of seconds
shows a progress line on stderr (``-q`` hides it).  Errors print as
``kiln-import: error: ...`` with exit status 1.
"""

from __future__ import annotations

import argparse
import sys

from ..errors import KilnError
from ..progress import ProgressLine
from ..sources import load_factory as _load_factory
from ..sources import parse_symbol as _parse_symbol

__all__ = ["entry", "main"]


def main(argv=None) -> int:
    """Run the tool; returns the exit status."""
    p = argparse.ArgumentParser(prog="kiln-import", description=__doc__.split("\n\n")[0])
    p.add_argument("source", help="model.onnx, or pkg.module:factory for PyTorch")
    p.add_argument("-o", "--output", default="-", help="output .mlir file (default: stdout)")
    p.add_argument("--symbol", action="append", default=[], metavar="NAME=MIN:MAX",
                   help="range of an ONNX dim_param symbol (repeatable)")
    p.add_argument("--report", action="store_true", help="print the import report to stderr")
    p.add_argument("--report-json", metavar="FILE", help="write the import report as JSON")
    p.add_argument("--no-fallback", action="store_true", help="error on ops kiln cannot lower")
    p.add_argument("--elide-weights", action="store_true", help="print large constants elided")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress line on stderr for a long import")
    args = p.parse_args(argv)

    from ..frontends import import_onnx, import_torch

    try:
        fallback = not args.no_fallback
        is_onnx = args.source.endswith(".onnx") or ":" not in args.source
        if is_onnx:
            symbols = dict(_parse_symbol(s) for s in args.symbol)
            with ProgressLine("kiln-import", verb="importing", enabled=not args.quiet):
                module, report = import_onnx(args.source, symbols=symbols, fallback=fallback, with_report=True)
        else:
            if args.symbol:
                raise KilnError("--symbol applies to ONNX models; a factory's dynamic_shapes give the ranges")
            mod, example_args, dynamic_shapes = _load_factory(args.source)
            with ProgressLine("kiln-import", verb="importing", enabled=not args.quiet):
                module, report = import_torch(mod, example_args, dynamic_shapes, fallback=fallback,
                                              with_report=True)
        text = module.operation.get_asm(large_elements_limit=16 if args.elide_weights else None,
                                        large_resource_limit=64 if args.elide_weights else None,
                                        enable_debug_info=False)
        if args.output == "-":
            sys.stdout.write(text)
        else:
            with open(args.output, "w") as f:
                f.write(text)
        if args.report:
            from ..runtime.report import format_report

            print(format_report(report), file=sys.stderr)
        if args.report_json:
            with open(args.report_json, "w") as f:
                f.write(report.to_json() + "\n")
    except KilnError as e:
        print(f"kiln-import: error: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"kiln-import: error: {e}", file=sys.stderr)
        return 1
    return 0


def entry() -> None:
    """Console-script wrapper: exit with main's status."""
    from ._cli import run_tool

    run_tool("kiln-import", main)
