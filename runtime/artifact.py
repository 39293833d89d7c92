"""Artifacts: a compiled model as a directory that loads without the compiler.

:func:`save` (``kiln.save``) writes::

    kiln-artifact.json      the manifest: format, symbols, profiles, policy,
                            device, precision, inputs and outputs, the CPU
                            features the code needs, the schedule and its
                            memory plan, and the size and sha256 of every file
    weights.safetensors     the weights (safetensors: any safetensors reader
                            opens it), memory-mapped on load
    kernels/<variant>.so    the object code of the kernels: the dynamic ones
                            ("generic") and the static ones of each profile or
                            specialization that kept some
    native/kiln_native-*.so kiln's native runtime library the kernels call
    kernels.mlir            the kernel IR, when the model may compile static
                            kernels for new shapes (policy "specialize")

and :func:`load` (``kiln.load``) builds the model back from them with the
runtime, numpy, torch and ctypes only: no torch-mlir, no MLIR, no C
compiler, no lowering.  The kernels' libraries are loaded with ``dlopen``
(:class:`~kiln.runtime.cpu_code.SharedObjectEngine`), the profiles'
kernel choices are those made (and timed) when the model was compiled.

Weights: the constants of the schedule (weights past kiln-partition's
``inline-limit``, which the runtime passes to the kernels; weights a
PyTorch fallback reads; values computed once at compile time) are tensors
of the safetensors file, used in place from its mapping.  Smaller constants
are copied into the kernels, so the compiled library holds them as data:
:func:`save` cuts those bytes out of each library into the same file and
records where they were; :func:`load` puts them back (byte for byte) into
the private copy it loads.

The manifest and the files are untrusted input: every file the manifest
names must lie inside the directory and match its recorded size and sha256
before it is used (a KilnError names the file otherwise); a CPU lacking a
feature the code was compiled for (``-march=native`` and LLVM's host CPU)
is a KilnError naming the missing features.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import platform
import re
import time
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from ..errors import KilnError

__all__ = ["FORMAT", "MANIFEST", "host_features", "is_artifact", "load", "read_manifest", "required_features", "save"]

FORMAT = "kiln-artifact/2"
#: The format :func:`kiln.compiler.load` still reads (kiln IR, compiled again on load).
LEGACY_FORMAT = "kiln-artifact/1"
MANIFEST = "kiln-artifact.json"
WEIGHTS = "weights.safetensors"
KERNEL_IR = "kernels.mlir"

#: Instruction-set flags of /proc/cpuinfo: the features compiled code may use (x86).
_ISA = re.compile(r"^(mmx|sse\w*|ssse3|avx\w*|fma\w*|f16c|bmi\d|abm|lzcnt|popcnt|movbe|aes|vaes|pclmulqdq|"
                  r"vpclmulqdq|gfni|sha_ni|adx|rdrand|rdseed|xsave\w*|amx\w*|cx8|cx16|fxsr|prfchw|3dnowprefetch|"
                  r"clflushopt|clwb|xop|tbm|sse4a|movdir\w*|serialize|waitpkg|vnni)$")

_ST_DTYPES = {"f16": "F16", "bf16": "BF16", "f32": "F32", "f64": "F64", "i1": "BOOL", "i8": "I8", "i16": "I16",
              "i32": "I32", "i64": "I64", "u8": "U8"}
_NP_OF_ST = {"F16": np.float16, "BF16": np.uint16, "F32": np.float32, "F64": np.float64, "BOOL": np.bool_,
             "I8": np.int8, "I16": np.int16, "I32": np.int32, "I64": np.int64, "U8": np.uint8}


# ----------------------------------------------------------------------------
# CPU features
# ----------------------------------------------------------------------------


def host_features() -> set[str] | None:
    """The feature flags of this CPU (``/proc/cpuinfo``), None where unknown."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return set(line.split(":", 1)[1].split())
    except OSError:  # pragma: no cover - not Linux
        pass
    return None


