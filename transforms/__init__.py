"""kiln-level graph passes, one module per pass."""

# Modules defining kiln passes, imported by kiln.pipelines.registry.load_passes.
PASS_MODULES = (
    "kiln.transforms.infer_shapes",
    "kiln.transforms.verify_symbols",
    "kiln.transforms.partition",
    "kiln.transforms.plan_memory",
)
