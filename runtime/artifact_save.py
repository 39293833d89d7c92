"""Writing an artifact: :func:`save` (``kiln.save``); the format is described
in :mod:`kiln.runtime.artifact`.

The model remembers what saving needs (its :class:`~kiln.runtime.executor.ModelRuntime`
keeps the prepared schedule, plan, constants, kernels and options); the
object code comes from the kernel cache's entries
(:func:`kiln.backends.cpu.export.engine_object`), the inlined weights from
the kernels' modules (:func:`kiln.backends.cpu.export.module_weights`).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import time

import numpy as np

from ..errors import KilnError
from .artifact import (
    _ST_DTYPES,
    FORMAT,
    KERNEL_IR,
    MANIFEST,
    WEIGHTS,
    _dims_json,
    _plan_json,
    _schedule_json,
    _write_safetensors,
    required_features,
)

__all__ = ["save"]

#: What save writes into a directory; an existing artifact's are replaced, nothing else is touched.
_OWN = (MANIFEST, WEIGHTS, KERNEL_IR, "kernels", "native", "model.kiln.mlir")  # (the last: format 1)


def _prepare_directory(directory: str) -> None:
    """Make ``directory`` ready for a new artifact: created if missing, an
    older artifact's files removed (its manifest first, so a half-written
    directory is never a valid artifact); anything else is refused."""
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise KilnError(f"cannot save to '{directory}': it is a file, not a directory")
    os.makedirs(directory, exist_ok=True)
    present = set(os.listdir(directory))
    if present and MANIFEST not in present:
        raise KilnError(f"cannot save to '{directory}': the directory is not empty and holds no kiln artifact "
                        "(kiln.save writes a directory of its own)")
    for name in _OWN:  # the manifest first
        path = os.path.join(directory, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        elif os.path.lexists(path):
            os.unlink(path)


def _splice(data: bytes, weights) -> tuple[bytes, list, list]:
    """Cut each weight's bytes out of the library ``data`` where they occur
    (largest first, never overlapping): ``(what is left, [(offset, length,
    name)], the weights cut)``.  Putting the bytes back at the offsets gives
    ``data`` exactly, whichever occurrence was cut."""
    taken, holes, used = [], [], []
    for name, dtype, shape, raw in sorted(weights, key=lambda w: -w[3].nbytes):
        needle, n, start = memoryview(raw).cast("B"), raw.nbytes, 0
        while True:
            at = data.find(needle, start)
            if at < 0:
                break
            if all(at + n <= a or b <= at for a, b in taken):
                taken.append((at, at + n))
                holes.append((at, n, name))
                used.append((name, dtype, shape, raw))
                break
            start = at + 1
    holes.sort()
    pieces, pos = [], 0
    for at, n, _ in holes:
        pieces.append(data[pos:at])
        pos = at + n
    pieces.append(data[pos:])
    return b"".join(pieces), [list(h) for h in holes], used


def _typed(name: str, dtype: str, shape: tuple, raw: np.ndarray) -> tuple:
    """A safetensors entry: typed when the bytes are the tensor's, flat bytes otherwise."""
    itemsize = {"i1": 1, "i8": 1, "ui8": 1, "i16": 2, "i32": 4, "i64": 8, "f16": 2, "bf16": 2, "f32": 4, "f64": 8}.get(dtype)
    if dtype in _ST_DTYPES and itemsize and raw.nbytes == itemsize * int(np.prod(shape, dtype=np.int64)):
        return (name, dtype, tuple(shape), raw)
    return (name, "u8", (raw.nbytes,), raw)


def _tensor_bytes(t) -> np.ndarray:
    """The bytes of a torch tensor (any dtype, bf16 and bool included) as a flat uint8 array."""
    import torch

    t = t.detach().contiguous().reshape(-1)
    return t.view(torch.uint8).numpy() if t.numel() else np.zeros(0, np.uint8)


def _digest(path: str) -> dict:
    h, size = hashlib.sha256(), 0
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
            size += len(chunk)
    return {"size": size, "sha256": h.hexdigest()}