def required_features() -> list[str]:
    """The features code compiled on this host may use: its instruction-set
    flags (x86), or all of its flags elsewhere."""
    flags = host_features() or set()
    if platform.machine().lower() in ("x86_64", "amd64", "i686", "x86"):
        flags = {f for f in flags if _ISA.match(f)}
    return sorted(flags)


def _check_cpu(directory, manifest: dict) -> None:
    machine = manifest.get("machine")
    if machine and machine != platform.machine():
        raise KilnError(f"'{directory}' holds code for {machine} CPUs; this machine is {platform.machine()}")
    needed = manifest.get("cpu_features") or []
    have = host_features()
    if have is None or not isinstance(needed, list):
        return
    missing = sorted(str(f) for f in needed if f not in have)
    if missing:
        raise KilnError(f"this CPU lacks features the code in '{directory}' was compiled for (its host's "
                        f"-march=native): {', '.join(missing)}; compile the model on this machine, or on one "
                        "whose features this CPU has")


# ----------------------------------------------------------------------------
# safetensors: 8-byte header length, a JSON header, the tensors' bytes
# ----------------------------------------------------------------------------


def _write_safetensors(path: str, tensors: list[tuple[str, str, tuple, np.ndarray]], metadata: dict) -> None:
    """``tensors``: ``(name, kiln dtype or "u8", shape, flat uint8 bytes)``,
    written widest dtype first so every tensor is aligned to its element size."""
    order = sorted(tensors, key=lambda t: -np.dtype(_NP_OF_ST[_ST_DTYPES[t[1]]]).itemsize)
    header, at = {"__metadata__": {k: str(v) for k, v in metadata.items()}}, 0
    for name, dtype, shape, raw in order:
        header[name] = {"dtype": _ST_DTYPES[dtype], "shape": list(shape), "data_offsets": [at, at + raw.nbytes]}
        at += raw.nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-(8 + len(text)) % 64)  # the data starts on a 64-byte boundary
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little"))
        f.write(text)
        for _, _, _, raw in order:
            f.write(memoryview(np.ascontiguousarray(raw)).cast("B"))


def _read_safetensors(path: str, buf) -> dict[str, tuple[str, tuple, int, int]]:
    """The header of the safetensors bytes ``buf``: name -> ``(dtype, shape,
    start, end)`` with absolute offsets, each checked to lie in ``buf``."""
    try:
        n = int.from_bytes(buf[:8], "little")
        if not 2 <= n <= len(buf) - 8:
            raise ValueError(f"header length {n}")
        header = json.loads(bytes(buf[8:8 + n]))
        if not isinstance(header, dict):
            raise ValueError("header is not an object")
        out = {}
        for name, t in header.items():
            if name == "__metadata__":
                continue
            dtype, shape, (a, b) = t["dtype"], tuple(int(s) for s in t["shape"]), t["data_offsets"]
            itemsize = np.dtype(_NP_OF_ST[dtype]).itemsize
            if not (0 <= a <= b <= len(buf) - 8 - n and b - a == itemsize * int(np.prod(shape, dtype=np.int64))):
                raise ValueError(f"tensor '{name}' has offsets {a}..{b} for shape {list(shape)} {dtype}")
            out[name] = (dtype, shape, 8 + n + a, 8 + n + b)
        return out
    except (ValueError, KeyError, TypeError) as e:
        raise KilnError(f"'{path}' is not a valid safetensors file: {e}") from None


# ----------------------------------------------------------------------------
# The schedule and plan as plain data
# ----------------------------------------------------------------------------


class TensorSpec(NamedTuple):
    """Dims and dtype name of a tensor of a loaded schedule (what the
    compiler's ``TensorInfo`` is to the runtime)."""

    dims: tuple
    dtype: str

    def __str__(self) -> str:
        return "[" + ", ".join(str(d) for d in self.dims) + "]"


