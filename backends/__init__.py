"""Backends (cpu, triton, fallback) and the kernel registry."""

# Modules defining backend passes, imported by kiln.pipelines.registry.load_passes.
PASS_MODULES = ("kiln.backends.cpu.pipeline", "kiln.backends.cpu.calls", "kiln.backends.cpu.contractions",
                "kiln.backends.cpu.lowp_gemm", "kiln.backends.cpu.flatten", "kiln.backends.select_kernels")
