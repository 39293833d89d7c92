"""Shared pytest fixtures: a kiln context per test (one context owns everything a test touches)."""

import pytest

from kiln._mlir import ir
from kiln.context import make_context


@pytest.fixture
def ctx():
    """A fresh context with the kiln dialect, entered, with an unknown location."""
    context = make_context()
    with context, ir.Location.unknown():
        yield context