def _spec(dims, dtype) -> TensorSpec:
    from ..dialects.dims import dim

    return TensorSpec(tuple(dim(d) for d in dims), str(dtype))


@dataclass
class _Value:
    id: int
    kind: str
    info: TensorSpec
    step: int = -1
    index: int = 0


@dataclass
class _Step:
    name: str
    kind: str
    ops: list
    inputs: list
    outputs: list
    torch_ops: list = field(default_factory=list)
    split: str | None = None
    view_offset: str | None = None
    sites: list = field(default_factory=list)  # [op name, location, runtime] of each fallback op
    precision: str | None = None  # the float type its arithmetic ran in (report())


@dataclass
class _Schedule:
    """A schedule read from a manifest: the runtime's view of the compiler's
    :class:`~kiln.transforms.partition.Schedule` (no IR behind it)."""

    function: str
    values: list
    steps: list
    inputs: list
    outputs: list
    constants: dict = field(default_factory=dict)

    def detached(self) -> _Schedule:
        return _Schedule(self.function, list(self.values), list(self.steps), list(self.inputs), list(self.outputs))

    def kernel_counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for s in self.steps:
            out[s.kind] = out.get(s.kind, 0) + 1
        return out


def _dims_json(dims) -> list:
    from ..dialects.dims import dim

    return [dim(d).to_attr_value() for d in dims]


def _schedule_json(schedule) -> dict:
    return {
        "function": schedule.function,
        "values": [[v.id, v.kind, _dims_json(v.info.dims), str(v.info.dtype), v.step, v.index]
                   for v in schedule.values],
        "steps": [{"name": s.name, "kind": s.kind, "ops": list(s.ops), "inputs": list(s.inputs),
                   "outputs": list(s.outputs), "torch_ops": list(s.torch_ops), "split": s.split,
                   "view_offset": s.view_offset, "sites": [list(x) for x in getattr(s, "sites", [])],
                   "precision": getattr(s, "precision", None)}
                  for s in schedule.steps],
        "inputs": list(schedule.inputs),
        "outputs": list(schedule.outputs),
    }


def _sites(data) -> list:
    """A step's fallback sites from a manifest: [op, location, runtime] strings
    (an entry of another shape is dropped: they are only reported)."""
    if not isinstance(data, list):
        return []
    return [[str(x) for x in site] for site in data
            if isinstance(site, list) and len(site) == 3 and all(isinstance(x, str) for x in site)]


def _schedule_from(data: dict) -> _Schedule:
    values = [_Value(int(i), str(k), _spec(d, t), int(st), int(ix)) for i, k, d, t, st, ix in data["values"]]
    if [v.id for v in values] != list(range(len(values))):
        raise ValueError("value ids are not 0..n-1")
    steps = [_Step(str(s["name"]), str(s["kind"]), list(s["ops"]), [int(v) for v in s["inputs"]],
                   [int(v) for v in s["outputs"]], list(s.get("torch_ops") or []), s.get("split"),
                   s.get("view_offset"), _sites(s.get("sites")),
                   s["precision"] if isinstance(s.get("precision"), str) else None) for s in data["steps"]]
    for s in steps:
        if any(not 0 <= v < len(values) for v in s.inputs + s.outputs):
            raise ValueError(f"step '{s.name}' names a value outside 0..{len(values) - 1}")
    return _Schedule(str(data["function"]), values, steps, [int(v) for v in data["inputs"]],
                     [int(v) for v in data["outputs"]])


def _plan_json(plan) -> dict:
    return {"buffers": {str(v): {"offset": b["offset"], "size": b["size"], "live": list(b["live"])}
                        for v, b in plan.buffers.items()},
            "arena_size": plan.arena_size, "no_reuse_size": plan.no_reuse_size,
            "outputs": {str(v): s for v, s in plan.outputs.items()},
            "aliases": {str(v): a for v, a in plan.aliases.items()},
            "inplace": {str(v): a for v, a in plan.inplace.items()},
            "donated": {str(v): a for v, a in plan.donated.items()}}


