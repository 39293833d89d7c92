"""``kiln``: the umbrella command.  ``kiln cache info`` / ``kiln cache clear``."""

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
    args = parser.parse_args(argv)

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


def entry() -> None:
    """Console-script wrapper: exit with main's status."""
    from ._cli import run_tool

    run_tool("kiln", main)


if __name__ == "__main__":
    entry()
