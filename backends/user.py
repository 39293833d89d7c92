"""User extension: kernels and decompositions registered from user code.

Two public entry points (exported as ``kiln.register_kernel`` and
``kiln.register_decomposition``; docs/EXTENDING.md shows them at work):

- :func:`kiln.backends.registry.register_kernel` registers a kernel for a
  kiln op (``"kiln.softmax"``) or for a **custom op of the source model**:
  a ``torch.library`` op (``"mylib::flash_attention"``, or the op object
  itself) or an ONNX custom-domain op (``"com.example::MyOp"``).  A custom
  op with a registered kernel imports as ``kiln.custom`` (see
  :class:`~kiln.dialects.kiln.CustomOp`), its result types from the
  kernel's ``shape_fn``, and is *not* a fallback; a kiln op with a
  registered CPU kernel becomes ``kiln.custom`` in ``kiln-select-kernels``
  so that the kernel is called instead of kiln's generated code.
- :func:`register_decomposition` rewrites a custom op into kiln ops at
  import: ``fn(cx)`` is an importer pattern, ``cx`` the importer's
  :class:`~kiln.conversions.torch_to_kiln.driver.OpContext` (``cx.tensor(i)``,
  ``cx.scalar(i)``, ``cx.attr("alpha")`` for ONNX attributes,
  ``cx.build("matmul", a, b)``, ``cx.const(0.5, "f32")``), returning the
  op's result value(s).  The model then compiles like any other: fused,
  generated, no fallback.

On CPU the runtime runs a ``kiln.custom`` op with :class:`UserKernel`: the
registered function gets numpy arrays (views of the runtime's tensors and
arena, no copies) ``fn(inputs, outputs, binding)`` and writes ``outputs``
(or returns the result arrays, which are copied in).  On the Triton path
(``device="cuda"``) the registry chooses the entry as for any kernel and
the function gets torch tensors on the device.  A C function
(:class:`kiln.backends.user_c.CKernel`: source kiln compiles, or a symbol of
a shared library) is registered the same way.  A function that takes an
``attrs`` keyword receives the op's non-tensor arguments (``operand<i>`` by
position for torch ops, attribute names for ONNX).
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from ..errors import KilnError, ShapeError, UnsupportedError

__all__ = [
    "DECOMPOSITIONS",
    "UserKernel",
    "canonical_op",
    "custom_attrs",
    "import_user_op",
    "register_decomposition",
    "user_kernel",
]

#: ``ns::name`` (torch.library's qualified names, ``domain::OpType`` for ONNX).
_CUSTOM = re.compile(r"^[A-Za-z_][\w.]*::[A-Za-z_]\w*$")
#: Kernel kinds the Triton registry matches by (``"pointwise"``, ...).
KINDS = frozenset(["pointwise", "matmul", "conv2d", "softmax", "layer_norm", "reduce", "pool", "attention"])

#: canonical op name -> decomposition function (see :func:`register_decomposition`).
DECOMPOSITIONS: dict[str, Callable] = {}


def canonical_op(op) -> str:
    """The registry's name for ``op``; KilnError for a name kiln cannot match.

    ``op`` is a kiln op name (``"kiln.softmax"``), a fused pattern
    (``"kiln.matmul+kiln.add"``), a Triton kernel kind (``"pointwise"``), a
    custom op as ``"namespace::name"``, or a torch custom op object
    (``torch.library.custom_op``'s result, ``torch.ops.mylib.op``)."""
    for attr in ("_qualname", "_qualified_op_name"):  # torch CustomOpDef / OpOverloadPacket
        q = getattr(op, attr, None)
        if isinstance(q, str):
            op = q
            break
    else:
        name = getattr(op, "name", None)
        if callable(name) and type(op).__name__ == "OpOverload":  # torch.ops.mylib.op.default
            op = name().split(".")[0]
    if not isinstance(op, str):
        raise KilnError(f"register_kernel / register_decomposition: op must be an op name, got {type(op).__name__}")
    from ..dialects.kiln import OPS

    if _CUSTOM.match(op) or op in KINDS:
        return op
    parts = op.split("+")
    if all(p in OPS for p in parts):
        return op
    bad = [p for p in parts if p not in OPS]
    raise KilnError(
        f"cannot register for op '{op}': '{bad[0]}' is neither a kiln op (kiln.softmax, ...), a fused pattern "
        f"of kiln ops, a kernel kind ({', '.join(sorted(KINDS))}) nor a custom op written 'namespace::name' "
        "(mylib::flash_attention, com.example::MyOp)"
    )


def is_custom(op: str) -> bool:
    """True for a custom op name (``ns::name``), not a kiln op or pattern."""
    return "::" in op


def register_decomposition(op, fn: Callable | None = None):
    """Rewrite ``op`` into kiln ops at import (see the module docstring).

    ``op`` is a custom op (``"mylib::my_gelu"``, ``"com.example::MyOp"`` or
    the torch op object) or a kiln op (``"kiln.gelu"``: rewritten by
    ``kiln-select-kernels`` before the graph passes, ``cx`` a
    :class:`KilnOpContext`); ``fn(cx)`` builds kiln ops with the importer's
    OpContext and returns the op's result (a tuple for several).  Raising
    :class:`~kiln.conversions.torch_to_kiln.driver.Decline` leaves the op to
    the other mechanisms (a registered kernel, else a fallback).  Without
    ``fn``, returns a decorator.  A decomposition is tried before a
    registered kernel of the same op.
    """
    name = canonical_op(op)
    if not is_custom(name) and ("+" in name or name in KINDS):
        raise KilnError(f"register_decomposition('{name}'): decompositions are for one op (a custom op "
                        "'namespace::name' or a kiln op), not a fused pattern or a kernel kind")

    def add(f):
        if not callable(f):
            raise KilnError(f"register_decomposition('{name}'): fn must be callable, got {type(f).__name__}")
        DECOMPOSITIONS[name] = f
        return f

    return add if fn is None else add(fn)


def unregister_decomposition(op) -> None:
    """Forget the decomposition of ``op`` (tests, notebooks)."""
    DECOMPOSITIONS.pop(canonical_op(op), None)


# ----------------------------------------------------------------------------
# Import: custom ops of the source become kiln.custom (or are decomposed)
# ----------------------------------------------------------------------------


def _import_keys(op: str) -> tuple[str, str]:
    """The importer's names of custom op ``ns::name``: torch's ``ns.name``,
    ONNX's ``onnx.name`` (its domain checked against ``ns``)."""
    ns, name = op.split("::")
    return f"{ns}.{name}", f"onnx.{name}"


def _custom_ops() -> set[str]:
    from .registry import REGISTRY

    return {k for k in DECOMPOSITIONS if is_custom(k)} | {e.op for e in REGISTRY.entries if is_custom(e.op)}


def _match(conv, op, name: str, customs: set[str]) -> str | None:
    """The registered custom op the importer's ``name`` stands for, or None."""
    bare = name.removeprefix("torch.")
    for c in customs:
        torch_key, onnx_key = _import_keys(c)
        if bare == torch_key or bare.rsplit(".", 1)[0] == torch_key and bare.endswith(".default"):
            return c
        if bare == onnx_key:
            nodes = getattr(conv, "onnx_nodes", None)
            node = nodes.find(op) if nodes is not None else None
            if node is not None and node.domain == c.split("::")[0]:
                return c
    return None


def import_user_op(conv, op, name: str, cx) -> bool:
    """Convert ``op`` with a registered decomposition or kernel (the
    importer's hook, before its own patterns); False when none is registered.

    Errors in what the user registered (a shape function that disagrees
    with the source's types, a decomposition that raises) are KilnErrors
    naming the op, the registration and the location; they are not turned
    into fallbacks."""
    customs = _custom_ops()
    if not customs:
        return False
    custom = _match(conv, op, name, customs)
    if custom is None:
        return False
    from ..conversions.torch_to_kiln.driver import Decline
    from ..locations import location_text

    where = location_text(op.location)
    fn = DECOMPOSITIONS.get(custom)
    if fn is not None:
        try:
            out = fn(cx)
        except Decline:
            out = None
        except KilnError as e:
            raise type(e)(f"decomposition of '{custom}' ({_fn_name(fn)}) at {where}: {e.message}") from None
        except Exception as e:  # noqa: BLE001 - user code: any error, reported with the op
            raise KilnError(f"decomposition of '{custom}' ({_fn_name(fn)}) failed at {where}: "
                            f"{type(e).__name__}: {e}") from None
        if out is not None:
            out = out if isinstance(out, tuple) else (out,)
            if len(out) != len(op.results):
                raise KilnError(f"decomposition of '{custom}' ({_fn_name(fn)}) at {where} returned {len(out)} "
                                f"value(s) for {len(op.results)} result(s)")
            cx.kiln_ops = max(cx.kiln_ops, 2)  # counted as decomposed in the import report
            conv._record(op, name, cx, out)
            return True
    from .registry import REGISTRY

    entries = [e for e in REGISTRY.entries if e.op == custom]
    if not entries:
        return False  # a decomposition that declined, and no kernel: the importer's fallback
    conv._record(op, name, cx, _build_custom(cx, custom, entries, where))
    return True


def _fn_name(fn) -> str:
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)


