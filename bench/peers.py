"""The engines a benchmark run compares: kiln, PyTorch eager, torch.compile, ONNX Runtime, OpenVINO.

Each peer is set up once per workload (:meth:`Peer.setup`, which times its
compilation) and then gives a zero-argument callable per row that runs one
inference on that row's inputs (:meth:`Peer.runner`).  Every peer uses the
same two intra-op threads: ``torch.set_num_threads(threads)`` for PyTorch,
``intra_op_num_threads`` for ONNX Runtime; kiln's library GEMM runs on
OpenBLAS, whose thread count follows ``OPENBLAS_NUM_THREADS`` (the harness
sets it before numpy loads).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import time

import numpy as np

from .workloads import Row, Workload, resnet50_path

__all__ = ["DEFAULT_PEERS", "PEERS", "REAL_PEERS", "EagerPeer", "KilnBf16Peer", "KilnPeer", "OrtPeer", "Peer", "PeerUnavailable",
           "TorchCompilePeer", "onnx_file"]


class PeerUnavailable(Exception):
    """The peer cannot run this workload (reported in the row, not raised)."""


class Peer:
    """Base class: ``setup(workload)`` then ``runner(row)`` per row."""

    name = ""

    def setup(self, workload: Workload) -> dict:
        """Prepare the workload; returns ``{"compile_cold_s": ..., "compile_warm_s": ...}`` (None if n/a)."""
        raise NotImplementedError

    def runner(self, row: Row, inputs: list[np.ndarray]):
        """A callable running one inference on ``inputs``; it returns the first output as numpy."""
        raise NotImplementedError

    def row_info(self, row: Row) -> dict:
        """Per-row facts after the timing (kernel launches, arena bytes)."""
        return {}


def _torch_threads(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)


class EagerPeer(Peer):
    """PyTorch eager under ``torch.inference_mode()``."""

    name = "eager"

    def __init__(self, threads: int = 2):
        self.threads = threads

    def setup(self, workload):
        if workload.factory is None:
            raise PeerUnavailable("no PyTorch model (ONNX-only workload)")
        _torch_threads(self.threads)
        self.module = workload.torch_model()[0]
        return {"compile_cold_s": None, "compile_warm_s": None}

    def runner(self, row, inputs):
        import torch

        xs = [torch.from_numpy(x) for x in inputs]
        module = self.module

        def call():
            with torch.inference_mode():
                return module(*xs)

        return call


class TorchCompilePeer(EagerPeer):
    """``torch.compile`` (inductor, default mode); compile time is the first call per row."""

    name = "torch.compile"

    def setup(self, workload):
        import torch

        info = super().setup(workload)
        torch._dynamo.reset()
        self.first_call_s = {}
        self.compiled = None
        if getattr(workload, "cold_warm", False):
            info.update(self._cold_warm(workload))  # sets self.compiled: the warm one, compiled already
        if self.compiled is None:
            self.compiled = torch.compile(self.module)
        return info

    def _cold_warm(self, workload) -> dict:
        """Compile and first call at the export example, into an empty inductor
        cache (cold), then again after ``torch._dynamo.reset()`` with that cache
        filled (warm); the warm one then serves the rows (a row of another
        shape recompiles, as for a user: its first call is reported)."""
        import torch

        from .model_bench import scratch_dir

        args = workload.torch_model()[1]
        times = []
        with scratch_dir("TORCHINDUCTOR_CACHE_DIR", "kiln-bench-inductor-"):
            for _ in range(2):
                torch._dynamo.reset()
                t0 = time.perf_counter()
                self.compiled = torch.compile(self.module)
                with torch.inference_mode():
                    self.compiled(*args)
                times.append(time.perf_counter() - t0)
        return {"compile_cold_s": times[0], "compile_warm_s": times[1], "cold_with_export_s": times[0]}

    def runner(self, row, inputs):
        import torch

        xs = [torch.from_numpy(x) for x in inputs]
        compiled = self.compiled

        def call():
            with torch.inference_mode():
                return compiled(*xs)

        t0 = time.perf_counter()
        call()  # compiles (or recompiles for a new shape)
        self.first_call_s[row.label] = time.perf_counter() - t0
        return call

    def row_info(self, row):
        return {"first_call_s": self.first_call_s.get(row.label)}


_ONNX_FILES: dict[str, str] = {}
#: workload name -> (exporter that made its file, seconds that export took).
ONNX_EXPORTS: dict[str, tuple[str, float]] = {}


def onnx_file(workload: Workload) -> str:
    """The ONNX file of ``workload``: the shipped one, or the torch model exported
    (``torch.onnx.export``: TorchScript exporter, opset 17, dynamic axes).
    With ``workload.onnx_dynamo_fallback``, a model the TorchScript exporter
    cannot export goes through the torch.export-based one (opset 18, the
    workload's dynamic shapes): transformers 5's mask code uses aten::diff and
    torchvision ViT's eval fast path aten::_native_multi_head_attention, which
    it lacks, while it is the faster of the two (1 vs 32 s on a small BERT),
    so it is tried first.  :data:`ONNX_EXPORTS` says which one made the file,
    and how long that export took."""
    if workload.onnx_path is not None:
        return resnet50_path() if workload.onnx_path == "<onnx>" else workload.onnx_path
    if workload.name in _ONNX_FILES:
        return _ONNX_FILES[workload.name]
    import torch

    module, args, dynamic = workload.torch_model()
    path = os.path.join(tempfile.mkdtemp(prefix="kiln-bench-"), f"{workload.name}.onnx")
    names = list(workload.input_names)
    with torch.no_grad():
        t0 = time.perf_counter()
        try:
            torch.onnx.export(module, args, path, input_names=names, output_names=["y"],
                              dynamic_axes=workload.dynamic_axes, opset_version=17, dynamo=False)
            exporter = "torchscript"
        except Exception:
            if not getattr(workload, "onnx_dynamo_fallback", False):
                raise
            t0 = time.perf_counter()
            torch.onnx.export(module, args, path, input_names=names, output_names=["y"],
                              dynamic_shapes=dynamic, opset_version=18, dynamo=True, verbose=False)
            exporter = "dynamo"
        ONNX_EXPORTS[workload.name] = (exporter, time.perf_counter() - t0)
    _ONNX_FILES[workload.name] = path
    return path


class OrtPeer(Peer):
    """ONNX Runtime CPU: all graph optimizations, ``threads`` intra-op threads, sequential execution."""

    name = "onnxruntime"

    def __init__(self, threads: int = 2):
        self.threads = threads

    def _session(self, path):
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.intra_op_num_threads = self.threads
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])

    def setup(self, workload):
        t0 = time.perf_counter()
        path = onnx_file(workload)
        exporter, export_s = ONNX_EXPORTS.get(workload.name, (None, time.perf_counter() - t0))
        t0 = time.perf_counter()
        self.session = self._session(path)
        cold = time.perf_counter() - t0
        t0 = time.perf_counter()
        self._session(path)
        warm = time.perf_counter() - t0
        self.input_names = [i.name for i in self.session.get_inputs()]
        info = {"compile_cold_s": cold, "compile_warm_s": warm, "onnx_export_s": export_s,
                "cold_with_export_s": export_s + cold}
        if exporter is not None:
            info["onnx_exporter"] = exporter
        return info

    def runner(self, row, inputs):
        feed = dict(zip(self.input_names, inputs))
        run = self.session.run

        def call():
            return run(None, feed)[0]

        return call


_setup_s: float | None = None


def _process_setup() -> float:
    """Seconds this call spent on kiln's once-per-process setup (0 after the first)."""
    global _setup_s
    if _setup_s is not None:
        return 0.0
    import torch

    import kiln
    from kiln.runtime import native

    t0 = time.perf_counter()
    native.load()
    batch = torch.export.Dim("B", min=1, max=4)  # the first torch.export and import into MLIR
    kiln.compile(torch.nn.Linear(4, 4), (torch.ones(2, 4),), dynamic_shapes={"input": {0: batch}})
    _setup_s = time.perf_counter() - t0
    return _setup_s


class KilnPeer(Peer):
    """kiln: ``kiln.compile`` once per workload (dynamic dims serve every row).

    Cold compile runs with an empty kernel cache directory; warm compile is a
    second compilation of the same model in the same process, same cache.
    What a process pays once is paid before the first cold compile is timed
    and reported apart as ``process_setup_s``: building the native runtime
    library (once per machine and cache directory, 16-20 s on a two-core
    host) and a first compile of a tiny torch model (torch.export, torch-mlir
    and LLVM set up, about 2 s), which had all counted in the first
    workload's cold compile.
    """

    name = "kiln"

    def __init__(self, threads: int = 2, options: dict | None = None):
        self.threads = threads
        self.options = dict(options or {})
        self.stages: list[dict] = []  # each compile's seconds per stage (report()["compile_stages_s"])

    def _compile(self, workload):
        import kiln

        if workload.factory is not None:
            module, args, dynamic = workload.torch_model()
            model = kiln.compile(module, args, dynamic_shapes=dynamic, **self.options)
        else:
            model = kiln.compile(onnx_file(workload), **self.options)
        self.stages.append(dict(model.report().get("compile_stages_s") or {}))
        return model

    def setup(self, workload):
        if "KILN_CACHE_DIR" not in os.environ:  # an empty cache for the cold compile, removed at exit
            cache = tempfile.mkdtemp(prefix="kiln-bench-cache-")
            os.environ["KILN_CACHE_DIR"] = cache
            atexit.register(shutil.rmtree, cache, ignore_errors=True)
        _torch_threads(self.threads)
        build = _process_setup()
        if getattr(workload, "cold_warm", False):
            # Its own empty kernel cache (export included in the compile): kernels
            # that an earlier workload compiled must not make this one look warm.
            from .model_bench import compile_cold_warm

            self.model, cold, warm = compile_cold_warm(lambda: self._compile(workload))
        else:
            t0 = time.perf_counter()
            self.model = self._compile(workload)
            cold = time.perf_counter() - t0
            t0 = time.perf_counter()
            self._compile(workload)
            warm = time.perf_counter() - t0
        cold_stages, warm_stages = self.stages[-2:] if len(self.stages) >= 2 else ({}, {})
        return {"compile_cold_s": cold, "compile_warm_s": warm, "process_setup_s": build,
                "cold_with_export_s": cold, "kernels": len(self.model.schedule),
                "compile_stages_cold_s": cold_stages, "compile_stages_warm_s": warm_stages}

    def runner(self, row, inputs):
        model = self.model

        def call():
            return model(*inputs)

        return call

    def row_info(self, row):
        rep = self.model.report()
        arena = rep.get("arena", {})
        return {
            "kernel_launches_per_call": rep.get("kernels_launched_per_call"),
            "arena_peak_bytes": arena.get("planned_peak_bytes"),
            "arena_no_reuse_bytes": arena.get("no_reuse_bytes"),
            "fallback_ops": rep.get("fallback", {}).get("ops"),
        }


class KilnBf16Peer(KilnPeer):
    """kiln with ``precision="bf16"`` (issue 38): bf16 weights and activations, f32 accumulation.
    Not like for like with the fp32 peers: compared with kiln's own fp32 and OpenVINO's bf16."""

    name = "kiln-bf16"

    def __init__(self, threads: int = 2, options: dict | None = None):
        super().__init__(threads, {**(options or {}), "precision": "bf16"})


from .openvino_peer import OpenVinoBf16Peer, OpenVinoPeer  # noqa: E402 (it subclasses Peer)

PEERS = {"kiln": KilnPeer, "kiln-bf16": KilnBf16Peer, "eager": EagerPeer, "torch.compile": TorchCompilePeer, "onnxruntime": OrtPeer,
         "openvino": OpenVinoPeer, "openvino-bf16": OpenVinoBf16Peer}
#: The peers of a run that names none: the classic suite's (as before), and the real workloads'.
DEFAULT_PEERS = ["kiln", "eager", "torch.compile", "onnxruntime"]
REAL_PEERS = ["kiln", "eager", "torch.compile", "onnxruntime", "openvino", "openvino-bf16"]
