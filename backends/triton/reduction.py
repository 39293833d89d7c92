"""Row reductions: reduce_sum / reduce_mean / reduce_max, softmax, layer_norm.

The input's axes split into *kept* axes (one program per combination: a
"row") and *reduced* axes (the "columns", walked in ``BLOCK`` steps, so any
runtime length works and the tail is masked).  Rows and columns are flat
indices split back into per-axis indices with runtime dims, and addressed
with the input's strides: reducing a middle axis, or axes that are not
adjacent, needs no transpose.

softmax takes three passes over a row (max, sum of exp, write), layer_norm
three (mean, variance of the centred values, write): two-pass statistics
keep fp16/bf16 inputs accurate, all in fp32.  An elementwise epilogue fuses
into the write.
"""

from __future__ import annotations

from collections.abc import Mapping

from ...errors import UnsupportedError
from .emit import Source, compute_tl, emit_epilogue, epilogue_inputs, is_float_dtype
from .kernel import TritonKernel, bcast_strides, next_pow2

__all__ = ["LayerNormKernel", "ReduceKernel", "SoftmaxKernel"]


def _norm(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


class _RowKernel(TritonKernel):
    """Shared layout of the row kernels; subclasses emit the body.

    With an elementwise prologue (``spec.prologue > 0``) the row input is
    never read from memory: every pass evaluates the prologue at the
    column indices instead (its inputs broadcast to the row input's shape).
    """

    #: True when the output has the input's shape (softmax, layer_norm).
    SAME_SHAPE = True

    @staticmethod
    def _x_spec_of(spec):
        kind, i = spec.anchor.args[0]
        return spec.inputs[i].spec if kind == "in" else spec.nodes[i].out

    @property
    def x_spec(self):
        return self._x_spec_of(self.spec)

    @property
    def has_prologue(self) -> bool:
        return self.spec.prologue > 0

    @classmethod
    def configs(cls, spec):
        return [{"BLOCK": 64, "num_warps": 2}, {"BLOCK": 256, "num_warps": 4}, {"BLOCK": 1024, "num_warps": 8}]

    @classmethod
    def default_config(cls, spec, binding: Mapping[str, int]):
        try:
            x = cls._x_spec_of(spec).shape(binding)
            red = cls._axes_of(spec, len(x))
            n = 1
            for a in red:
                n *= x[a]
        except Exception:
            n = 1024
        block = max(16, min(1024, next_pow2(n)))
        return {"BLOCK": block, "num_warps": 4 if block <= 1024 else 8}

    @classmethod
    def _axes_of(cls, spec, rank: int) -> list[int]:
        raise NotImplementedError

    def _axes(self):
        rank = self.x_spec.rank
        red = self._axes_of(self.spec, rank)
        kept = [a for a in range(rank) if a not in red]
        return kept, red

    def _inputs(self):
        """(pointer inputs, prologue inputs, epilogue inputs), by input index."""
        pro = epilogue_inputs(self.spec, set(), prologue=True)
        epi = epilogue_inputs(self.spec, set())
        return pro + [k for k in epi if k not in pro], pro, epi

    def _params(self, extra_in: list[str]) -> list[str]:
        kept, red = self._axes()
        ptrs, pro, epi = self._inputs()
        out_rank = self.spec.anchor.out.rank
        x_rank = self.x_spec.rank
        p = ([] if self.has_prologue else ["x"]) + [*extra_in, "out0"] + [f"in{k}" for k in ptrs] + ["nrows", "ncols"]
        p += [f"kd{j}" for j in range(len(kept))] + [f"rd{j}" for j in range(len(red))]
        if not self.has_prologue:
            p += [f"ksx{j}" for j in range(len(kept))] + [f"rsx{j}" for j in range(len(red))]
        p += [f"kso{j}" for j in range(len(kept))]
        if self.SAME_SHAPE:
            p += [f"rso{j}" for j in range(len(red))]
        p += [f"ps{k}_{a}" for k in pro for a in range(x_rank)]
        p += [f"es{k}_{a}" for k in epi for a in range(out_rank)]
        p += ["BLOCK: tl.constexpr"]
        return p

    def _head(self, src: Source, extra_in: list[str]) -> None:
        kept, red = self._axes()
        src("@triton.jit")
        src(f"def kernel({', '.join(self._params(extra_in))}):")
        src.indent()
        src("row = tl.program_id(0).to(tl.int64)")
        src("rest = row")
        for j in reversed(range(len(kept))):
            src(f"k{j} = rest % kd{j}")
            src(f"rest = rest // kd{j}")
        ooff = " + ".join(f"k{j} * kso{j}" for j in range(len(kept))) or "0"
        if not self.has_prologue:
            xoff = " + ".join(f"k{j} * ksx{j}" for j in range(len(kept))) or "0"
            src(f"xbase = x + ({xoff})")
        src(f"obase = out0 + ({ooff})")

    def _cols(self, src: Source) -> None:
        """Emit ``cols``, ``cmask``, per-axis column indices ``r*`` and ``xoff``/``ooff``."""
        _, red = self._axes()
        src("cols = c0 + tl.arange(0, BLOCK)")
        src("cmask = cols < ncols")
        src("crest = cols")
        for j in reversed(range(len(red))):
            if j == 0:
                src("r0 = crest")
            else:
                src(f"r{j} = crest % rd{j}")
                src(f"crest = crest // rd{j}")
        if not self.has_prologue:
            src(f"xoff = {' + '.join(f'r{j} * rsx{j}' for j in range(len(red))) or '0'}")
        if self.SAME_SHAPE:
            src(f"ooff = {' + '.join(f'r{j} * rso{j}' for j in range(len(red))) or '0'}")

    def _x(self, src: Source, other: str, ct: str = "tl.float32") -> str:
        """Emit the row input at the current columns (``other`` where masked); its variable."""
        var = src.tmp("xv")
        if not self.has_prologue:
            src(f"{var} = tl.load(xbase + xoff, mask=cmask, other={other}).to({ct})")
            return var
        kept, red = self._axes()
        index = [f"k{kept.index(a)}" if a in kept else f"r{red.index(a)}" for a in range(self.x_spec.rank)]
        values = emit_epilogue(src, self.spec, list(range(self.spec.prologue)), {}, index, "cmask", stride="ps")
        src(f"{var} = tl.where(cmask, {values[self.spec.anchor.args[0][1]]}.to({ct}), {other})")
        return var

    def _index(self) -> list[str]:
        """Index expression per output axis, for the epilogue."""
        kept, red = self._axes()
        rank = self.x_spec.rank
        out = []
        for a in range(rank):
            if a in kept:
                out.append(f"k{kept.index(a)}")
            elif self.SAME_SHAPE:
                out.append(f"r{red.index(a)}")
            elif self.spec.anchor.attrs.get("keepdims"):
                out.append("0")
        return out

    def _store(self, src: Source, value: str, mask: str, offset: str) -> None:
        p = self.spec.prologue
        values = emit_epilogue(src, self.spec, list(range(p + 1, len(self.spec.nodes))), {p: value}, self._index(), mask)
        src(f"tl.store(obase + {offset}, {values[self.spec.outputs[0]]}.to(out0.dtype.element_ty), mask={mask})")

    def _launch_common(self, inputs, outputs, extra, binding):
        kept, red = self._axes()
        out = outputs[0]
        shape = self.x_spec.shape(binding)
        nrows = 1
        for a in kept:
            nrows *= shape[a]
        ncols = 1
        for a in red:
            ncols *= shape[a]
        os_ = out.stride()
        if self.SAME_SHAPE:
            kso = [os_[a] for a in kept]
            rso = [os_[a] for a in red]
        else:
            keep = bool(self.spec.anchor.attrs.get("keepdims"))
            pos = kept if keep else list(range(len(kept)))
            kso = [os_[p] for p in pos]
            rso = []
        ptrs, pro, epi = self._inputs()
        args = [] if self.has_prologue else [inputs[self.spec.anchor.args[0][1]]]
        args += [*extra, out] + [inputs[k] for k in ptrs] + [nrows, ncols]
        args += [shape[a] for a in kept] + [shape[a] for a in red]
        if not self.has_prologue:
            xs = inputs[self.spec.anchor.args[0][1]].stride()
            args += [xs[a] for a in kept] + [xs[a] for a in red]
        args += kso + rso
        for k in pro:
            args += bcast_strides(inputs[k], tuple(shape))
        for k in epi:
            args += bcast_strides(inputs[k], tuple(out.shape))
        return (max(nrows, 1),), args, {"BLOCK": self.config["BLOCK"]}


class ReduceKernel(_RowKernel):
    """``kiln.reduce_sum`` / ``reduce_mean`` / ``reduce_max`` / ``reduce_min`` over any axes."""

    kind = "reduce"
    SAME_SHAPE = False

    @classmethod
    def _axes_of(cls, spec, rank):
        axes = spec.anchor.attrs.get("axes") or []
        return sorted({_norm(a, rank) for a in axes}) if axes else list(range(rank))

    def generate(self) -> str:
        op = self.spec.anchor.op.split("_", 1)[1]
        dtype = self.x_spec.dtype
        ct = compute_tl(dtype)
        init = "0"
        if op == "max":
            init = "float('-inf')" if is_float_dtype(dtype) else "-9223372036854775807" if dtype == "i64" else "-2147483647"
        elif op == "min":
            init = "float('inf')" if is_float_dtype(dtype) else "9223372036854775807" if dtype == "i64" else "2147483647"
        src = Source()
        self._head(src, [])
        if op in ("max", "min"):
            src(f"acc = tl.full((BLOCK,), {init}, {ct})")
        else:
            src(f"acc = tl.zeros((BLOCK,), dtype={ct})")
        src("for c0 in range(0, ncols, BLOCK):")
        src.indent()
        self._cols(src)
        v = self._x(src, init, ct)
        if op == "max":
            src(f"acc = tl.maximum(acc, {v})")
        elif op == "min":
            src(f"acc = tl.minimum(acc, {v})")
        else:
            src(f"acc += {v}")
        src.dedent()
        if op == "max":
            src("res = tl.max(acc, axis=0)")
        elif op == "min":
            src("res = tl.min(acc, axis=0)")
        elif op == "sum":
            src("res = tl.sum(acc, axis=0)")
        else:
            if not is_float_dtype(dtype):
                raise UnsupportedError(f"reduce_mean on the Triton backend needs a float input, got {dtype}")
            src("res = tl.sum(acc, axis=0) / ncols")
        self._store(src, "res", "row < nrows", "0")
        return src.text()

    def launch(self, inputs, outputs, binding):
        return self._launch_common(inputs, outputs, [], binding)


class SoftmaxKernel(_RowKernel):
    """``kiln.softmax`` along one axis."""

    kind = "softmax"

    @classmethod
    def _axes_of(cls, spec, rank):
        return [_norm(int(spec.anchor.attrs.get("axis", -1)), rank)]

    def generate(self) -> str:
        src = Source()
        self._head(src, [])
        src("m = tl.full((BLOCK,), float('-inf'), tl.float32)")
        src("for c0 in range(0, ncols, BLOCK):")
        src.indent()
        self._cols(src)
        v = self._x(src, "float('-inf')")
        src(f"m = tl.maximum(m, {v})")
        src.dedent()
        src("mx = tl.max(m, axis=0)")
        src("s = tl.zeros((BLOCK,), dtype=tl.float32)")
        src("for c0 in range(0, ncols, BLOCK):")
        src.indent()
        self._cols(src)
        v = self._x(src, "float('-inf')")
        src(f"s += tl.where(cmask, tl.exp({v} - mx), 0.0)")
        src.dedent()
        src("inv = 1.0 / tl.sum(s, axis=0)")
        src("for c0 in range(0, ncols, BLOCK):")
        src.indent()
        self._cols(src)
        v = self._x(src, "0.0")
        src(f"y = tl.exp({v} - mx) * inv")
        self._store(src, "y", "cmask", "ooff")
        src.dedent()
        return src.text()

    def launch(self, inputs, outputs, binding):
        return self._launch_common(inputs, outputs, [], binding)


class LayerNormKernel(_RowKernel):
    """``kiln.layer_norm`` over the dims from ``axis`` on, optional weight and bias."""

    kind = "layer_norm"

    @classmethod
    def _axes_of(cls, spec, rank):
        return list(range(_norm(int(spec.anchor.attrs.get("axis", -1)), rank), rank))

    def _affine(self) -> list[str]:
        """Names of the optional operands present, in operand order (a subset of weight, bias)."""
        return list(self.spec.anchor.attrs.get("affine", []))

    def generate(self) -> str:
        eps = float(self.spec.anchor.attrs.get("epsilon", 1e-5))
        affine = self._affine()
        src = Source()
        self._head(src, affine)
        src("acc = tl.zeros((BLOCK,), dtype=tl.float32)")
        src("for c0 in range(0, ncols, BLOCK):")
        src.indent()
        self._cols(src)
        src(f"acc += {self._x(src, '0.0')}")
        src.dedent()
        src("mean = tl.sum(acc, axis=0) / ncols")
        src("acc = tl.zeros((BLOCK,), dtype=tl.float32)")
        src("for c0 in range(0, ncols, BLOCK):")
        src.indent()
        self._cols(src)
        src(f"d = tl.where(cmask, {self._x(src, '0.0')} - mean, 0.0)")
        src("acc += d * d")
        src.dedent()
        src(f"rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / ncols + {eps!r})")
        src("for c0 in range(0, ncols, BLOCK):")
        src.indent()
        self._cols(src)
        src(f"y = ({self._x(src, '0.0')} - mean) * rstd")
        if "weight" in affine:
            src("y = y * tl.load(weight + cols, mask=cmask, other=0.0).to(tl.float32)")
        if "bias" in affine:
            src("y = y + tl.load(bias + cols, mask=cmask, other=0.0).to(tl.float32)")
        self._store(src, "y", "cmask", "ooff")
        src.dedent()
        return src.text()

    def launch(self, inputs, outputs, binding):
        extra = [inputs[r[1]].contiguous() for r in self.spec.anchor.args[1:]]
        return self._launch_common(inputs, outputs, extra, binding)
