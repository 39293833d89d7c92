"""Backends of kiln (see DESIGN.md)."""
