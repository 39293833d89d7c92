"""Runtime of kiln (see DESIGN.md)."""
