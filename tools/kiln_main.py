"""``kiln``: the umbrella command.  ``kiln cache info`` / ``kiln cache clear``;
``kiln build-native`` builds the native runtime library ahead of use
(``scripts/setup.sh`` runs it)."""

from __future__ import annotations

import argparse
import json

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
    args = parser.parse_args(argv)
    if args.command == "build-native":
        return _build_native(args)

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


def entry() -> None:
    """Console-script wrapper: exit with main's status."""
    from ._cli import run_tool

    run_tool("kiln", main)


if __name__ == "__main__":
    entry()
