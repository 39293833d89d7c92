"""Shared pytest fixtures: a kiln context per test (one context owns everything a test touches)."""

import os
import tempfile

import pytest

from kiln._mlir import ir
from kiln.context import make_context

# Compiled kernels and the native library go to a cache of this session, not
# the user's (~/.cache/kiln): tests see cold caches and leave nothing behind.
os.environ.setdefault("KILN_CACHE_DIR", tempfile.mkdtemp(prefix="kiln-test-cache-"))


@pytest.fixture
def ctx():
    """A fresh context with the kiln dialect, entered, with an unknown location."""
    context = make_context()
    with context, ir.Location.unknown():
        yield context
