"""``kiln``: the umbrella command.  ``kiln cache info`` / ``kiln cache clear``;
``kiln build-native`` builds the native runtime library ahead of use
(``scripts/setup.sh`` runs it); ``kiln validate MODEL`` checks a model
against PyTorch or ONNX Runtime across its shape range (:mod:`kiln.validate`)."""

from __future__ import annotations

import argparse
import json

from ..errors import KilnError

__all__ = ["entry", "main"]


def main(argv: list[str] | None = None) -> int:
    """Run the command; returns the exit status."""
    parser = argparse.ArgumentParser(prog="kiln", description="kiln: an MLIR-based inference compiler")
    sub = parser.add_subparsers(dest="command", required=True)
    cache = sub.add_parser("cache", help="the persistent kernel cache ($KILN_CACHE_DIR)")
    cache.add_argument("action", choices=["info", "clear"], help="show the cache's contents, or delete them")
    cache.add_argument("--dir", help="the cache root (default: $KILN_CACHE_DIR or the user cache dir)")
    cache.add_argument("--json", action="store_true", help="print info as JSON")
    native = sub.add_parser(
        "build-native", help="build kiln's native runtime library now (setup runs it)",
        description="Compile kiln's native runtime library (thread pool, GEMMs, convolution, attention: "
                    "runtime/native/*.c) with the system C compiler for this machine, printing each step, "
                    "so that no kiln process has to build it on first use. A library already built from the "
                    "same sources, compiler and CPU is checked against its digest and kept (--force rebuilds "
                    "it). Exits 1 with the compiler's error if the build fails; on a host that is not x86 "
                    "it says that kiln runs without the library and exits 0.")
    native.add_argument("--dir", help="build into this folder (default: $KILN_NATIVE_DIR, else runtime/native/build "
                                      "in the installed kiln when writable, else the kernel cache's native/)")
    native.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                        help="kill the compiler (its whole process group) after this long (default 600)")
    native.add_argument("--jobs", type=int, default=None, help="sources compiled at a time (default: the CPUs)")
    native.add_argument("--force", action="store_true", help="rebuild even if a whole library is in place")
    _add_validate(sub)
    args = parser.parse_args(argv)
    if args.command == "build-native":
        return _build_native(args)
    if args.command == "validate":
        return _validate(args)

    from ..backends.cache import KernelCache

    kc = KernelCache(args.dir)
    if args.action == "clear":
        n = kc.clear()
        print(f"removed {n} file(s) from {kc.root}")
        return 0
    info = kc.info()
    if args.json:
        print(json.dumps(info, indent=2, sort_keys=True))
        return 0
    print(f"kiln kernel cache: {info['root']}")
    print(f"  {info['entries']} file(s), {info['bytes']} bytes")
    for kind, k in info["kinds"].items():
        print(f"  {kind:10s} {k['entries']:6d} file(s) {k['bytes']:12d} bytes")
    v = info["versions"]
    print(f"  versions: kiln {v['kiln']}, triton {v['triton']}, mlir {v['mlir']}, format {v['format']}")
    return 0


def _build_native(args) -> int:
    """``kiln build-native``: build (or check) the library, then load it once to
    prove it links; progress goes to stdout as it happens."""
    import ctypes
    from pathlib import Path

    from ..errors import KilnError
    from ..runtime import native

    if not native.x86_host():
        print(f"kiln build-native: skipped: {native.not_x86_message()}", flush=True)
        return 0
    if args.timeout is not None and not args.timeout > 0:
        raise KilnError(f"--timeout {args.timeout:g}: give a positive number of seconds")
    if args.jobs is not None and args.jobs < 1:
        raise KilnError(f"--jobs {args.jobs}: give a positive number of compilations")
    path = native.build_library(force=args.force, timeout=args.timeout, jobs=args.jobs,
                                out_dir=Path(args.dir) if args.dir else None,
                                progress=lambda line: print(line, flush=True))
    try:
        width = ctypes.CDLL(str(path)).kiln_vector_width()
    except (OSError, AttributeError) as e:
        raise KilnError(f"the native library {path} was built but does not load: {e}") from None
    print(f"loaded {path.name}: {width}-lane vectors ({'AVX-512' if width == 16 else 'AVX2'})", flush=True)
    return 0


VALIDATE_HELP = """\
Compile MODEL, run it at the min / opt / max point of each profile (of each
symbol's declared range when no --profile is given) and at --random shapes
drawn in range, run the same random inputs through the reference (PyTorch
eager for a factory, ONNX Runtime for an ONNX file) and check every output
against kiln's tolerance table, kiln.validate.TOLERANCES (|kiln - ref| <=
atol + rtol * |ref| per element; integer and boolean outputs exact):
{table}
Prints per shape and output the max abs / rel error and error / tolerance,
the op coverage of the import, and the fallback rate and time share.

MODEL is pkg.module:factory (returning (module, example_args,
dynamic_shapes); integer inputs are drawn in its example arguments' value
range) or model.onnx (its dim_params' ranges from --symbol; integer inputs
in [0, 15]).  Exit status: 0 when every check passes, 1 on a tolerance
violation (each one named: shape and output) or an error, 2 on bad usage."""


