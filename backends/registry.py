"""The kernel registry shared by kiln's backends.

It maps ``(op or fused pattern, device, dtype, shape class)`` to candidate
implementations — generated code (Triton, linalg -> LLVM) or a library /
hand-written kernel — and chooses one per kernel: by **heuristic** (the
highest-priority candidate that applies, with its own block-size heuristic
at the profile's opt shape), or by **measuring** (``autotune=True``): every
candidate x configuration runs on random inputs of the opt shape and the
fastest wins.  Choices are stored in the persistent kernel cache
(:mod:`kiln.backends.cache`), keyed by the kernel IR's digest, shape bucket
and target, so a later compilation (another process too) reuses them.

Registering a kernel — the public API, for any device::

    import kiln

    # A Triton kernel class (a kiln.backends.triton.kernel.TritonKernel subclass):
    kiln.register_kernel("kiln.attention", device="cuda", dtypes=["f16", "bf16"],
                         shape_fn=lambda q, k, v, mask=None: (*q[:-1], v[-1]),
                         workspace=lambda q, k, v, mask=None: 0,
                         impl=MyFlashAttention, name="my_flash", priority=20)

    # A plain function for CPU (or any device): fn(inputs, outputs, binding)
    # writes the outputs (numpy arrays on CPU, torch tensors on the Triton
    # path) or returns them; `workspace=` bytes are passed as a `workspace`
    # array, the op's non-tensor arguments as `attrs=` when fn takes them.
    @kiln.register_kernel("kiln.softmax", device="cpu", dtypes=["f32"], name="np_softmax")
    def np_softmax(inputs, outputs, binding, attrs):
        x = inputs[0]
        e = np.exp(x - x.max(attrs["axis"], keepdims=True))
        outputs[0][...] = e / e.sum(attrs["axis"], keepdims=True)

``op`` is an op name (matches a kernel anchored on that op without an
epilogue, or any epilogue when ``epilogue=True``), a fused pattern
(``"kiln.matmul+kiln.add+kiln.gelu"``, matched exactly), a kernel kind
(``"pointwise"``) or a custom op of the source model
(``"mylib::flash_attention"``, ``"com.example::MyOp"``, or the torch op
object), which then imports as ``kiln.custom`` (:mod:`kiln.backends.user`).
``shape_fn(*input_shapes)`` returns the output shape (a list of shapes for
several results); for a custom op it gives the result types at import, for
a kiln op it is checked against kiln's own shape inference when the kernel
is chosen.  On CPU a registered kernel for a kiln op replaces kiln's
generated code for that op (``kiln-select-kernels``); report() lists the
step's implementation as ``user.<name>``.
"""

from __future__ import annotations

import inspect
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import KilnError, UnsupportedError

__all__ = [
    "REGISTRY",
    "Choice",
    "FunctionKernel",
    "KernelEntry",
    "KernelRegistry",
    "register_kernel",
    "shape_class",
]


def shape_class(spec, binding: Mapping[str, int] | None = None) -> str:
    """``"static"`` when the kernel's shapes have no symbols, else ``"dynamic"``."""
    return "dynamic" if spec.symbols() else "static"


