"""The object code and the weights of compiled CPU kernels, for :func:`kiln.save`.

A kernel library is a shared object: the object-code cache's entry of its
engine (:mod:`.objcache`, read back and checked against its digest), or,
with the cache off, the engine's object file linked here like the cache
links it.  Constants the partitioner inlined into the kernels (the default:
the native GEMM packs a constant weight once, 4-8x faster at small batch
than a weight passed as an argument) are data in that library;
:func:`module_weights` reads them out of the kernels' module so that
:mod:`kiln.runtime.artifact` can store them in the artifact's safetensors
file and cut them out of the stored library (they are put back, byte for
byte, when it is loaded).

Reading weights out of a module needs MLIR (imported there); the object
code of a model loaded from an artifact is read back without it.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from ...errors import KilnError

__all__ = ["engine_object", "module_weights"]

#: Constants smaller than this stay in the library (cutting them out saves nothing).
MIN_WEIGHT_BYTES = 4096


def engine_object(engine) -> bytes:
    """The shared object holding ``engine``'s kernels, as bytes.

    In order: the bytes the engine was loaded from an artifact with
    (``engine.kiln_object``), its object-code cache entry (checked against
    the entry's digest and key), or its object file linked with the C
    compiler (an ExecutionEngine compiled with the cache off).  KilnError
    when none is available."""
    again = getattr(engine, "kiln_object", None)
    if again is not None:
        return again()
    key = getattr(engine, "kiln_key", None)
    if key:
        from ..cache import digest_problem
        from .objcache import _entry

        entry = _entry(key)
        try:
            data = entry.read_bytes()
        except OSError:
            data = None
        if data is not None and digest_problem(entry, key, data) is None:
            return data
    if hasattr(engine, "dump_to_object_file"):
        return _link(engine)
    raise KilnError("the object code of this model's kernels is gone (its cache entry was removed or damaged): "
                    "compile the model again, then save it")


def _link(engine) -> bytes:
    """Link the engine's object file into a shared object, as the cache does
    (:func:`kiln.backends.cpu.objcache._store`)."""
    from .library import shared_libs
    from .objcache import _linker, _split_libs

    cc = _linker()
    if cc is None:
        raise KilnError("saving a model compiled with the kernel cache off links its object code with a C "
                        "compiler, and none was found (cc, gcc or $CC)")
    linked, _ = _split_libs(shared_libs())
    with tempfile.TemporaryDirectory(prefix="kiln-save-") as tmp:
        obj, so = os.path.join(tmp, "k.o"), os.path.join(tmp, "k.so")
        engine.dump_to_object_file(obj)
        rpaths = [f"-Wl,-rpath,{os.path.dirname(lib)}" for lib in linked]
        try:
            subprocess.run([cc, "-shared", "-o", so, obj, *linked, *rpaths], check=True, capture_output=True,
                           timeout=300)
        except (OSError, subprocess.SubprocessError) as e:
            detail = getattr(e, "stderr", b"") or b""
            raise KilnError(f"linking the kernels' object code failed: {e} {detail.decode(errors='replace')[:300]}") from None
        return Path(so).read_bytes()


def module_weights(module, min_bytes: int = MIN_WEIGHT_BYTES) -> list[tuple[str, str, tuple, np.ndarray]]:
    """The large constants of ``module`` (a kernel module, kiln dialect or
    lowered to LLVM): ``(name, dtype, shape, raw bytes)`` each, the bytes as
    a flat uint8 array in the layout the generated code stores them in.

    Names are the op's symbol (``__constant_1024x4096xf32``) or its op name
    and position; a constant whose bytes cannot be read is left out (it
    stays in the library).  Splat constants hold no data and are skipped."""
    from ..._mlir import ir
    from ...transforms._resources import resource_bytes

    found: list = []
    seen: set = set()

    def visit(op):
        for named in op.attributes:
            attr = named.attr if hasattr(named, "attr") else op.attributes[named]
            name = named.name if hasattr(named, "name") else named
            raw = _raw(ir, attr, op, resource_bytes)
            if raw is None or raw.nbytes < min_bytes:
                continue
            t = ir.ShapedType(attr.type)
            label = (ir.StringAttr(op.attributes["sym_name"]).value if "sym_name" in op.attributes
                     else f"{op.name}.{name}")
            base, k = label, 1
            while label in seen:
                k += 1
                label = f"{base}.{k}"
            seen.add(label)
            found.append((label, str(t.element_type), tuple(t.shape), raw))
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return found


def _raw(ir, attr, op, resource_bytes) -> np.ndarray | None:
    """The bytes of a dense or dense_resource elements attribute (flat uint8), or None."""
    if isinstance(attr, ir.DenseElementsAttr):
        if attr.is_splat:
            return None
        try:
            a = np.asarray(attr)
        except Exception:  # noqa: BLE001 - a dtype numpy cannot view (bf16): it stays in the library
            return None
        if a.dtype == object:
            return None
        return np.ascontiguousarray(a).reshape(-1).view(np.uint8)
    if str(attr).startswith("dense_resource<"):
        try:
            return resource_bytes(attr, op)
        except Exception:  # noqa: BLE001 - unreadable blob: it stays in the library
            return None
    return None
