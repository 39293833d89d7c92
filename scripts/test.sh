#!/usr/bin/env bash
# Run the lit suite, then pytest. Assumes scripts/setup.sh has run.
set -euo pipefail
cd "$(dirname "$0")/.."
. .venv/bin/activate
lit -sv test/
python -m pytest -q test/python "$@"
