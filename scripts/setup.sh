#!/usr/bin/env bash
# Set up .venv with kiln and its test tools, and build kiln's native library for
# this machine. Idempotent; safe on a fresh machine.
# torch comes first, pinned to the local CPU wheel (anything else pulls a CUDA build).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
. .venv/bin/activate
pip install -q --disable-pip-version-check "torch==2.13.0" 2>&1 | grep -v '^WARNING: Location' || true
pip install -q --disable-pip-version-check -e '.[test,serve,bench]' 2>&1 | grep -v '^WARNING: Location' || true
# The zoo tests' model libraries. torchvision's registry wheel is a CUDA build that
# would pull a CUDA torch: --no-deps (its C extension does not load; its models are
# pure Python, test/python/zoo/zoo_common.py imports it). timm's other needs
# (huggingface_hub, pyyaml, safetensors) come with transformers.
pip install -q --disable-pip-version-check --no-deps "torchvision==0.28.*" "timm==1.0.*" 2>&1 \
  | grep -v '^WARNING: Location' || true
python -c "import kiln, torch; assert torch.__version__.startswith('2.13.0'), torch.__version__" \
  || { echo "setup failed: kiln or torch 2.13.0 does not import" >&2; exit 1; }
# The native runtime library (runtime/native/*.c), compiled now rather than by
# the first process that needs it; printing each step. A library already built
# from the same sources is checked against its digest and kept. On a host that
# is not x86 it says kiln runs without it; KILN_NATIVE=0 skips the step.
if [ "${KILN_NATIVE:-1}" != "0" ]; then
  kiln build-native \
    || { echo "setup failed: the native library did not build (the compiler's error is above)" >&2; exit 1; }
fi
