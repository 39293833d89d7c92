#!/usr/bin/env bash
# Run the lit suite, then pytest. Assumes scripts/setup.sh has run.
set -euo pipefail
cd "$(dirname "$0")/.."
. .venv/bin/activate
lit -sv test/
# The API reference builds (no pdoc warning, every public name documented) and docs/ops.md is current.
bash scripts/docs.sh
python -m pytest -q test/python "$@"
