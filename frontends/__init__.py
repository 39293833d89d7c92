"""Frontends of kiln (see DESIGN.md)."""