def _plan_from(data: dict):
    from .memplan import MemoryPlan

    return MemoryPlan(
        buffers={int(v): {"offset": str(b["offset"]), "size": str(b["size"]), "live": tuple(int(x) for x in b["live"])}
                 for v, b in data["buffers"].items()},
        arena_size=str(data["arena_size"]), no_reuse_size=str(data["no_reuse_size"]),
        outputs={int(v): str(s) for v, s in data["outputs"].items()},
        aliases={int(v): int(a) for v, a in data["aliases"].items()},
        # Absent from artifacts written before donation existed.
        inplace={int(v): int(a) for v, a in data.get("inplace", {}).items()},
        donated={int(v): int(a) for v, a in data.get("donated", {}).items()},
    )


# ----------------------------------------------------------------------------
# Files: inside the directory, checked against the manifest
# ----------------------------------------------------------------------------


def artifact_file(directory, name, what: str = "file") -> str:
    """The path of the artifact's file ``name``, which must be a regular file
    inside ``directory`` (the manifest is untrusted input: a name such as
    ``../../etc/passwd`` or a link out of the directory is refused)."""
    if not isinstance(name, str) or not name:
        raise KilnError(f"'{directory}': {MANIFEST} names no {what} (its entry is {name!r})")
    root = os.path.realpath(directory)
    path = os.path.realpath(os.path.join(root, name))
    if os.path.commonpath([root, path]) != root:
        raise KilnError(f"'{directory}': {MANIFEST} names '{name}', which lies outside the artifact directory")
    if not os.path.isfile(path):
        raise KilnError(f"'{directory}': the artifact's {what} '{name}' is missing")
    return path


def _check(directory, manifest: dict, name: str, data, what: str) -> None:
    """``data`` (the bytes read from the file ``name``) against the manifest's size and sha256."""
    entry = manifest["files"].get(name)
    if not isinstance(entry, dict):
        raise KilnError(f"'{directory}': {MANIFEST} has no digest for the {what} '{name}'")
    size = memoryview(data).nbytes
    if size != entry.get("size") or hashlib.sha256(data).hexdigest() != entry.get("sha256"):
        raise KilnError(f"'{directory}': the {what} '{name}' does not match its digest in {MANIFEST} "
                        f"({size} bytes; damaged or tampered with): refusing to load it")


def _read_checked(directory, manifest: dict, name, what: str) -> bytes:
    path = artifact_file(directory, name, what)
    with open(path, "rb") as f:
        data = f.read()
    _check(directory, manifest, name, data, what)
    return data


def read_manifest(directory) -> dict:
    """The manifest of an artifact directory (KilnError if there is none, or it is not a JSON object)."""
    try:
        with open(os.path.join(directory, MANIFEST), encoding="utf-8") as f:
            manifest = json.load(f)
    except (OSError, ValueError, RecursionError) as e:
        raise KilnError(f"'{directory}' is not a kiln artifact: {e}") from None
    if not isinstance(manifest, dict):
        raise KilnError(f"'{directory}' is not a kiln artifact: its {MANIFEST} holds a {type(manifest).__name__}, "
                        "not an object")
    return manifest


def is_artifact(path) -> bool:
    """True when ``path`` is a directory written by :func:`save`."""
    return os.path.isdir(path) and os.path.exists(os.path.join(path, MANIFEST))



# ----------------------------------------------------------------------------
# save / load
# ----------------------------------------------------------------------------


def save(model, directory) -> dict:
    """Write ``model`` as an artifact directory (see the module docstring and
    :func:`kiln.runtime.artifact_save.save`); returns the manifest."""
    from .artifact_save import save as _save

    return _save(model, directory)


