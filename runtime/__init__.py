"""Runtime of kiln (see DESIGN.md)."""

from .model import CompiledModel  # noqa: E402,F401
