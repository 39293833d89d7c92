"""ONNX Runtime kernels for the ``kiln.fallback`` ops of ONNX models.

An ONNX node kiln has no pattern for (or whose pattern declines) and that
has no PyTorch twin is imported as a ``kiln.fallback`` op whose payload is a
serialized *one-node* ONNX model: the original ``NodeProto`` with its
attributes, the model's opsets, the node's input and output types (kiln's
dims, symbolic ones as ``dim_param`` text), and its import-time constant
inputs as initializers (see
:mod:`kiln.conversions.torch_to_kiln.onnx_fallback`).  The op's attributes
hold that payload under :data:`MODEL_ATTR` (base64) and how to feed it under
:data:`IO_ATTR` (JSON): per graph input of the one-node model, the kiln
operand it takes or a list of dims (a shape tensor with symbolic values,
evaluated under each call's binding), and the ONNX names of the op's results.

:class:`OrtFallbackKernel` runs that model with ONNX Runtime behind kiln's
kernel contract (``kernel(inputs, outputs, binding)`` writing into
preallocated outputs): the runtime hands it arena views like every other
kernel and counts its time as fallback time.  One
``onnxruntime.InferenceSession`` per kernel is created on the first call
(under a lock; ``InferenceSession.run`` itself is thread-safe), with one
intra-op and one inter-op thread: kiln's own pool runs the generated kernels
and the calling thread runs the fallback, so ONNX Runtime must not start a
pool of its own next to them.  Inputs are checked against the kernel's
dtypes, results against the output dtypes and the shapes kiln's types give
at the call's binding; a difference is a KilnError naming the op and node.

ONNX Runtime is needed only by models with such ops: it is the
``onnxruntime`` extra (``pip install 'kiln[onnxruntime]'``), and building a
kernel without it installed is a KilnError saying so.  This module does not
import MLIR, the frontends or the compiler: a loaded artifact runs its ONNX
fallbacks from :meth:`OrtFallbackKernel.to_json`'s data alone.
"""

from __future__ import annotations

import base64
import binascii
import json
import threading
from collections.abc import Mapping, Sequence

import numpy as np

from ..errors import KilnError, UnsupportedError
from .contract import compile_expr
from .dtypes import NUMPY_DTYPES

__all__ = ["EXTRA", "IO_ATTR", "MODEL_ATTR", "OrtFallbackKernel", "fallback_from_json", "import_onnxruntime",
           "is_fallback_kernel"]

#: The ``kiln.fallback`` attribute holding the one-node model (base64 of its bytes).
MODEL_ATTR = "onnx_model"
#: The ``kiln.fallback`` attribute holding the feeds and result names (JSON text).
IO_ATTR = "onnx_io"
#: The pip extra that installs ONNX Runtime for kiln.
EXTRA = "kiln[onnxruntime]"


def import_onnxruntime(what: str = "this model"):
    """The ``onnxruntime`` module; a KilnError naming the extra when it is missing."""
    try:
        import onnxruntime
    except ImportError as e:
        raise KilnError(
            f"{what} runs ONNX op(s) kiln does not compile through ONNX Runtime, which is not installed "
            f"(pip install '{EXTRA}'; {type(e).__name__}: {e})"
        ) from None
    return onnxruntime


