#!/usr/bin/env bash
# Set up .venv with kiln and its test tools. Idempotent; safe on a fresh machine.
# torch comes first, pinned to the local CPU wheel (anything else pulls a CUDA build).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
. .venv/bin/activate
pip install -q --disable-pip-version-check "torch==2.13.0" 2>&1 | grep -v '^WARNING: Location' || true
pip install -q --disable-pip-version-check -e '.[test]' 2>&1 | grep -v '^WARNING: Location' || true
python -c "import kiln, torch; assert torch.__version__.startswith('2.13.0'), torch.__version__" \
  || { echo "setup failed: kiln or torch 2.13.0 does not import" >&2; exit 1; }
