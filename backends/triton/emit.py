"""Triton source emission: a line buffer, dtype tables, and the elementwise
expression emitter shared by pointwise kernels and every epilogue.

Generated kernels compute in fp32 for f16/bf16/f32 data (fp32 accumulation
and math; inputs are upcast on load, results rounded to the output dtype on
store) and in the data's own type otherwise.  Only Triton *builtins* are
used (``tl.exp``, ``tl.where``, ``tl.sum`` ...), never ``tl.sigmoid`` or
other ``@triton.jit`` helpers of the standard library: those break when one
process both interprets kernels and compiles them for a GPU target.
"""

from __future__ import annotations

from .spec import KernelSpec, Node

__all__ = ["TL", "Source", "compute_tl", "emit_epilogue", "emit_node", "is_float_dtype", "torch_dtype"]

#: kiln dtype name -> Triton dtype.
TL = {
    "f16": "tl.float16",
    "bf16": "tl.bfloat16",
    "f32": "tl.float32",
    "f64": "tl.float64",
    "i1": "tl.int1",
    "i8": "tl.int8",
    "ui8": "tl.uint8",
    "i16": "tl.int16",
    "i32": "tl.int32",
    "i64": "tl.int64",
}


def is_float_dtype(dtype: str) -> bool:
    return dtype in ("f16", "bf16", "f32", "f64")


def compute_tl(dtype: str) -> str:
    """The Triton type values of ``dtype`` are computed in."""
    if dtype in ("f16", "bf16", "f32"):
        return "tl.float32"
    return TL[dtype]


def torch_dtype(dtype: str):
    """The torch dtype of a kiln dtype name."""
    import torch

    return {
        "f16": torch.float16,
        "bf16": torch.bfloat16,
        "f32": torch.float32,
        "f64": torch.float64,
        "i1": torch.bool,
        "i8": torch.int8,
        "ui8": torch.uint8,
        "i16": torch.int16,
        "i32": torch.int32,
        "i64": torch.int64,
    }[dtype]


class Source:
    """Lines of Python (Triton) source with indentation and fresh names."""

    HEADER = "import triton\nimport triton.language as tl\n\n\n"

    def __init__(self):
        self.lines: list[str] = []
        self.depth = 0
        self._n = 0

    def __call__(self, text: str) -> None:
        for ln in text.splitlines():
            self.lines.append("    " * self.depth + ln)

    def tmp(self, prefix: str = "t") -> str:
        self._n += 1
        return f"{prefix}{self._n}"

    def indent(self):
        self.depth += 1

    def dedent(self):
        self.depth -= 1

    def text(self) -> str:
        return self.HEADER + "\n".join(self.lines) + "\n"


def _tanh(x: str) -> str:
    # tanh from exp of a non-positive argument: no overflow for large |x|.
    return f"tl.where({x} < 0, -1.0, 1.0) * (1.0 - tl.exp(-2.0 * tl.abs({x}))) / (1.0 + tl.exp(-2.0 * tl.abs({x})))"


