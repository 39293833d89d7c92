"""``kiln-opt``: run kiln and MLIR passes on ``.mlir`` files, like ``mlir-opt``.

    kiln-opt input.mlir --kiln-infer-shapes --canonicalize -o out.mlir
    kiln-opt --pass-pipeline='builtin.module(kiln-infer-shapes,cse)' < in.mlir
    kiln-opt invalid.mlir --split-input-file --verify-diagnostics

User errors print ``file:line:col: error: message`` and exit 1; nothing a user
can type produces a Python traceback.
"""

from __future__ import annotations

import argparse
import sys

from .._mlir import ir
from ..errors import Diagnostic, KilnError, PipelineError

# Upstream passes offered as flags (any other upstream pass works through
# --pass-pipeline, or as a flag too: unknown --flags are tried as MLIR passes).
UPSTREAM_FLAGS = {
    "canonicalize": "Canonicalize operations (MLIR)",
    "cse": "Eliminate common sub-expressions (MLIR)",
    "symbol-dce": "Eliminate dead symbols (MLIR)",
    "inline": "Inline function calls (MLIR)",
    "sccp": "Sparse conditional constant propagation (MLIR)",
    "loop-invariant-code-motion": "Hoist loop invariants (MLIR)",
}

_SPLIT_MARKER = "// -----"


def _build_parser(passes) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="kiln-opt",
        description="Run kiln and MLIR passes on a .mlir file (mlir-opt conventions).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=_passes_help(passes),
    )
    p.add_argument("input", nargs="?", default="-", help="input file (default: stdin)")
    p.add_argument("-o", dest="output", default="-", help="output file (default: stdout)")
    p.add_argument("--pass-pipeline", help="textual pipeline, e.g. 'builtin.module(kiln-infer-shapes,cse)'")
    p.add_argument("--split-input-file", action="store_true", help="split the input at '// -----' and process each chunk alone")
    p.add_argument("--verify-diagnostics", action="store_true", help="check diagnostics against expected-error/-warning comments")
    p.add_argument("--mlir-print-ir-after-all", action="store_true", help="print the IR after every pass (to stderr)")
    p.add_argument("--mlir-pass-statistics", action="store_true", help="print pass statistics (to stderr)")
    p.add_argument("--mlir-print-debuginfo", action="store_true", help="print locations in the output")
    p.add_argument("--no-verify-each", action="store_true", help="do not verify the IR after each pass")
    return p


def _passes_help(passes) -> str:
    lines = ["kiln passes (each also a flag, e.g. --kiln-infer-shapes; options as --name='opt=value'):"]
    for name, cls in passes.items():
        lines.append(f"  --{name:<28} {cls.summary}")
        for o in cls.options:
            lines.append(f"      {o.name}={o.type.__name__} (default {o.format(o.default)}): {o.help}")
    lines.append("")
    lines.append("MLIR passes (any registered upstream pass name works as a flag):")
    for name, summary in UPSTREAM_FLAGS.items():
        lines.append(f"  --{name:<28} {summary}")
    return "\n".join(lines)


def _split_pass_flags(argv, passes):
    """Separate pass flags (kept in order) from kiln-opt's own options."""
    own = {
        "-o", "--pass-pipeline", "--split-input-file", "--verify-diagnostics", "--mlir-print-ir-after-all",
        "--mlir-pass-statistics", "--mlir-print-debuginfo", "--no-verify-each", "-h", "--help",
    }
    rest, flags = [], []
    i = 0
    while i < len(argv):
        arg = argv[i]
        name, _, value = arg.partition("=")
        if arg.startswith("--") and name not in own and arg != "--":
            flags.append((name[2:], value or None))
        else:
            rest.append(arg)
            if arg in ("-o", "--pass-pipeline"):
                i += 1
                if i < len(argv):
                    rest.append(argv[i])
        i += 1
    return rest, flags


def _read_input(path: str) -> tuple[str, str]:
    from ._cli import read_text

    return read_text(path)


def _chunks(text: str, split: bool):
    """``(chunk text, first line)`` pairs; each chunk is padded with newlines
    so that its diagnostics keep the line numbers of the whole file."""
    if not split:
        yield text, 1
        return
    lines = text.split("\n")
    start, cur = 1, []
    for lineno, line in enumerate(lines, start=1):
        if line.startswith(_SPLIT_MARKER):
            yield "\n" * (start - 1) + "\n".join(cur), start
            start, cur = lineno + 1, []
        else:
            cur.append(line)
    yield "\n" * (start - 1) + "\n".join(cur), start


class _Printer:
    """Prints IR after each stage for --mlir-print-ir-after-all."""

    def __init__(self, debuginfo: bool):
        self.debuginfo = debuginfo

    def __call__(self, stage, op):
        sys.stderr.write(f"// -----// IR Dump After {stage.name} //----- //\n")
        sys.stderr.write(_asm(op, self.debuginfo))
        sys.stderr.write("\n")
        sys.stderr.flush()