@dataclass
class KernelEntry:
    """One registered candidate (see :func:`register_kernel`)."""

    op: str
    device: str
    impl: Any
    name: str
    dtypes: tuple[str, ...] | None = None
    shape_class: str | None = None
    shape_fn: Callable | None = None
    workspace: Callable | None = None
    priority: int = 0
    applies: Callable | None = None
    epilogue: bool = False

    def matches(self, spec, device: str, dtype: str, cls: str) -> bool:
        """True when this entry can implement ``spec`` on ``device``."""
        if self.device != device:
            return False
        if self.dtypes is not None and dtype not in self.dtypes:
            return False
        if self.shape_class is not None and self.shape_class != cls:
            return False
        if spec.anchor.op == "kiln.custom":  # a custom op: matched by the op it stands for
            if self.op != spec.anchor.attrs.get("op_name"):
                return False
        elif self.op == spec.pattern or self.op == spec.kind:
            pass
        elif self.op == spec.anchor.op and spec.kind != "pointwise":
            if len(spec.nodes) > 1 and not self.epilogue:
                return False
        else:
            return False
        return self.applies is None or bool(self.applies(spec))

    def configs(self, spec) -> list[dict]:
        """Configurations to measure (one, ``{}``, for plain functions)."""
        if inspect.isclass(self.impl) and hasattr(self.impl, "configs"):
            return self.impl.configs(spec)
        return [{}]

    def default_config(self, spec, binding) -> dict:
        """The implementation's heuristic configuration for ``spec`` at ``binding`` (``{}`` if it has none)."""
        if inspect.isclass(self.impl) and hasattr(self.impl, "default_config"):
            return self.impl.default_config(spec, binding)
        return {}

    def build(self, spec, config: Mapping[str, Any], cache=None):
        """A kernel object (kiln kernel contract) for ``spec``."""
        if inspect.isclass(self.impl):
            kernel = self.impl(spec, dict(config), cache=cache)
        else:
            kernel = FunctionKernel(spec, self.impl, self.workspace, name=self.name)
        kernel.candidate = self.name
        return kernel


class FunctionKernel:
    """Kernel contract around a plain function ``fn(inputs, outputs, binding)``."""

    def __init__(self, spec, fn: Callable, workspace: Callable | None = None, name: str | None = None):
        self.spec = spec
        self.name = f"{spec.name}:{name or fn.__name__}"
        self.inputs = [i.base.info() for i in spec.inputs]
        self.outputs = [s.info() for s in spec.output_specs]
        self.config: dict = {}
        self._fn = fn
        self._workspace = workspace
        self._wants_ws = "workspace" in inspect.signature(fn).parameters
        anchor = spec.anchor
        self._custom = anchor.attrs.get("op_name") if anchor.op == "kiln.custom" else None
        # The op's non-tensor arguments (a custom op's recorded ones, a kiln op's attributes).
        self._kw = {}
        if "attrs" in inspect.signature(fn).parameters:
            self._kw["attrs"] = (anchor.attrs.get("attrs") or {}) if self._custom else dict(anchor.attrs)
        self._label = name or getattr(fn, "__name__", "kernel")

    def workspace_bytes(self, binding: Mapping[str, int]) -> int:
        """Bytes of scratch memory the function asked for."""
        if self._workspace is None:
            return 0
        return int(self._workspace(*[i.spec.shape(binding) for i in self.spec.inputs]))

    def __call__(self, inputs: Sequence, outputs: Sequence, binding: Mapping[str, int]) -> None:
        import torch

        xs = [i.apply(t, binding) for i, t in zip(self.spec.inputs, inputs)]
        kw = dict(self._kw)
        if self._wants_ws:
            device = outputs[0].device if outputs else "cpu"
            kw["workspace"] = torch.empty(self.workspace_bytes(binding), dtype=torch.uint8, device=device)
        try:
            got = self._fn(xs, list(outputs), binding, **kw)
            if got is not None:  # the results returned rather than written
                got = list(got) if isinstance(got, (list, tuple)) else [got]
                if len(got) != len(outputs):
                    raise ValueError(f"returned {len(got)} tensor(s) for {len(outputs)} output(s)")
                for o, g in zip(outputs, got):
                    o.copy_(torch.as_tensor(g).to(o.device))
        except Exception as e:  # noqa: BLE001 - user code: reported with the op and the kernel
            op = self._custom or self.spec.pattern
            raise KilnError(f"kernel 'user.{self._label}' registered for '{op}' failed in '{self.spec.name}': "
                            f"{type(e).__name__}: {e}") from None


@dataclass
class Choice:
    """What the registry chose for one kernel, and why."""

    kernel: Any
    entry: KernelEntry
    config: dict
    how: str  # "heuristic", "autotune" or "cache"
    times: dict[str, float] = field(default_factory=dict)


def _config_text(config: Mapping) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(config.items()))


