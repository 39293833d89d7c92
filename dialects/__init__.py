"""Dialects defined by kiln, and the symbolic dim algebra their types use."""