def _build_custom(cx, custom: str, entries, where: str) -> tuple:
    """A ``kiln.custom`` op for the source op of ``cx``; its results."""
    from .._mlir import ir
    from ..conversions.torch_to_kiln.driver import Decline, Known, _scalar_attr
    from ..dialects.dims import Dim, dim
    from ..dialects.kiln import MAX_VARIADIC, CustomOp, create_op, tensor_info, tensor_type
    from .fallback_build import python_value

    operands, attrs = [], {}
    for i in range(cx.num_operands):
        v = cx.value(i)
        if isinstance(v, (ir.Value, Known)) and not (isinstance(v, Known) and v.is_symbolic):
            operands.append(cx.tensor(i))
        elif isinstance(v, list) and any(isinstance(x, (ir.Value, Known)) for x in v):
            raise UnsupportedError(f"custom op '{custom}' at {where}: argument #{i} is a list of tensors, which "
                                   "kiln.custom cannot pass to a kernel")
        else:
            try:
                attrs[f"operand{i}"] = _scalar_attr(v)
            except Exception:  # noqa: BLE001 - a value kiln cannot record (a tensor list)
                raise UnsupportedError(f"custom op '{custom}' at {where}: argument #{i} ({type(v).__name__}) "
                                       "is neither a tensor nor a constant kiln can pass to a kernel") from None
    for a in cx.op.attributes:
        key = a if isinstance(a, str) else a.name
        if key.startswith("torch.onnx."):
            attrs[key[len("torch.onnx."):]] = cx.op.attributes[key]
    if len(operands) > MAX_VARIADIC:
        raise UnsupportedError(f"custom op '{custom}' at {where}: {len(operands)} tensor operands "
                               f"(kiln.custom takes up to {MAX_VARIADIC})")
    shapes = [tuple(tensor_info(t.type).dims) for t in operands]
    decoded = {k: python_value(a) for k, a in attrs.items()}
    with_fn = [e for e in entries if e.shape_fn is not None]
    if not with_fn:
        raise KilnError(f"custom op '{custom}' at {where}: kernel '{entries[0].name}' was registered without a "
                        "shape_fn, which kiln needs for the result's shape (register_kernel(..., shape_fn=...))")
    results = None
    for e in with_fn:
        got = _shapes_of(e, custom, shapes, decoded, where)
        if results is not None and got != results:
            raise KilnError(f"custom op '{custom}' at {where}: the shape functions of kernels '{with_fn[0].name}' "
                            f"and '{e.name}' disagree ({_text(results)} vs {_text(got)})")
        results = got
    entry = with_fn[0]
    n = len(cx.op.results)
    if len(results) != n:
        raise ShapeError(f"custom op '{custom}' at {where}: the shape function of kernel '{entry.name}' gives "
                         f"{len(results)} result(s), but the op has {n}")
    if n > CustomOp.MAX_RESULTS:
        raise UnsupportedError(f"custom op '{custom}' at {where}: {n} results (kiln.custom has up to "
                               f"{CustomOp.MAX_RESULTS})")
    types = []
    for i, dims in enumerate(results):
        dims = [d if isinstance(d, Dim) else dim(d) for d in dims]
        try:
            source = cx.result_dims(i)
            dtype = cx.result_dtype(i)
        except Decline:  # no type from the source (an ONNX output without value_info)
            source, dtype = None, str(tensor_info(operands[0].type).dtype) if operands else "f32"
        if source is not None and (len(source) != len(dims) or any(
                not s.is_unknown and s != d for s, d in zip(source, dims))):
            raise ShapeError(f"custom op '{custom}' at {where}: the shape function of kernel '{entry.name}' gives "
                             f"{_text([dims])} for result #{i}, but kiln's shape inference (the source's types) "
                             f"gives {_text([source])}")
        types.append(tensor_type(dims, dtype))
    # The CPU entry's name when there is one: what kiln-opt and report() show.
    named = next((e for e in entries if e.device == "cpu"), entries[0])
    custom_op = create_op("custom", operands, results=types, loc=cx.loc, attrs={
        "op_name": custom, "kernel": named.name, "attrs": ir.DictAttr.get(attrs) if attrs else None})
    cx.kiln_ops += 1
    return tuple(custom_op.operation.results)