class KernelRegistry:
    """Candidates by op/pattern, device, dtype and shape class."""

    def __init__(self):
        self.entries: list[KernelEntry] = []
        self._builtins_loaded = False

    def register(self, entry: KernelEntry) -> KernelEntry:
        """Add (or replace, by name and device) a candidate."""
        self.entries = [e for e in self.entries if not (e.name == entry.name and e.device == entry.device)]
        self.entries.append(entry)
        return entry

    def unregister(self, name: str, device: str | None = None) -> None:
        """Remove candidates called ``name`` (on ``device``, or all devices)."""
        self.entries = [e for e in self.entries if not (e.name == name and device in (None, e.device))]

    def load_builtins(self) -> None:
        """Register kiln's own kernels (once): the Triton candidates and the CPU library kernels."""
        if not self._builtins_loaded:
            self._builtins_loaded = True
            from .cpu import library_kernels
            from .triton import candidates

            candidates.register_builtins(self)
            library_kernels.register_builtins(self)

    def candidates(self, spec, device: str, dtype: str | None = None, cls: str | None = None) -> list[KernelEntry]:
        """Applicable candidates for ``spec``, best priority first."""
        self.load_builtins()
        dtype = dtype or spec.dtype
        cls = cls or shape_class(spec)
        found = [e for e in self.entries if e.matches(spec, device, dtype, cls)]
        return sorted(found, key=lambda e: -e.priority)

    def select(
        self,
        spec,
        device: str,
        binding: Mapping[str, int],
        *,
        autotune: bool = False,
        cache=None,
        target: str | None = None,
        max_configs: int | None = None,
        tensor_device: str | None = None,
    ) -> Choice:
        """Choose and build the kernel for ``spec``.

        ``binding`` is the profile's opt shape (symbol -> size).  With a cache,
        a stored choice for the same kernel IR, bucket and target is reused.
        """
        from .cache import make_key, shape_bucket

        found = self.candidates(spec, device)
        if not found:
            what = spec.anchor.attrs.get("op_name") if spec.anchor.op == "kiln.custom" else spec.pattern
            raise UnsupportedError(
                f"no kernel for '{what}' on {device} with dtype {spec.dtype} ({shape_class(spec)} shapes)"
            )
        target = target or device
        key = make_key("choice", spec.digest(), shape_bucket(binding), target, autotune=autotune)
        if cache is not None:
            stored = cache.get_json("choice", key)
            if stored is not None:
                entry = next((e for e in found if e.name == stored.get("candidate")), None)
                if entry is not None:
                    kernel = entry.build(spec, stored["config"], cache=cache)
                    return Choice(kernel, entry, stored["config"], "cache", stored.get("times", {}))
        for e in found:
            _check_shape_fn(e, spec, binding)
        if not autotune:
            entry = found[0]
            config = entry.default_config(spec, binding)
            choice = Choice(entry.build(spec, config, cache=cache), entry, config, "heuristic")
        else:
            choice = self._autotune(spec, found, binding, cache, max_configs, tensor_device)
        if cache is not None:
            cache.put_json(
                "choice", key, {"candidate": choice.entry.name, "config": choice.config, "times": choice.times},
                meta={"pattern": spec.pattern, "how": choice.how},
            )
        return choice

    def _autotune(self, spec, found, binding, cache, max_configs, tensor_device) -> Choice:
        inputs, outputs = random_operands(spec, binding, tensor_device)
        best = None
        times: dict[str, float] = {}
        for entry in found:
            configs = entry.configs(spec)
            if max_configs is not None:
                configs = configs[:max_configs]
            for config in configs:
                label = f"{entry.name}[{_config_text(config)}]"
                try:
                    kernel = entry.build(spec, config, cache=cache)
                    t = measure(kernel, inputs, outputs, binding)
                except Exception:  # a config the target rejects (shared memory, registers, ...)
                    times[label] = float("inf")
                    continue
                times[label] = t
                if best is None or t < best[0]:
                    best = (t, entry, dict(config), kernel)
        if best is None:
            raise UnsupportedError(f"no candidate for '{spec.pattern}' ran at {dict(binding)}")
        return Choice(best[3], best[1], best[2], "autotune", times)


