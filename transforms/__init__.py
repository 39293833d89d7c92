"""kiln-level graph passes, one module per pass."""

# Modules defining kiln passes, imported by kiln.pipelines.registry.load_passes.
PASS_MODULES = (
    "kiln.transforms.fold_constants",
    "kiln.transforms.dce",
    "kiln.transforms.simplify",
    "kiln.transforms.fuse",
    "kiln.transforms.decompose",
    "kiln.transforms.infer_shapes",
    "kiln.transforms.verify_symbols",
    "kiln.transforms.partition",
    "kiln.transforms.plan_memory",
    "kiln.transforms.precision",
    "kiln.transforms.fold_qdq",
)