class _Feed:
    """One graph input of the one-node model: kiln operand ``operand``, or a
    tensor of ``dims`` (symbolic values) of ``shape`` and kiln ``dtype``."""

    __slots__ = ("name", "operand", "dims", "shape", "dtype", "_fns")

    def __init__(self, name: str, operand: int | None = None, dims=None, shape=(), dtype: str = "i64"):
        self.name = str(name)
        self.operand = None if operand is None else int(operand)
        self.dims = None if dims is None else [str(d) for d in dims]
        self.shape = tuple(int(s) for s in shape)
        self.dtype = str(dtype)
        if (self.operand is None) == (self.dims is None):
            raise ValueError(f"feed {self.name!r} needs an operand or dims")
        if self.dims is not None:
            if int(np.prod(self.shape)) != len(self.dims):
                raise ValueError(f"feed {self.name!r}: {len(self.dims)} values for shape {list(self.shape)}")
            if self.dtype not in NUMPY_DTYPES:
                raise ValueError(f"feed {self.name!r}: dtype {self.dtype!r}")
        self._fns = [compile_expr(d)[0] for d in self.dims] if self.dims is not None else None

    def value(self, binding) -> np.ndarray:
        return np.asarray([f(binding) for f in self._fns], dtype=NUMPY_DTYPES[self.dtype]).reshape(self.shape)

    def to_json(self) -> dict:
        if self.operand is not None:
            return {"name": self.name, "operand": self.operand}
        return {"name": self.name, "dims": list(self.dims), "shape": list(self.shape), "dtype": self.dtype}

    @classmethod
    def from_json(cls, d: Mapping) -> _Feed:
        if "operand" in d:
            return cls(d["name"], operand=d["operand"])
        return cls(d["name"], dims=list(d["dims"]), shape=list(d["shape"]), dtype=d.get("dtype", "i64"))


def _numpy(x, what: str) -> np.ndarray:
    """A numpy view of a CPU torch tensor or numpy array (no copy when contiguous)."""
    if isinstance(x, np.ndarray):
        return x
    numpy = getattr(x, "numpy", None)
    if numpy is None:
        raise KilnError(f"{what}: ONNX Runtime fallbacks take numpy arrays or CPU torch tensors, "
                        f"got {type(x).__name__}")
    try:
        return numpy()
    except (TypeError, RuntimeError) as e:  # bf16 (numpy has none), a tensor off the CPU
        raise KilnError(f"{what}: cannot hand a {getattr(x, 'dtype', '?')} tensor to ONNX Runtime ({e})") from None


def _as_shape(a: np.ndarray, dims, binding) -> np.ndarray:
    """``a`` viewed with the shape kiln's ``dims`` give at ``binding`` when it
    holds that many elements in another shape (a rank-0 value as ``[1]``)."""
    if len(dims) == a.ndim:
        return a
    shape = tuple(f(binding) for f in dims)
    return a.reshape(shape) if a.size == int(np.prod(shape)) else a


def _dtype_name(arr: np.ndarray) -> str:
    for name, t in NUMPY_DTYPES.items():
        if arr.dtype == t:
            return name
    return str(arr.dtype)