def _shapes_of(entry, custom: str, shapes, attrs, where: str) -> list[tuple]:
    try:
        kw = {"attrs": attrs} if _takes(entry.shape_fn, "attrs") else {}
        got = entry.shape_fn(*shapes, **kw)
    except Exception as e:  # noqa: BLE001 - user code
        raise KilnError(f"custom op '{custom}' at {where}: the shape function of kernel '{entry.name}' failed on "
                        f"{_text(shapes)}: {type(e).__name__}: {e}") from None
    got = list(got)
    multi = bool(got) and all(isinstance(s, (list, tuple)) for s in got)
    return [tuple(s) for s in got] if multi else [tuple(got)]


def _text(shapes) -> str:
    return ", ".join("[" + ", ".join(str(d) for d in s) + "]" for s in shapes)


def _takes(fn, name: str) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def custom_attrs(op) -> dict:
    """The ``attrs`` of a ``kiln.custom`` op as Python values (``{}`` without any)."""
    from .._mlir import ir
    from .fallback_build import python_value

    attrs = op.operation.attributes
    if "attrs" not in attrs:
        return {}
    return {a.name: python_value(a.attr) for a in ir.DictAttr(attrs["attrs"])}


# ----------------------------------------------------------------------------
# Decompositions of kiln ops (kiln-select-kernels)
# ----------------------------------------------------------------------------


