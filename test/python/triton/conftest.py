"""Triton tests run in the interpreter (CPU, torch tensors) with a private kernel cache."""

import os
import tempfile

# Before triton is imported anywhere: the interpreter is chosen at import/jit time.
os.environ["TRITON_INTERPRET"] = "1"
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
os.environ["KILN_CACHE_DIR"] = tempfile.mkdtemp(prefix="kiln-cache-test-")