class OrtFallbackKernel:
    """One ONNX node run by ONNX Runtime (see the module docstring).

    ``inputs`` / ``outputs`` are the step's tensor infos (kiln dims and dtype
    names); ``model`` the one-node model's bytes; ``feeds`` its graph
    inputs in order (:class:`_Feed` data: ``{"name", "operand"}`` or
    ``{"name", "dims", "shape", "dtype"}``); ``result_names`` the ONNX
    output name of each result of the op; ``results`` which of those each
    output receives (default all, in order); ``location`` the source node,
    for messages.
    """

    kind = "fallback"
    runtime = "onnxruntime"

    def __init__(self, name: str, op_name: str, inputs: Sequence, outputs: Sequence, model: bytes,
                 feeds: Sequence, result_names: Sequence[str], results: Sequence[int] | None = None,
                 location: str = ""):
        self.name = name
        self.op_name = op_name
        self.inputs = list(inputs)
        self.outputs = list(outputs)
        self.model = bytes(model)
        self.feeds = [f if isinstance(f, _Feed) else _Feed.from_json(f) for f in feeds]
        self.result_names = [str(n) for n in result_names]
        self.results = [int(r) for r in results] if results is not None else list(range(len(self.outputs)))
        self.num_results = len(self.result_names)
        self.location = location
        where = f"fallback kernel '{name}' ({op_name}{' at ' + location if location else ''})"
        if len(self.results) != len(self.outputs) or any(not 0 <= r < self.num_results for r in self.results):
            raise KilnError(f"{where}: results {self.results} do not fit {len(self.outputs)} outputs of an op "
                            f"with {self.num_results} results")
        if any(not self.result_names[r] for r in self.results):
            raise KilnError(f"{where}: an output receives a result the ONNX node omits")
        for f in self.feeds:
            if f.operand is not None and not 0 <= f.operand < len(self.inputs):
                raise KilnError(f"{where}: feed '{f.name}' takes operand #{f.operand} of {len(self.inputs)}")
        for info in [*self.inputs, *self.outputs]:
            if str(info.dtype) not in NUMPY_DTYPES:
                raise UnsupportedError(f"{where}: dtype {info.dtype} cannot pass through ONNX Runtime's Python API")
        self._where = where
        self._wanted = [self.result_names[r] for r in self.results]
        self._np_in = [NUMPY_DTYPES[str(i.dtype)] for i in self.inputs]
        # The shapes kiln's types give, per input and output, at a binding: the
        # runtime may hand a rank-0 value as one element of rank 1.
        self._in_shape = [[compile_expr(d)[0] for d in i.dims] for i in self.inputs]
        self._out_shape = [[compile_expr(d)[0] for d in o.dims] for o in self.outputs]
        self._np_out = [NUMPY_DTYPES[str(o.dtype)] for o in self.outputs]
        self._ort = import_onnxruntime(f"{op_name}{' at ' + location if location else ''}: this model")
        self._session = None
        self._lock = threading.Lock()

    # -- the session -------------------------------------------------------

    def session(self):
        """The ``InferenceSession`` of the one-node model, created on first use."""
        sess = self._session
        if sess is not None:
            return sess
        with self._lock:
            if self._session is None:
                ort = self._ort
                so = ort.SessionOptions()
                so.intra_op_num_threads = 1
                so.inter_op_num_threads = 1
                so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
                so.log_severity_level = 3  # errors only: its warnings are not the user's business
                try:
                    self._session = ort.InferenceSession(self.model, so, providers=["CPUExecutionProvider"])
                except Exception as e:  # ORT raises its own exception types (Fail, InvalidGraph, ...)
                    raise KilnError(f"{self._where}: ONNX Runtime cannot load the node: {_first_line(e)}") from None
            return self._session

    # -- the kernel contract ------------------------------------------------

    def __call__(self, inputs: Sequence, outputs: Sequence, binding: Mapping[str, int]) -> None:
        """Run the node on ``inputs`` and write its results into ``outputs``."""
        if len(inputs) != len(self.inputs) or len(outputs) != len(self.outputs):
            raise KilnError(f"{self._where} takes {len(self.inputs)} inputs and {len(self.outputs)} outputs, "
                            f"got {len(inputs)} and {len(outputs)}")
        feeds = {}
        for f in self.feeds:
            if f.operand is None:
                feeds[f.name] = f.value(binding)
                continue
            k = f.operand
            a = _numpy(inputs[k], f"{self._where}, input #{k}")
            if a.dtype != self._np_in[k]:
                raise KilnError(f"{self._where}: input #{k} is {_dtype_name(a)}, the node takes {self.inputs[k].dtype}")
            feeds[f.name] = _as_shape(np.ascontiguousarray(a), self._in_shape[k], binding)
        sess = self.session()
        try:
            results = sess.run(self._wanted, feeds)
        except Exception as e:  # ORT's own exception types
            raise KilnError(f"{self._where} failed in ONNX Runtime: {_first_line(e)}") from None
        for j, (o, r) in enumerate(zip(outputs, results)):
            dst = _as_shape(_numpy(o, f"{self._where}, output #{j}"), self._out_shape[j], binding)
            r = np.asarray(r)
            if r.dtype != self._np_out[j]:
                raise KilnError(f"{self._where}: ONNX Runtime returned {_dtype_name(r)} for result "
                                f"'{self._wanted[j]}', kiln's types give {self.outputs[j].dtype}")
            if r.shape != dst.shape:
                raise KilnError(f"{self._where}: ONNX Runtime returned shape {list(r.shape)} for result "
                                f"'{self._wanted[j]}', but kiln's types give {list(dst.shape)} "
                                f"({[str(d) for d in self.outputs[j].dims]} at {dict(binding)})")
            np.copyto(dst, r)

    # -- artifacts ---------------------------------------------------------

    def to_json(self) -> dict:
        """The kernel as plain data (what an artifact stores): tensor infos with
        dims as text, the one-node model as base64, the feeds."""
        return {
            "runtime": self.runtime,
            "name": self.name,
            "op_name": self.op_name,
            "location": self.location,
            "inputs": [_info_json(i) for i in self.inputs],
            "outputs": [_info_json(o) for o in self.outputs],
            "model": base64.b64encode(self.model).decode("ascii"),
            "feeds": [f.to_json() for f in self.feeds],
            "result_names": list(self.result_names),
            "results": list(self.results),
        }

    @classmethod
    def from_json(cls, data: Mapping, make_info) -> OrtFallbackKernel:
        """The kernel :meth:`to_json` described; ``make_info(dims, dtype)``
        builds a tensor info.  Malformed data is a KilnError."""
        try:
            return cls(
                str(data["name"]), str(data["op_name"]),
                [make_info(i["dims"], i["dtype"]) for i in data["inputs"]],
                [make_info(o["dims"], o["dtype"]) for o in data["outputs"]],
                base64.b64decode(data["model"], validate=True),
                [_Feed.from_json(f) for f in data["feeds"]],
                [str(n) for n in data["result_names"]],
                [int(r) for r in data["results"]],
                str(data.get("location", "")),
            )
        except (KeyError, TypeError, ValueError, binascii.Error) as e:
            raise KilnError(f"malformed ONNX Runtime fallback kernel description: {type(e).__name__}: {e}") from None

    @classmethod
    def from_attrs(cls, name: str, op_name: str, inputs, outputs, attrs: Mapping[str, str],
                   results: Sequence[int] | None = None, location: str = "") -> OrtFallbackKernel:
        """Build from a ``kiln.fallback`` op's :data:`MODEL_ATTR` and
        :data:`IO_ATTR` texts (``attrs``) and its tensor infos; ``results``
        as in the constructor."""
        try:
            model = base64.b64decode(attrs[MODEL_ATTR], validate=True)
            io = json.loads(attrs[IO_ATTR])
            return cls(name, op_name, inputs, outputs, model, [_Feed.from_json(f) for f in io["feeds"]],
                       io["results"], results, location)
        except (KeyError, TypeError, ValueError, binascii.Error) as e:
            raise KilnError(f"fallback '{op_name}' at {location}: malformed ONNX payload: "
                            f"{type(e).__name__}: {e}") from None

    def __repr__(self) -> str:
        return f"<OrtFallbackKernel {self.name} {self.op_name}>"


def _info_json(info) -> dict:
    return {"dims": [str(d) for d in info.dims], "dtype": str(info.dtype)}


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def is_fallback_kernel(kernel) -> bool:
    """True for a kernel that runs a ``kiln.fallback`` op (PyTorch or ONNX Runtime)."""
    from ..backends.fallback import FallbackKernel

    return isinstance(kernel, (FallbackKernel, OrtFallbackKernel))


def fallback_from_json(data: Mapping, make_info):
    """The fallback kernel an artifact describes: ONNX Runtime's when the
    data says so, else PyTorch's (:class:`~kiln.backends.fallback.FallbackKernel`)."""
    if isinstance(data, Mapping) and data.get("runtime") == OrtFallbackKernel.runtime:
        return OrtFallbackKernel.from_json(data, make_info)
    from ..backends.fallback import FallbackKernel

    return FallbackKernel.from_json(data, make_info)
