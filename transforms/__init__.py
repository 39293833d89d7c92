"""kiln-level graph passes, one module per pass (registered in kiln.pipelines.registry)."""
