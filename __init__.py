"""kiln: an MLIR-based inference compiler for models with dynamic shapes.

The public API is re-exported here; heavy modules (the frontends, the
compiler) load on first use so that ``import kiln`` stays cheap.
"""

from .errors import (  # noqa: F401
    ConversionError,
    DimError,
    KilnError,
    ParseError,
    PipelineError,
    ShapeError,
    UnsupportedError,
    VerifyError,
)

__version__ = "0.1.0"

# name -> module that defines it, imported lazily by __getattr__.
_LAZY = {
    "make_context": "kiln.context",
    "parse_module": "kiln.module",
    "verify_module": "kiln.module",
    "Pipeline": "kiln.pipelines",
    "import_torch": "kiln.frontends",
    "import_onnx": "kiln.frontends",
    "compile": "kiln.compiler",
    # Generation: a transformers decoder-only LM with its KV cache (kiln.lm).
    "compile_lm": "kiln.lm",
    # Artifacts: kiln.save(compiled, path) / kiln.load(path); loading imports no compiler layer.
    "save": "kiln.runtime.artifact",
    "load": "kiln.runtime.artifact",
    "CompiledModel": "kiln.runtime",
    "register_kernel": "kiln.backends.registry",
    "register_decomposition": "kiln.backends.user",
    "CKernel": "kiln.backends.user_c",
    "format_report": "kiln.runtime.report",
    # Settings: one documented object; KILN_* variables override its defaults.
    "Options": "kiln.options",
}

__all__ = sorted(
    ["ConversionError", "DimError", "KilnError", "ParseError", "PipelineError", "ShapeError",
     "UnsupportedError", "VerifyError", "__version__", *_LAZY]
)


from .options import _configure_logging_at_import  # noqa: E402

_configure_logging_at_import()  # KILN_LOG=info|debug|...: a stderr handler on the kiln logger


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'kiln' has no attribute '{name}'")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