def emit_node(src: Source, node: Node, vals: list[str], arg_dtypes: list[str]) -> str:
    """Emit ``node`` over operand variables ``vals``; returns its variable."""
    op = node.op.split(".", 1)[1]
    a = vals[0] if vals else None
    b = vals[1] if len(vals) > 1 else None
    flt = is_float_dtype(arg_dtypes[0]) if arg_dtypes else True
    out = src.tmp("v")
    simple = {
        "add": f"{a} + {b}",
        "sub": f"{a} - {b}",
        "mul": f"{a} * {b}",
        "maximum": f"tl.maximum({a}, {b})",
        "minimum": f"tl.minimum({a}, {b})",
        "eq": f"{a} == {b}",
        "ne": f"{a} != {b}",
        "lt": f"{a} < {b}",
        "le": f"{a} <= {b}",
        "gt": f"{a} > {b}",
        "ge": f"{a} >= {b}",
        "neg": f"-{a}",
        "abs": f"tl.abs({a})",
        "exp": f"tl.exp({a})",
        "log": f"tl.log({a})",
        "sqrt": f"tl.sqrt({a})",
        "rsqrt": f"1.0 / tl.sqrt({a})",
        "erf": f"tl.erf({a})",
        "floor": f"tl.floor({a})",
        "ceil": f"tl.ceil({a})",
        "sin": f"tl.sin({a})",
        "cos": f"tl.cos({a})",
        "sigmoid": f"1.0 / (1.0 + tl.exp(-{a}))",
        "silu": f"{a} / (1.0 + tl.exp(-{a}))",
        "relu": f"tl.maximum({a}, 0)",
        "copy": f"{a}",
        "tanh": _tanh(a) if a else "",
    }
    if op in simple:
        src(f"{out} = {simple[op]}")
    elif op == "div":
        src(f"{out} = {a} / {b}" if flt else f"{out} = {a} // {b}")
    elif op == "pow":
        r = src.tmp("p")
        src(f"{r} = tl.exp2({b} * tl.log2(tl.abs({a})))")
        # Negative bases: real only for integral exponents, negative for odd ones.
        src(f"{r} = tl.where(({a} < 0) & ((({b} * 0.5) - tl.floor({b} * 0.5)) != 0), -{r}, {r})")
        src(f"{r} = tl.where(({a} < 0) & ({b} != tl.floor({b})), float('nan'), {r})")
        src(f"{out} = tl.where({b} == 0, 1.0, {r})")
    elif op == "gelu":
        if node.attrs.get("approximate") == "tanh":
            inner = src.tmp("g")
            src(f"{inner} = 0.7978845608028654 * ({a} + 0.044715 * {a} * {a} * {a})")
            src(f"{out} = 0.5 * {a} * (1.0 + {_tanh(inner)})")
        else:
            src(f"{out} = 0.5 * {a} * (1.0 + tl.erf({a} * 0.7071067811865476))")
    elif op == "where":
        src(f"{out} = tl.where({a}, {b}, {vals[2]})")
    elif op == "cast":
        target = node.out.dtype
        if target == "i1":
            src(f"{out} = {a} != 0")
        elif is_float_dtype(target):
            # Round to the target type, then keep computing in its compute type.
            src(f"{out} = {a}.to({TL[target]}).to({compute_tl(target)})")
        else:
            src(f"{out} = {a}.to({TL[target]})")
    elif op == "batch_norm":
        x, scale, bias, mean, var = vals
        eps = float(node.attrs.get("epsilon", 1e-5))
        src(f"{out} = ({x} - {mean}) / tl.sqrt({var} + {eps!r}) * {scale} + {bias}")
    else:
        from ...errors import UnsupportedError

        raise UnsupportedError(f"the Triton backend has no elementwise rule for '{node.op}'")
    return out


def load_expr(ptr: str, offset: str, mask: str, dtype: str) -> str:
    """A masked load of one operand, converted to its compute type.  A constant
    offset (a rank-0 output's index, ``"0"``) is spread over the mask's block:
    a scalar pointer takes no block mask."""
    if offset == "0":
        offset = f"tl.zeros_like(({mask})).to(tl.int32)"
    return f"tl.load({ptr} + {offset}, mask={mask}, other=0).to({compute_tl(dtype)})"


def emit_epilogue(
    src: Source,
    spec: KernelSpec,
    nodes: list[int],
    values: dict[int, str],
    index: list[str],
    mask: str,
    stride: str = "es",
) -> dict[int, str]:
    """Emit the elementwise ``nodes`` (indices into ``spec.nodes``).

    ``values`` holds variables already computed (the anchor's result).
    External inputs are loaded at ``sum(index[a] * es{k}_{a})``: pointer
    argument ``in{k}`` and one stride argument per output axis (0 where the
    input broadcasts).  Returns ``values`` with the new variables.
    """
    loaded: dict[int, str] = {}

    def operand(ref) -> tuple[str, str]:
        kind, i = ref
        if kind == "node":
            return values[i], spec.nodes[i].out.dtype
        dtype = spec.inputs[i].spec.dtype
        if i not in loaded:
            off = " + ".join(f"{ix} * {stride}{i}_{a}" for a, ix in enumerate(index)) or "0"
            var = src.tmp("x")
            src(f"{var} = {load_expr(f'in{i}', off, mask, dtype)}")
            loaded[i] = var
        return loaded[i], dtype

    for j in nodes:
        node = spec.nodes[j]
        ops = [operand(r) for r in node.args]
        values[j] = emit_node(src, node, [v for v, _ in ops], [d for _, d in ops])
    return values


def epilogue_inputs(spec: KernelSpec, skip: set[int], prologue: bool = False) -> list[int]:
    """Indices of the inputs the epilogue (or prologue) nodes load (not the anchor's own)."""
    used: list[int] = []
    for node in spec.prologue_nodes if prologue else spec.epilogue:
        for kind, i in node.args:
            if kind == "in" and i not in skip and i not in used:
                used.append(i)
    return used