def _check_shape_fn(entry: KernelEntry, spec, binding) -> None:
    if entry.shape_fn is None:
        return
    try:
        shapes = [i.spec.shape(binding) for i in spec.inputs]
        got = tuple(entry.shape_fn(*shapes))
    except Exception as e:
        raise KilnError(f"shape function of kernel '{entry.name}' failed on {shapes}: {e}") from None
    want = spec.output_specs[0].shape(binding)
    if got != want:
        raise KilnError(
            f"shape function of kernel '{entry.name}' gives {got} for '{spec.pattern}', "
            f"but kiln infers {want} at {dict(binding)}"
        )


def random_operands(spec, binding: Mapping[str, int], device: str | None = None):
    """Random inputs and empty outputs at ``binding`` (for measuring)."""
    import torch

    from .triton.emit import torch_dtype

    if device is None:
        device = "cuda" if torch.cuda.is_available() and not _interpreting() else "cpu"
    gen = torch.Generator().manual_seed(0)
    inputs = []
    for i in spec.inputs:
        shape = i.base.shape(binding)
        dt = torch_dtype(i.base.dtype)
        if dt.is_floating_point:
            t = torch.randn(shape, generator=gen).to(dt)
        elif dt == torch.bool:
            t = torch.rand(shape, generator=gen) > 0.5
        else:
            t = torch.randint(0, 4, shape, generator=gen).to(dt)
        inputs.append(t.to(device))
    outputs = [torch.empty(s.shape(binding), dtype=torch_dtype(s.dtype), device=device) for s in spec.output_specs]
    return inputs, outputs


def _interpreting() -> bool:
    import os

    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def measure(kernel, inputs, outputs, binding, reps: int = 3) -> float:
    """Median seconds of ``reps`` runs after one warm-up (CUDA-synchronized on GPU)."""
    import torch

    sync = torch.cuda.synchronize if outputs and outputs[0].is_cuda else (lambda: None)
    kernel(inputs, outputs, binding)
    sync()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        kernel(inputs, outputs, binding)
        sync()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


#: The process-wide registry.
REGISTRY = KernelRegistry()


def register_kernel(
    op: Any,
    impl: Any = None,
    *,
    fn: Any = None,
    device: str = "cpu",
    dtypes: Sequence[str] | None = None,
    shape_fn: Callable | None = None,
    workspace: Callable | None = None,
    name: str | None = None,
    priority: int = 10,
    shape_class: str | None = None,
    applies: Callable | None = None,
    epilogue: bool = False,
    registry: KernelRegistry | None = None,
):
    """Register a kernel implementation (see the module docstring).

    ``impl`` (or ``fn=``) is a function ``fn(inputs, outputs, binding)`` or,
    for the Triton path, a kernel class.  Returns the :class:`KernelEntry`;
    without ``impl`` it returns a decorator.  User kernels default to
    priority 10, above kiln's generated kernels (0), so a registered kernel
    wins the heuristic choice; autotuning measures them all.  An op name
    kiln cannot match is a KilnError.
    """
    from .user import canonical_op

    reg = registry or REGISTRY
    if impl is not None and fn is not None:
        raise KilnError(f"register_kernel('{op}'): give the kernel as impl or as fn=, not both")
    impl = impl if impl is not None else fn
    op = canonical_op(op)
    if impl is not None and not callable(impl):
        raise KilnError(f"register_kernel('{op}'): the kernel must be a function or a kernel class, "
                        f"got {type(impl).__name__}")

    def add(fn):
        entry = KernelEntry(
            op=op, device=device, impl=fn, name=name or getattr(fn, "__name__", op),
            dtypes=tuple(dtypes) if dtypes is not None else None, shape_class=shape_class,
            shape_fn=shape_fn, workspace=workspace, priority=priority, applies=applies, epilogue=epilogue,
        )
        reg.register(entry)
        return fn if impl is None else entry

    if impl is None:
        return add
    return add(impl)