def _kiln_op_context():
    """:class:`KilnOpContext`, defined on first use (its base is the importer's OpContext)."""
    global KilnOpContext
    if KilnOpContext is not None:
        return KilnOpContext
    from ..conversions.torch_to_kiln.driver import OpContext, TorchToKiln
    from ..dialects.kiln import tensor_info

    class _KilnOpContext(OpContext):
        """The importer's :class:`~kiln.conversions.torch_to_kiln.driver.OpContext`
        over a kiln op, for a decomposition of a kiln op: ``cx.tensor(i)`` is
        operand ``i``, ``cx.attr(name)`` the op's attribute (its default when
        absent), and the builders (``build``, ``const``, ``like``, ``cast``)
        are the importer's."""

        def __init__(self, op):  # no converter: a kiln op's operands are kiln values already
            self.conv, self.op, self.name, self.loc = None, op, op.name, op.location
            self.kiln_ops, self.opset, self.checks = 0, None, []

        def value(self, i: int):
            return self.op.operands[i] if i < len(self.op.operands) else None

        def attr(self, name: str, default=None):
            view = self.op.opview
            if name not in getattr(view, "ATTRS", {}):
                return default
            got = view.attr(name)
            return default if got is None else got

        def result_dtype(self, i: int = 0) -> str:
            return str(tensor_info(self.op.results[i].type).dtype)

        def result_dims(self, i: int = 0) -> list:
            return list(tensor_info(self.op.results[i].type).dims)

        def const(self, value, dtype: str, shape=()):
            return TorchToKiln.splat(self, value, dtype, shape, self.loc)  # splat reads nothing of the converter

    KilnOpContext = _KilnOpContext
    return KilnOpContext


