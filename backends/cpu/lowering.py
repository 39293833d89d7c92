"""The CPU lowering: kiln IR to the LLVM dialect, stage by stage.

:func:`lower` runs :data:`STAGES` (registered passes, so ``kiln-opt
--pass-pipeline`` and ``kiln-compile --stop-after=<stage>`` reproduce any of
them) and announces each on the progress line.  :func:`kiln.compile` and
the static kernels of :mod:`kiln.backends.cpu.specialize` both lower with
it; it lives here, below ``compiler.py``, so that the backend need not
import the compiler back (``test_layering.py``).
"""

from __future__ import annotations

from ... import progress
from ..._mlir import ir

__all__ = ["STAGES", "lower"]

#: The lowering stages in order (names of registered passes).
STAGES = (
    "kiln-infer-shapes",
    "convert-kiln-to-linalg",
    "kiln-cpu-prepare",
    "kiln-cpu-vectorize",
    "kiln-cpu-bufferize",
    "kiln-cpu-library-calls",
    "kiln-cpu-library",
    "kiln-cpu-lowp-gemm",
    "kiln-cpu-flatten-elementwise",
    "kiln-cpu-to-llvm",
)


def lower(module: ir.Module, stop_after: str | None = None, vectorize: int = 1,
          verify_each: bool | None = True) -> ir.Module:
    """Run the lowering stages on ``module`` in place (up to ``stop_after``);
    ``verify_each`` as for :meth:`kiln.pipelines.Pipeline.run` (None: once at
    the end, what :func:`compile` asks for)."""
    from ...pipelines import Pipeline

    with module.context, ir.Location.unknown():
        p = Pipeline(stop_after=stop_after)
        _announce_stages(p, module)
        for name in STAGES:
            if name == "convert-kiln-to-linalg" and not _integer_kernel():
                # Without kiln_i8_gemm an integer product's i32 contraction would be generated code (seconds for
                # a 128 x 768 x 3072 product): its exact f32 GEMM chunks run on the f32 path instead.
                from ...transforms.decompose import DECOMPOSITIONS

                p.add("kiln-decompose", **{opt: opt == "matmul-integer" for opt, _ in DECOMPOSITIONS.values()})
            if name == "kiln-cpu-vectorize":
                p.add(name, level=vectorize)
            else:
                p.add(name)
        p.run(module, verify_each=verify_each)
    return module


def _integer_kernel() -> bool:
    """Whether kiln-cpu-lowp-gemm will call the native ``kiln_i8_gemm`` for ``kiln.matmul_integer``."""
    from .library import enabled
    from .lowp_gemm import _native

    return enabled() and _native() is not None


def _announce_stages(p, module: ir.Module) -> None:
    """Have pipeline ``p`` announce each lowering stage it enters
    (:func:`kiln.progress.stage`: ``lowering 3/7 (kiln-cpu-vectorize, 40 kernels)``)."""
    kernels = sum(1 for op in module.body.operations if op.operation.name == "func.func")
    previous = p.after_stage

    def announce(i: int) -> None:
        if i < len(STAGES):
            progress.stage("lowering", i + 1, len(STAGES), detail=f"{STAGES[i]}, {kernels} kernel(s)")

    def after_stage(stage, op) -> None:
        if previous is not None:
            previous(stage, op)
        if stage.name in STAGES:
            announce(STAGES.index(stage.name) + 1)

    p.after_stage = after_stage
    announce(0)
