"""Command-line tools: kiln-opt (and, as they land, kiln-import, kiln-compile, kiln-run, kiln-bench)."""