#: The OpContext subclass a kiln op's decomposition gets (set on first use: see _kiln_op_context).
KilnOpContext = None


def kiln_decompositions() -> dict[str, Callable]:
    """Registered decompositions of kiln ops (op name -> fn)."""
    return {k: v for k, v in DECOMPOSITIONS.items() if not is_custom(k)}


def decompose_kiln_op(op, fn) -> bool:
    """Replace kiln ``op`` by what ``fn`` builds; False when ``fn`` declines.
    Must run with an insertion point before ``op``."""
    from ..conversions.torch_to_kiln.driver import Decline
    from ..locations import location_text

    where = location_text(op.location)
    try:
        out = fn(_kiln_op_context()(op))
    except Decline:
        return False
    except KilnError as e:
        raise type(e)(f"decomposition of '{op.name}' ({_fn_name(fn)}) at {where}: {e.message}") from None
    except Exception as e:  # noqa: BLE001 - user code: any error, reported with the op
        raise KilnError(f"decomposition of '{op.name}' ({_fn_name(fn)}) failed at {where}: "
                        f"{type(e).__name__}: {e}") from None
    out = out if isinstance(out, tuple) else (out,)
    if len(out) != len(op.results):
        raise KilnError(f"decomposition of '{op.name}' ({_fn_name(fn)}) at {where} returned {len(out)} value(s) "
                        f"for {len(op.results)} result(s)")
    for old, new in zip(op.results, out):
        if old.type != new.type:
            raise KilnError(f"decomposition of '{op.name}' ({_fn_name(fn)}) at {where}: result has type "
                            f"{new.type}, the op's is {old.type}")
        old.replace_all_uses_with(new)
    op.erase()
    return True


# ----------------------------------------------------------------------------
# Run time on CPU
# ----------------------------------------------------------------------------


def find_entry(op_name: str, device: str, dtype: str | None, preferred: str | None = None):
    """The registered entry that runs ``op_name`` on ``device`` for
    ``dtype``: the one named ``preferred`` when it applies, else the
    highest priority; None when there is none."""
    from .registry import REGISTRY

    found = [e for e in REGISTRY.entries if e.op == op_name and e.device == device
             and (e.dtypes is None or dtype is None or dtype in e.dtypes)]
    for e in found:
        if e.name == preferred:
            return e
    return max(found, key=lambda e: e.priority) if found else None


