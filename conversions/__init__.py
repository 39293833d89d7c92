"""Conversions of kiln (see DESIGN.md)."""