def _write(directory: str, name: str, data: bytes) -> None:
    path = os.path.join(directory, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def save(model, directory) -> dict:
    """Write ``model`` (a :class:`~kiln.runtime.CompiledModel` from
    :func:`kiln.compile` on the CPU, or one :func:`kiln.load` returned) as an
    artifact directory; returns the manifest.  See :mod:`kiln.runtime.artifact`.

    ``directory`` is created; an artifact already there is replaced; a
    directory holding anything else is refused."""
    from ..backends.cpu.export import engine_object
    from . import native
    from .blas import blas_library
    from .cpu_code import CpuKernel
    from .ort_fallback import is_fallback_kernel

    why = getattr(model, "save_error", None)  # a model of several compiled ones (kiln.runtime.value_inputs)
    if callable(why):
        raise KilnError(why())
    rt = getattr(model, "runtime", None)
    if getattr(model, "device", None) != "cpu" or getattr(rt, "prepared", None) is None:
        raise KilnError("kiln.save takes a model kiln.compile compiled for the CPU (device='cpu'), "
                        f"not a {type(model).__name__}" + (f" on '{model.device}'" if hasattr(model, "device") else ""))
    start = time.perf_counter()
    directory = os.fspath(directory)
    prepared, kernels = rt.prepared, rt.kernels
    user = [k for k in kernels if getattr(k, "kind", None) == "user"]  # kiln.backends.user.UserKernel
    if user:  # a Python function of the user's process: nothing an artifact can hold
        raise KilnError(f"kiln.save: kernel '{user[0].name}' runs '{user[0].candidate}', registered from user code "
                        f"for '{user[0].op_name}'; an artifact cannot hold a Python kernel (compile the model "
                        "where the kernel is registered instead)")
    sched = prepared.schedule
    tensors: list = []
    libraries: dict = {}
    blas = blas_library()
    blas_name = os.path.basename(blas) if blas else None
    needs_blas = False

    def add_library(label: str, engine, module, names: list[str]) -> str:
        nonlocal needs_blas
        data = engine_object(engine)
        if module is not None:
            from ..backends.cpu.export import module_weights

            weights = module_weights(module)
        else:  # loaded from an artifact: the weights it was loaded with
            weights = list(getattr(engine, "kiln_weights", ()))
        rest, holes, used = _splice(data, [(f"{label}/{n}", d, s, r) for n, d, s, r in weights])
        tensors.extend(_typed(*w) for w in used)
        needs_blas = needs_blas or bool(blas_name and blas_name.encode() in data)
        libraries[label] = {"file": f"kernels/{label}.so", "size": len(data), "kernels": names, "weights": holes}
        pending[f"kernels/{label}.so"] = rest
        return label

    pending: dict[str, bytes] = {}
    generated = [k for k in kernels if isinstance(k, CpuKernel)]
    if {id(k.engine) for k in generated}.__len__() > 1:
        raise KilnError("kiln.save: the model's dynamic kernels come from more than one library")
    if generated:
        add_library("generic", generated[0].engine, generated[0]._module,
                    list(dict.fromkeys(k.name for k in generated)))  # identical kernels share one
    for vid, t in sorted(prepared.constants.items()):
        tensors.append(_typed(f"const/{vid}", str(sched.values[vid].info.dtype), tuple(t.shape), _tensor_bytes(t)))

    # Every variant that has served or may serve calls: the profiles, the specializations compiled so
    # far, and (a loaded model) those it was saved with and has not needed yet.
    selector = rt.selector
    with selector._lock:
        entries = [(p, selector.variants[p.name]) for p in selector.profiles] + list(selector._specs.values())
    found = [(p.describe(), v.at, v.choices, v.static.kernels if v.static is not None else [])
             for p, v in entries if hasattr(v, "choices")]
    built = {d["name"] for d, *_ in found}
    for name, (at, choices, chosen) in getattr(rt, "restored", {}).items():
        if name not in built:
            found.append((rt.restored_info[name], at, choices, chosen or []))
    variants = []
    for i, (desc, at, choices, chosen) in enumerate(found):
        lib = None
        static = [k for k in chosen if isinstance(k, CpuKernel) and k.static]
        if static:
            if len({id(k.engine) for k in static}) > 1:
                raise KilnError(f"kiln.save: the static kernels of '{desc['name']}' come from more than one library")
            lib = add_library(f"variant{i}", static[0].engine, static[0]._module, [k.name for k in static])
        variants.append({"name": desc["name"], "kind": desc["kind"], "ranges": desc["ranges"], "at": dict(at),
                         "choices": dict(choices), "library": lib})

    fallback = {str(i): k.to_json() for i, k in enumerate(kernels) if is_fallback_kernel(k)}
    kernel_text = getattr(rt.specialize, "kernel_text", None)
    if kernel_text is None and hasattr(rt.specialize, "read_text"):
        kernel_text = rt.specialize.read_text()

    native_file = None
    if generated and native.loaded_library():
        try:
            with open(native.loaded_library(), "rb") as f:
                native_file = "native/" + os.path.basename(native.loaded_library())
                pending[native_file] = f.read()
        except OSError as e:
            raise KilnError(f"kiln.save: cannot read the native library the kernels call ({e})") from None

    # Everything is read: only now is the directory changed.
    _prepare_directory(directory)
    for name, data in pending.items():
        _write(directory, name, data)
    _write_safetensors(os.path.join(directory, WEIGHTS), tensors, {"format": FORMAT})
    if kernel_text is not None:
        _write(directory, KERNEL_IR, kernel_text.encode())
    files = {}
    for dirpath, _, names in os.walk(directory):
        for n in names:
            rel = os.path.relpath(os.path.join(dirpath, n), directory).replace(os.sep, "/")
            if rel != MANIFEST:
                files[rel] = _digest(os.path.join(directory, rel))

    floats = {"f16", "bf16", "f32", "f64"}
    manifest = {
        "format": FORMAT,
        "kiln_version": _kiln_version(),
        "device": "cpu",
        "machine": platform.machine(),
        "cpu_features": required_features(),
        "precision": sorted({str(v.info.dtype) for v in sched.values} & floats),
        "compile_seconds": round(float(rt.compile_time_s), 3),
        "symbols": {n: {"min": s.min, "max": s.max, "opt": s.opt, "multiple_of": s.multiple_of}
                    for n, s in rt.symbols.items()},
        "inputs": [{"name": s.name, "dims": _dims_json(s.dims), "dtype": s.dtype} for s in model.inputs],
        "outputs": [{"name": n, "dims": _dims_json(o.dims), "dtype": o.dtype}
                    for n, o in zip(model.output_names, model.outputs)],
        "value_names": [v.name for v in model.values],
        "checks": [c.as_data() for c in model.checks],
        "profiles": [p.describe() for p in rt.profiles],
        "policy": rt.policy,
        "budget": rt.budget,
        "static_kernels": rt.static_kernels,
        "profiling": bool(rt.metrics.profiling),
        "arena_pool_bytes": rt.arena_pool_bytes,
        "schedule": _schedule_json(sched),
        "plan": _plan_json(prepared.plan),
        "constants": {str(vid): f"const/{vid}" for vid in sorted(prepared.constants)},
        "generated": {str(i): n for i, n in sorted(prepared.generated.items())},
        "fallback": fallback,
        "libraries": libraries,
        "variants": variants,
        "native": native_file,
        "blas": blas_name if needs_blas else None,
        "weights": WEIGHTS,
        "kernel_ir": {"file": KERNEL_IR, "vectorize": int(getattr(rt.specialize, "vectorize", 1))}
        if kernel_text is not None else None,
        "files": files,
        "save_seconds": round(time.perf_counter() - start, 3),
    }
    tmp = os.path.join(directory, MANIFEST + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=1)
    os.replace(tmp, os.path.join(directory, MANIFEST))
    return manifest


def _kiln_version() -> str:
    from .. import __version__

    return __version__
