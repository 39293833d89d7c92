"""kiln: an MLIR-based inference compiler for models with dynamic shapes."""

__version__ = "0.1.0"