def _asm(op, debuginfo: bool) -> str:
    return op.get_asm(enable_debug_info=debuginfo)


def _print_diags(diags: list[Diagnostic], source_lines) -> None:
    for d in diags:
        sys.stderr.write(d.format(source_lines) + "\n")


def _run_chunk(text, source, pipeline_factory, args, source_lines):
    """Process one chunk; returns (output text or None, diagnostics)."""
    from ..module import parse_module

    diags: list[Diagnostic] = []
    if not text.endswith("\n"):
        # MLIR's parser reads past the end of a text that stops inside a
        # resource blob's string (a truncated file): SIGSEGV.  A final newline
        # makes that the "expected '\"' in string literal" error it should be.
        text += "\n"
    module = parse_module(text, source)
    pipeline = pipeline_factory()
    if args.mlir_print_ir_after_all:
        pipeline.after_stage = _Printer(args.mlir_print_debuginfo)
    diags += pipeline.run(module, verify_each=not args.no_verify_each)
    if args.mlir_pass_statistics:
        _print_statistics(pipeline)
    return _asm(module.operation, args.mlir_print_debuginfo), diags


def _print_statistics(pipeline) -> None:
    stats = pipeline.statistics()
    if not stats:
        return
    out = ["===" + "-" * 73 + "===", "... Pass statistics report ...", "===" + "-" * 73 + "==="]
    for name, counters in stats.items():
        out.append(name)
        for key, value in counters.items():
            out.append(f"  ({value}) {key}")
    sys.stderr.write("\n".join(out) + "\n")


def main(argv=None) -> int:
    """Entry point of ``kiln-opt``; returns the exit status."""
    from ..context import make_context
    from ..pipelines import Pipeline, registered_passes

    argv = list(sys.argv[1:] if argv is None else argv)
    passes = registered_passes()
    rest, flags = _split_pass_flags(argv, passes)
    args = _build_parser(passes).parse_args(rest)
    if args.pass_pipeline and flags:
        sys.stderr.write("kiln-opt: error: --pass-pipeline cannot be combined with pass flags\n")
        return 2

    ctx = make_context(torch=True)
    with ctx, ir.Location.unknown():
        try:
            text, source = _read_input(args.input)
        except KilnError as e:
            sys.stderr.write(f"kiln-opt: error: {e}\n")
            return 1
        source_lines = {source: text.split("\n")}

        def pipeline_factory():
            if args.pass_pipeline:
                return Pipeline.parse(args.pass_pipeline)
            p = Pipeline()
            for name, value in flags:
                if name in passes:
                    p.add(name, **_flag_options(value))
                else:
                    p.add(name + ("{" + value.strip("'\"") + "}" if value else ""))
            return p

        try:
            pipeline_factory()  # report a bad pipeline once, before any input
        except PipelineError as e:
            sys.stderr.write(f"kiln-opt: error: {e.message}\n")
            return 1

        outputs, failed = [], False
        for chunk, _first_line in _chunks(text, args.split_input_file):
            diags: list[Diagnostic] = []
            out = None
            try:
                out, diags = _run_chunk(chunk, source, pipeline_factory, args, source_lines)
            except KilnError as e:
                diags = list(e.diagnostics)
                if not diags:
                    diags = [Diagnostic("error", "", e.message)]
            if args.verify_diagnostics:
                from .verify_diagnostics import check_diagnostics, parse_expectations

                # As mlir-opt under --verify-diagnostics, the "see current
                # operation" dump is not part of what a test checks.
                for d in diags:
                    d.notes = [n for n in d.notes if not n.message.startswith("see current operation")]
                problems = check_diagnostics(parse_expectations(chunk), diags, source)
                if problems:
                    failed = True
                    sys.stderr.write("\n".join(problems) + "\n")
            else:
                if any(d.severity == "error" for d in diags):
                    failed = True
                _print_diags(diags, source_lines)
            if out is not None:
                outputs.append(out)
        # As mlir-opt: the chunks that succeeded are printed even when others failed.
        _write_output(args.output, ("\n" + _SPLIT_MARKER + "\n").join(outputs))
        return 1 if failed else 0


def _flag_options(value: str | None) -> dict:
    import shlex

    out = {}
    for item in shlex.split((value or "").strip("{}")):
        key, sep, v = item.partition("=")
        out[key] = v if sep else "true"
    return out


def _write_output(path: str, text: str) -> None:
    if path == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as e:
        raise KilnError(f"could not write output file '{path}': {e.strerror or e}") from None


def entry() -> None:
    """Console-script wrapper: exit with main's status."""
    from ._cli import run_tool

    run_tool("kiln-opt", main)


if __name__ == "__main__":
    entry()