def _add_validate(sub) -> None:
    from ..validate import TOLERANCES

    table = "\n".join(f"  {k:<5} rtol {t.rtol:<7g} atol {t.atol:g}" for k, t in TOLERANCES.items())
    v = sub.add_parser("validate", help="check a model against PyTorch / ONNX Runtime across its shape range",
                       description=VALIDATE_HELP.format(table=table),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    v.add_argument("model", help="pkg.module:factory or model.onnx")
    v.add_argument("--symbol", action="append", default=[], metavar="NAME=MIN:MAX",
                   help="range of an ONNX dim_param symbol (repeatable; ONNX models only)")
    v.add_argument("--profile", action="append", default=[], metavar="[NAME:]SYM=MIN:OPT:MAX[,SYM=...]",
                   help="an optimization profile to compile and validate at (repeatable), e.g. B=1:4:8,L=1:64:128")
    v.add_argument("--policy", choices=["error", "specialize", "generic"],
                   help="what runs outside the profiles (kiln.compile's policy)")
    v.add_argument("--random", type=int, default=2, metavar="N",
                   help="random shapes in range besides min / opt / max (default 2)")
    v.add_argument("--seed", type=int, default=0, help="seed of the random shapes and inputs (default 0)")
    v.add_argument("--precision", choices=["f32", "f16", "bf16", "int8"],
                   help="the tolerance table row to use (default: the model's, from its dtypes)")
    v.add_argument("--rtol", type=float, help="override the table's rtol for float outputs")
    v.add_argument("--atol", type=float, help="override the table's atol for float outputs")
    v.add_argument("--json", action="store_true", help="print the report as JSON")
    v.add_argument("-v", "--verbose", action="store_true", help="progress lines on stderr")
    v.set_defaults(parser=v)


def _parse_profile(text: str, index: int) -> dict:
    """``[NAME:]B=1:4:8,L=1:64:128`` as kiln.compile's profile dict; ValueError if malformed."""
    name, body = "", text
    if ":" in text.split("=", 1)[0]:  # a ':' before the first '=' ends the profile's name
        name, body = text.split(":", 1)
    profile = {"name": name or f"profile{index}"}
    for item in body.split(","):
        sym, eq, rng = item.partition("=")
        parts = rng.split(":")
        if not eq or not sym or len(parts) != 3:
            raise ValueError(f"--profile expects [NAME:]SYM=MIN:OPT:MAX[,SYM=...], got '{text}'")
        try:
            profile[sym.strip()] = tuple(int(p) for p in parts)
        except ValueError:
            raise ValueError(f"--profile expects integer bounds, got '{item}' in '{text}'") from None
    return profile


def _validate(args) -> int:
    """``kiln validate``: the report on stdout, exit 1 on any violation."""
    import os
    import sys

    from ..validate import validate
    from .kiln_import import _parse_symbol

    p = args.parser
    if args.random < 0:
        p.error(f"--random must be a non-negative number of shapes, got {args.random}")
    if args.seed < 0:
        p.error(f"--seed must be a non-negative integer, got {args.seed}")
    for flag in ("rtol", "atol"):
        value = getattr(args, flag)
        if value is not None and not value >= 0:
            p.error(f"--{flag} must be a non-negative number, got {value}")
    is_factory = ":" in args.model and not os.path.exists(args.model)
    if is_factory and args.symbol:
        p.error("--symbol applies to ONNX models; a factory's dynamic_shapes give the ranges")
    try:
        symbols = dict(_parse_symbol(s) for s in args.symbol) or None
    except KilnError as e:
        p.error(str(e))
    try:
        profiles = [_parse_profile(t, i) for i, t in enumerate(args.profile)]
    except ValueError as e:
        p.error(str(e))
    if not is_factory and not os.path.exists(args.model):
        raise KilnError(f"no such file: '{args.model}'")

    def log(msg):
        if args.verbose:
            print(f"kiln validate: {msg}", file=sys.stderr, flush=True)

    report = validate(args.model, symbols=symbols, profiles=profiles or None, policy=args.policy,
                      shapes=args.random, seed=args.seed, rtol=args.rtol, atol=args.atol,
                      precision=args.precision, log=log)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2, sort_keys=True))
    else:
        print(report.format())
    return 0 if report.passed else 1


def entry() -> None:
    """Console-script wrapper: exit with main's status."""
    from ._cli import run_tool

    run_tool("kiln", main)


if __name__ == "__main__":
    entry()
