"""Dialect Conversion pattern sets, one module (or package) per source-to-target pair."""

# Modules defining conversion passes, imported by kiln.pipelines.registry.load_passes.
PASS_MODULES = ("kiln.conversions.kiln_to_linalg.convert", "kiln.conversions.torch_to_kiln")