class UserKernel:
    """A registered Python kernel run by the CPU runtime (kiln's kernel
    contract: ``__call__(inputs, outputs, binding)`` writing ``outputs``).

    ``results`` lists which of the op's results the step's outputs are
    (kiln-partition drops unused ones); the others get scratch arrays.
    """

    kind = "user"

    def __init__(self, name: str, op_name: str, entry, inputs, outputs, all_outputs, results, attrs,
                 where: str):
        self.name = name
        self.op_name = op_name
        self.registered = entry
        self.candidate = f"user.{entry.name}"
        self.inputs = list(inputs)
        self.outputs = list(outputs)
        self._all = list(all_outputs)
        self._results = list(results)
        self.attrs = dict(attrs)
        self.where = where
        fn = entry.impl
        if inspect.isclass(fn) or not callable(fn):
            raise KilnError(f"kernel '{entry.name}' registered for '{op_name}' on cpu is not a function "
                            f"fn(inputs, outputs, binding) (got {type(fn).__name__})")
        self._fn = fn
        self._kw = {"attrs": self.attrs} if _takes(fn, "attrs") else {}
        self._workspace = entry.workspace
        self._wants_ws = _takes(fn, "workspace") and entry.workspace is not None

    def __call__(self, inputs: Sequence, outputs: Sequence, binding: Mapping[str, int]) -> None:
        from ..dialects.dims import evaluate
        from .kernel import as_numpy

        ins = [as_numpy(x) for x in inputs]
        given = [as_numpy(o) for o in outputs]
        outs = []
        for k, info in enumerate(self._all):
            if k in self._results:
                outs.append(given[self._results.index(k)])
            else:  # a result the model does not use: the kernel still writes it
                outs.append(np.empty([evaluate(d, binding) for d in info.dims], np.dtype(_np_dtype(info.dtype))))
        kw = dict(self._kw)
        if self._wants_ws:
            shapes = [tuple(x.shape) for x in ins]
            kw["workspace"] = np.empty(int(self._workspace(*shapes)), np.uint8)
        try:
            got = self._fn(ins, outs, dict(binding), **kw)
            if got is not None:  # the results returned rather than written
                got = list(got) if isinstance(got, (list, tuple)) else [got]
                if len(got) != len(outs):
                    raise ValueError(f"returned {len(got)} array(s) for {len(outs)} output(s)")
                for o, g in zip(outs, got):
                    g = np.asarray(g)
                    if g.shape != o.shape:
                        raise ValueError(f"returned shape {g.shape}, expected {o.shape}")
                    o[...] = g
        except Exception as e:  # noqa: BLE001 - user code: reported with the op and the kernel
            raise KilnError(f"kernel 'user.{self.registered.name}' registered for '{self.op_name}' failed at "
                            f"{self.where}: {type(e).__name__}: {e}") from None

    def __repr__(self) -> str:
        return f"<UserKernel {self.name} {self.op_name} -> user.{self.registered.name}>"


def _np_dtype(dtype) -> str:
    from ..runtime.dtypes import NUMPY_DTYPES

    return NUMPY_DTYPES[str(dtype)]


def user_kernel(op, name: str, results: Sequence[int] | None = None) -> UserKernel:
    """The CPU kernel of a ``kiln.custom`` op (``results``: the op results
    the step's outputs are, default all); KilnError when no CPU kernel is
    registered for its op and dtype."""
    from ..dialects.kiln import TensorInfo, tensor_info
    from ..locations import location_text

    op = op.operation
    view = op.opview
    op_name, preferred = view.attr("op_name"), view.attr("kernel")
    ins = [TensorInfo(tensor_info(v.type).dims, str(tensor_info(v.type).dtype)) for v in op.operands]
    all_outs = [TensorInfo(tensor_info(r.type).dims, str(tensor_info(r.type).dtype)) for r in op.results]
    dtype = ins[0].dtype if ins else all_outs[0].dtype
    where = location_text(op.location)
    entry = find_entry(op_name, "cpu", dtype, preferred)
    if entry is None:
        from .registry import REGISTRY

        have = sorted({f"{e.name} ({e.device}, {', '.join(e.dtypes) if e.dtypes else 'any dtype'})"
                       for e in REGISTRY.entries if e.op == op_name})
        raise UnsupportedError(f"no CPU kernel is registered for '{op_name}' with dtype {dtype} (at {where}; "
                               f"registered: {', '.join(have) or 'none'})")
    results = list(range(len(all_outs))) if results is None else list(results)
    return UserKernel(name, op_name, entry, ins, [all_outs[r] for r in results], all_outs, results,
                      custom_attrs(op), where)


def _install_hook() -> None:
    """Have the importer try :func:`import_user_op` on every source op (once)."""
    from ..conversions.torch_to_kiln.driver import IMPORT_HOOKS

    if import_user_op not in IMPORT_HOOKS:
        IMPORT_HOOKS.append(import_user_op)


_install_hook()
