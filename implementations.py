"""Every implementation of every kiln op, side by side, one table per op family (issue 40).

An op's semantics exist several times, each where its layer needs it:

==============  ==============================================================
column          where it is registered
==============  ==============================================================
``numpy``       :data:`kiln.transforms.fold_constants.EVALUATORS`: the
                reference (constant folding runs it; every other column is
                checked against it)
``generated``   :data:`kiln.conversions.kiln_to_linalg.LOWERINGS`: kiln ->
                linalg -> LLVM, the CPU path's generated code
``native``      the CPU library kernels of the kernel registry
                (:mod:`kiln.backends.cpu.library_kernels`), and the calls that
                apply the op as an epilogue step of a product or convolution
                (:data:`kiln.backends.cpu.epilogues.EPILOGUE_OPS`)
``triton``      the Triton backend's kernel kind (:mod:`kiln.backends.triton.spec`):
                an anchor kind, ``pointwise``, ``view``
``torch``       the PyTorch kernel a Triton-backend schedule runs it with
                (:data:`kiln.backends.triton.torch_ops.TORCH_OPS`)
``decompose``   :data:`kiln.transforms.decompose.DECOMPOSITIONS`: a rewrite
                into primitive kiln ops
==============  ==============================================================

They stay in their layers (the numpy reference must not import MLIR's
lowering, the runtime must not import the compiler); this module, above
them all, reads each registry and lays them out per family -- the dialect
module that defines the op (``elementwise``, ``nn``, ``data``, ``quant``,
``fused``) or its ``FAMILY`` (``reductions``).  ``docs/ops.md`` prints :func:`table`, and
``test/python/dialect/test_op_implementations.py`` runs every implementation
it lists against the ``numpy`` column at random shapes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["COLUMNS", "OpImplementations", "families", "implementations", "table"]

#: The implementation columns, in table order.
COLUMNS = ("numpy", "generated", "native", "triton", "torch", "decompose")


@dataclass(frozen=True)
class OpImplementations:
    """One op's implementations (None / empty where it has none)."""

    op: str
    family: str
    numpy: Callable | None
    generated: Callable | None
    native: tuple[str, ...]  # registry entry names; "<entry> (epilogue)" for an epilogue step
    triton: str | None  # the Triton kernel kind
    torch: Callable | None
    decompose: Callable | None

    def columns(self) -> dict[str, object]:
        """``{column: implementation}`` for the columns this op has."""
        return {c: getattr(self, c) for c in COLUMNS if getattr(self, c)}


def _family(cls) -> str:
    """The op's ``FAMILY``, else the dialect module defining it."""
    return getattr(cls, "FAMILY", None) or cls.__module__.rsplit(".", 1)[-1]


def _native_entries() -> dict[str, list[str]]:
    from .backends.cpu.epilogues import EPILOGUE_OPS
    from .backends.registry import REGISTRY

    REGISTRY.load_builtins()
    out: dict[str, list[str]] = {}
    for entry in REGISTRY.entries:
        if entry.device == "cpu" and entry.name.startswith("native.") and entry.name not in out.get(entry.op, []):
            out.setdefault(entry.op, []).append(entry.name)
    for entry, ops in EPILOGUE_OPS.items():
        for op in ops:
            out.setdefault(op, []).append(f"{entry} (epilogue)")
    return out


def _triton_kind(name: str) -> str | None:
    from .backends.triton import spec

    if name in spec.ANCHORS:
        return spec.ANCHORS[name]
    if name in spec.POINTWISE_OPS:
        return "pointwise"
    if name in spec.VIEW_OPS:
        return "view"
    return None


def implementations(name: str) -> OpImplementations:
    """The implementations of kiln op ``name`` (``"kiln.softmax"``)."""
    return _build()[name]


def table() -> dict[str, list[OpImplementations]]:
    """``{family: [OpImplementations, ...]}``, families and ops sorted by name."""
    out: dict[str, list[OpImplementations]] = {}
    for impl in sorted(_build().values(), key=lambda i: (i.family, i.op)):
        out.setdefault(impl.family, []).append(impl)
    return out


def families() -> list[str]:
    """The op families, sorted."""
    return sorted(table())


_CACHE: dict[str, OpImplementations] = {}


def _build() -> dict[str, OpImplementations]:
    if not _CACHE:
        from .backends.triton.torch_ops import TORCH_OPS
        from .conversions.kiln_to_linalg import LOWERINGS
        from .dialects.kiln import OPS
        from .transforms.decompose import DECOMPOSITIONS
        from .transforms.fold_constants import EVALUATORS, evaluate

        native = _native_entries()
        for name, cls in OPS.items():
            _CACHE[name] = OpImplementations(
                op=name,
                family=_family(cls),
                # None in EVALUATORS: the result's shape decides (reshape, expand, range): evaluate() does.
                numpy=EVALUATORS.get(name) or (evaluate if name in EVALUATORS else None),
                generated=LOWERINGS.get(name),
                native=tuple(native.get(name, ())),
                triton=_triton_kind(name),
                torch=TORCH_OPS.get(name),
                decompose=(DECOMPOSITIONS.get(name) or (None, None))[1],
            )
    return _CACHE