def load(directory, *, policy: str | None = None, profiling: bool | None = None, arena_pool_bytes=None):
    """The :class:`~kiln.runtime.CompiledModel` saved in ``directory``, built
    without the compiler (see the module docstring).

    ``policy`` replaces the saved policy outside the profiles (``"generic"``
    runs a model saved with ``"specialize"`` where the compiler is missing),
    ``profiling`` and ``arena_pool_bytes`` the saved settings.  Raises
    KilnError for a directory that is not an artifact of this format, a
    file that fails its digest or lies outside the directory, a CPU without
    the features the code needs, and a numpy whose OpenBLAS is not the one
    the kernels were linked with.  A directory of the previous format
    (``kiln-artifact/1``: kiln IR) is compiled again, where the compiler is
    installed."""
    start = time.perf_counter()
    directory = os.fspath(directory)
    manifest = read_manifest(directory)
    fmt = manifest.get("format")
    if fmt == LEGACY_FORMAT:  # kiln IR: compiled again, where the compiler is installed
        try:
            from ..compiler import compile as compile_source
        except ImportError as e:
            raise KilnError(f"'{directory}' is a {LEGACY_FORMAT} artifact (kiln IR, compiled again when loaded) and "
                            f"the kiln compiler is not importable here ({e}): kiln.save the model again for an "
                            "artifact that loads without it") from None
        options = {k: v for k, v in (("policy", policy), ("profiling", profiling),
                                     ("arena_pool_bytes", arena_pool_bytes)) if v is not None}
        return compile_source(artifact_file(directory, manifest.get("ir"), "IR file"), **options)
    if fmt != FORMAT:
        raise KilnError(f"'{directory}' has an unknown artifact format {fmt!r} (this kiln reads {FORMAT})")
    if manifest.get("device") != "cpu":
        raise KilnError(f"'{directory}' is an artifact for device {manifest.get('device')!r}; kiln.load runs 'cpu' ones")
    if not isinstance(manifest.get("files"), dict):
        raise KilnError(f"'{directory}': {MANIFEST} has no table of file digests")
    _check_cpu(directory, manifest)
    try:
        return _build(directory, manifest, start, policy, profiling, arena_pool_bytes)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
        raise KilnError(f"'{directory}': malformed {MANIFEST}: {type(e).__name__}: {e}") from None


_KILN_OF_ST = {v: k for k, v in _ST_DTYPES.items()}


