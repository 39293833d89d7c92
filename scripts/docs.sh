#!/usr/bin/env bash
# Build the API reference (HTML from the public API's docstrings, by pdoc) into
# build/docs/ (or the folder given as $1), and check that docs/ops.md matches the
# pattern tables. Fails on a pdoc warning, a public name without a docstring, or a
# stale op table (regenerate it with `python -m kiln.tools.op_table`).
# Assumes scripts/setup.sh has run (pdoc comes with the test extra).
set -euo pipefail
cd "$(dirname "$0")/.."
. .venv/bin/activate
python -m kiln.tools.docs -o "${1:-build/docs}"
python -m kiln.tools.op_table --check
