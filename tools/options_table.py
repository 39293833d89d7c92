"""The README's table of settings, generated from :data:`kiln.options.SETTINGS`.

    python -m kiln.tools.options_table [-o README.md] [--check]

Rewrites the table between the README's markers
(:data:`~kiln.options.TABLE_BEGIN` ... :data:`~kiln.options.TABLE_END`);
``--check`` exits 1 when the file's table is not what the settings give
(the test suite checks it, so the table stays current).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..options import update_readme

__all__ = ["DEFAULT_PATH", "main"]

#: The README of the package (the repository root is the package).
DEFAULT_PATH = Path(__file__).resolve().parents[1] / "README.md"


def main(argv: list[str] | None = None) -> int:
    """Rewrite (or ``--check``) the table; 1 when ``--check`` finds it stale."""
    p = argparse.ArgumentParser(prog="python -m kiln.tools.options_table", description=__doc__.split("\n\n")[0])
    p.add_argument("-o", "--output", type=Path, default=DEFAULT_PATH, help=f"the file (default: {DEFAULT_PATH})")
    p.add_argument("--check", action="store_true", help="exit 1 if the file's table is not what the settings give")
    args = p.parse_args(argv)
    changed = update_readme(args.output, write=not args.check)
    if args.check:
        if changed:
            print(f"{args.output}: the options table is stale: run `python -m kiln.tools.options_table` and commit it",
                  file=sys.stderr)
            return 1
        print(f"{args.output}: the options table is current")
        return 0
    print(f"{args.output}: {'updated' if changed else 'up to date'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