def _build(directory, manifest: dict, start: float, policy, profiling, arena_pool_bytes):
    import torch

    from . import native
    from .blas import blas_library, register_sgemm
    from .contract import InputSpec, check_from_data
    from .cpu_code import CpuKernel
    from .executor import ModelRuntime, Prepared
    from .model import CompiledModel, Step, ValueInfo
    from .ort_fallback import fallback_from_json
    from .symbols import SymbolInfo

    # The weights, mapped copy-on-write: tensors are views of the file, private to this process.
    wname = manifest["weights"]
    wpath = artifact_file(directory, wname, "weights file")
    with open(wpath, "rb") as f:
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
    _check(directory, manifest, wname, mm, "weights file")
    header = _read_safetensors(wpath, mm)

    def tensor(name: str) -> np.ndarray:
        if name not in header:
            raise KilnError(f"'{directory}': {MANIFEST} names the tensor '{name}', which {wname} lacks")
        dtype, shape, a, b = header[name]
        dt = np.dtype(_NP_OF_ST[dtype])
        return np.frombuffer(mm, dtype=dt, count=(b - a) // dt.itemsize, offset=a).reshape(shape)

    lib = None
    if manifest.get("native"):
        data = _read_checked(directory, manifest, manifest["native"], "native library")
        lib = native.adopt(data, artifact_file(directory, manifest["native"], "native library"))
    blas, local = manifest.get("blas"), blas_library()
    if blas and (local is None or os.path.basename(local) != blas):
        raise KilnError(f"the kernels in '{directory}' call numpy's OpenBLAS {blas}, and this environment's numpy "
                        f"has {os.path.basename(local) if local else 'none'}: install the numpy the model was "
                        "compiled with, or compile it here")
    if local is not None and (blas or lib is not None):
        register_sgemm(lib, local)

    engines: dict = {}

    def engine(label: str):
        if label not in engines:
            engines[label] = _load_library(directory, manifest, label, tensor, header)
        return engines[label]

    sched = _schedule_from(manifest["schedule"])
    plan = _plan_from(manifest["plan"])
    constants = {}
    for vid, name in manifest["constants"].items():
        t = torch.from_numpy(tensor(name))
        constants[int(vid)] = t.view(torch.bfloat16) if sched.values[int(vid)].info.dtype == "bf16" else t
    generated = {int(i): str(n) for i, n in manifest["generated"].items()}
    fallback = {int(i): fallback_from_json(d, _spec) for i, d in manifest["fallback"].items()}
    if sorted([*generated, *fallback]) != list(range(len(sched.steps))):
        raise KilnError(f"'{directory}': {MANIFEST} does not give every step of the schedule one kernel")
    prepared = Prepared(sched, plan, fallback, generated, constants, None)
    generic = engine("generic") if generated else None
    kernels = prepared.kernels(lambda name, ins, outs: CpuKernel(name, ins, outs, generic))

    restored = {}
    for v in manifest["variants"]:
        chosen = None
        if v.get("library") is not None:
            static = engine(v["library"])
            picks = {n for n, c in v["choices"].items() if c.get("chosen") == "static"}
            chosen = [CpuKernel(k.name, k.inputs, k.outputs, static, static=True)
                      if isinstance(k, CpuKernel) and k.name in picks else k for k in kernels]
        restored[str(v["name"])] = ({str(n): int(x) for n, x in v["at"].items()}, dict(v["choices"]), chosen)

    symbols = {str(n): SymbolInfo(str(n), int(s["min"]), int(s["max"]), s.get("opt"), s.get("multiple_of"))
               for n, s in manifest["symbols"].items()}
    profiles = [{"name": p["name"], **{n: (r["min"], r["opt"], r["max"]) for n, r in p["ranges"].items()}}
                for p in manifest["profiles"]]
    specialize = _specializer(directory, manifest, prepared) if manifest.get("kernel_ir") else None
    runtime = ModelRuntime(
        prepared, kernels, symbols, profiles=profiles or None, policy=policy or manifest["policy"],
        budget=manifest["budget"], profiling=bool(manifest["profiling"] if profiling is None else profiling),
        specialize=specialize, static_kernels=manifest["static_kernels"], restored=restored,
        arena_pool_bytes=manifest["arena_pool_bytes"] if arena_pool_bytes is None else arena_pool_bytes,
    )
    runtime.restored_info = {str(v["name"]): {k: v[k] for k in ("name", "kind", "ranges")}
                             for v in manifest["variants"]}
    inputs = [InputSpec.make(i["name"], i["dims"], i["dtype"]) for i in manifest["inputs"]]
    checks = [check_from_data(c) for c in manifest.get("checks", [])]
    names = list(manifest["value_names"])
    if len(names) != len(sched.values) or len(inputs) != len(sched.inputs):
        raise KilnError(f"'{directory}': {MANIFEST}'s inputs and values do not match its schedule")
    values = [ValueInfo(str(names[v.id]), tuple(v.info.dims), v.info.dtype) for v in sched.values]
    model = CompiledModel(
        inputs=inputs, values=values, output_ids=list(sched.outputs), symbols=symbols, base_compilations=0,
        schedule=[Step(k, list(s.inputs), list(s.outputs)) for k, s in zip(kernels, sched.steps)],
        keepalive=[mm, *engines.values()], runtime=runtime, checks=checks,
        # (artifacts written before outputs had names recorded their value names, "%7")
        output_names=[o["name"] if isinstance(o, dict) and isinstance(o.get("name"), str)
                      and not o["name"].startswith("%") else f"output{j}"
                      for j, o in enumerate(manifest.get("outputs") or [])],
    )
    for eng in engines.values():  # weights the native GEMM packs are freed with the model
        native.release_on_collect(model, eng)
    seconds = time.perf_counter() - start
    runtime.compile_time_s = seconds
    runtime.kernel_cache = "artifact"  # (the report's kernel_cache: where the object code came from)
    runtime.artifact = {"path": os.path.abspath(directory), "format": FORMAT, "load_s": seconds,
                        "compile_s": manifest.get("compile_seconds"), "libraries": len(engines),
                        "weights_bytes": len(mm), "compilations": 0}
    return model


def _load_library(directory, manifest: dict, label: str, tensor, header: dict):
    """The kernel library ``label``: its file with the weights put back where
    :func:`save` cut them out, loaded from a private copy."""
    from .cpu_code import SharedObjectEngine

    spec = manifest["libraries"][label]
    rest = _read_checked(directory, manifest, spec["file"], "kernel library")
    pieces, weights, pos, orig = [], [], 0, 0
    for at, n, name in spec["weights"]:
        raw = tensor(name).reshape(-1).view(np.uint8)
        at, n = int(at), int(n)
        if at < orig or raw.nbytes != n or pos + at - orig > len(rest):
            raise KilnError(f"'{directory}': {MANIFEST} places the weight '{name}' wrongly in {spec['file']}")
        pieces += [rest[pos:pos + at - orig], raw]
        pos, orig = pos + at - orig, at + n
        dtype, shape = header[name][:2]
        weights.append((name.split("/", 1)[-1], _KILN_OF_ST[dtype], shape, raw))
    pieces.append(rest[pos:])
    if sum(memoryview(p).nbytes for p in pieces) != spec["size"]:
        raise KilnError(f"'{directory}': {spec['file']} and its weights do not add up to {spec['size']} bytes")
    import tempfile

    fd, tmp = tempfile.mkstemp(suffix=".so", prefix="kiln-kernels-")
    try:
        with os.fdopen(fd, "wb") as f:
            for p in pieces:
                f.write(p)
        eng = SharedObjectEngine(tmp)
    except OSError as e:
        raise KilnError(f"'{directory}': the kernel library {spec['file']} does not load here: {e}") from None
    finally:
        os.unlink(tmp)
    for name in spec["kernels"]:
        if not eng.raw_lookup("_mlir_ciface_" + str(name)):
            raise KilnError(f"'{directory}': the kernel library {spec['file']} has no kernel '{name}'")
    # What kiln.save needs to write this model again (kiln.backends.cpu.export.engine_object).
    eng.kiln_object = lambda: b"".join(bytes(p) for p in pieces)
    eng.kiln_weights = weights
    eng.cache = "artifact"
    return eng


def _specializer(directory, manifest: dict, prepared):
    """``binding -> kernels`` compiling static kernels from the artifact's
    kernel IR, where the compiler is installed; a KilnError saying so where
    it is not."""
    spec = manifest["kernel_ir"]
    name, vectorize = spec["file"], int(spec.get("vectorize", 1))
    artifact_file(directory, name, "kernel IR")  # there now; its digest is checked when it is read

    def read_text() -> str:
        return _read_checked(directory, manifest, name, "kernel IR").decode()

    def specialize(binding):
        try:
            from ..compiler import _static_kernels
        except ImportError as e:
            where = ", ".join(f"{k}={v}" for k, v in sorted(binding.items()))
            raise KilnError(f"this artifact was loaded without the kiln compiler ({e}); compiling static kernels "
                            f"for {where} (policy 'specialize') needs it: install torch-mlir, or load the model "
                            "with policy='generic'") from None
        return _static_kernels(read_text(), prepared, vectorize)(binding)

    specialize.read_text, specialize.vectorize = read_text, vectorize
    return specialize
