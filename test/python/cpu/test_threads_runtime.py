"""Thread counts are run-time values (issue 35): the library helpers ask the
native pool (``kiln_pool_threads``) and the native library (``kiln_blas_threads``,
or OpenBLAS's own count without it) when they run, so the generated code does
not depend on ``KILN_THREADS`` / ``KILN_BLAS_THREADS``, the kernel cache key
leaves them out, and a kernel compiled under one pool size is a cache hit,
with right results, in a process with another."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.export import Dim
from torch.nn import functional as fn

from kiln.backends.cpu import library
from kiln.tools import kiln_opt

pytestmark = pytest.mark.native  # fails, not skips, without the library (conftest.py)

HERE = os.path.dirname(os.path.abspath(__file__))
BACKENDS = Path(HERE).parents[1] / "Backends"


# -- the models: every generator that passes a thread count -------------------

class Mlp(torch.nn.Module):
    """GEMMs: bias + GELU and a residual in the native small GEMM's epilogue
    (kiln_sgemm_small_epi, kiln_bias_act), and a product of activations big
    enough for sgemm's threads (kiln_sgemm_par, kiln_blas_threads)."""

    def __init__(self, seed):
        super().__init__()
        torch.manual_seed(seed)
        self.fc1 = torch.nn.Linear(64, 256)
        self.fc2 = torch.nn.Linear(256, 64)

    def forward(self, x):
        y = self.fc2(fn.gelu(self.fc1(x))) + x
        return y @ y.transpose(1, 2)  # 256 x 256 x 64 a batch: past the one-thread cut


class Cnn(torch.nn.Module):
    """Convolutions (kiln_conv2d, and kiln_conv2d_pair for the two before the
    mean) and a strided max pool (kiln_maxpool2d)."""

    def __init__(self, seed):
        super().__init__()
        torch.manual_seed(seed)
        self.c1 = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.c2 = torch.nn.Conv2d(16, 32, 3, padding=1)
        self.c3 = torch.nn.Conv2d(32, 64, 3, stride=2, padding=1)
        self.fc = torch.nn.Linear(64, 10)

    def forward(self, x):
        y = fn.max_pool2d(torch.relu(self.c1(x)), 3, stride=2, padding=1)
        y = torch.relu(self.c3(torch.relu(self.c2(y))))
        return self.fc(y.mean(dim=(2, 3)))


class Attention(torch.nn.Module):
    """A layer norm (kiln_layer_norm), heads split and merged by transposes
    (kiln_permute) around F.scaled_dot_product_attention (kiln_attention), and
    a packed projection's causal attention (kiln_attention_packed)."""

    def __init__(self, seed, hidden=64, heads=4):
        super().__init__()
        torch.manual_seed(seed)
        self.ln = torch.nn.LayerNorm(hidden)
        self.q, self.k, self.v = (torch.nn.Linear(hidden, hidden) for _ in range(3))
        self.qkv = torch.nn.Linear(hidden, 3 * hidden)
        self.heads = heads

    def _split(self, t):
        b, seq, hidden = t.shape
        return t.reshape(b, seq, self.heads, hidden // self.heads).transpose(1, 2)

    def forward(self, x):
        b, seq, hidden = x.shape
        h = self.ln(x)
        o = fn.scaled_dot_product_attention(self._split(self.q(h)), self._split(self.k(h)), self._split(self.v(h)))
        y = x + o.transpose(1, 2).reshape(b, seq, hidden)
        qkv = self.qkv(y).reshape(b, seq, 3, self.heads, hidden // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        o2 = fn.scaled_dot_product_attention(q, k, v, is_causal=True)
        return y + o2.transpose(1, 2).reshape(b, seq, hidden)


def _weight_a(seed, m=16, k=48, n=20):
    """``W @ x`` with ``W`` a constant [m, k] (kiln_sgemm_wa), x: [B, k, n], as kiln IR."""
    w = np.random.default_rng(seed).standard_normal((m, k), dtype=np.float32)
    t_in, t_out, t_w = (f'!kiln.tensor<["B", {k}, {n}], f32>', f'!kiln.tensor<["B", {m}, {n}], f32>',
                        f"!kiln.tensor<[{m}, {k}], f32>")
    text = (f'"kiln.symbol"() {{sym_name = "B", min = 1 : i64, max = 8 : i64}} : () -> ()\n'
            f"func.func @main(%x: {t_in}) -> {t_out} {{\n"
            f'  %w = "kiln.constant"() {{value = dense<"0x{w.tobytes().hex().upper()}"> : tensor<{m}x{k}xf32>}} '
            f": () -> {t_w}\n"
            f'  %y = "kiln.matmul"(%w, %x) : ({t_w}, {t_in}) -> {t_out}\n'
            f"  return %y : {t_out}\n}}\n")
    return text, w


def cases(seed):
    """``(name, compile, inputs, reference)`` for each model: ``compile()``
    gives the compiled model, ``reference(x)`` what torch computes."""
    import kiln

    gen = torch.Generator().manual_seed(seed)
    batch = Dim("B", min=1, max=8)
    out = []
    for name, module, example, dims, inputs in [
        ("mlp", Mlp(seed), torch.randn(2, 256, 64), {0: batch}, [(1, 256, 64), (3, 256, 64)]),
        ("cnn", Cnn(seed), torch.randn(2, 3, 32, 32), {0: batch}, [(1, 3, 32, 32), (5, 3, 32, 32)]),
        ("attention", Attention(seed), torch.randn(2, 16, 64), {0: batch, 1: Dim("L", min=1, max=128)},
         [(1, 7, 64), (3, 100, 64)]),
    ]:
        module = module.eval()

        def reference(x, module=module):
            with torch.no_grad():
                return module(torch.from_numpy(x)).numpy()

        out.append((name, lambda module=module, example=example, dims=dims:
                    kiln.compile(module, (example,), dynamic_shapes=(dims,)),
                    [torch.randn(*shape, generator=gen).numpy() for shape in inputs], reference))
    text, w = _weight_a(seed)
    out.append(("weight_a", lambda: kiln.compile(text), [torch.randn(b, 48, 20, generator=gen).numpy() for b in (1, 4)],
                lambda x: (torch.from_numpy(w) @ torch.from_numpy(x)).numpy()))
    return out


# -- compiled under one pool size, loaded under another -----------------------

SCRIPT = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    sys.path.insert(0, {here!r})
    import numpy as np
    from kiln.runtime import native
    from test_threads_runtime import cases
    root = Path({root!r}) / "cpu"
    out = {{"pool": native.load().kiln_pool_threads(), "models": []}}
    for seed in {seeds!r}:
        for name, compile, inputs, reference in cases(seed):
            before = set(root.rglob("*.so"))
            model = compile()
            errs = []
            for x in inputs:
                want = reference(x)
                got = np.asarray(model(x))
                errs.append(float(np.abs(got - want).max() / (1.0 + np.abs(want).max())))
            new = sorted(str(p) for p in set(root.rglob("*.so")) - before)
            out["models"].append({{"name": name, "seed": seed, "cache": model.report()["kernel_cache"],
                                   "err": max(errs), "new": new}})
    print(json.dumps(out))
""")


def _run(root: Path, threads: int, seeds) -> dict:
    """Compile and run the models of ``seeds`` in a fresh process whose native
    pool has ``threads`` threads, with the kernel cache at ``root``."""
    code = SCRIPT.format(here=HERE, root=str(root), seeds=list(seeds))
    # Each seed's weights inside its kernels, so seed 2's models are cache entries of their own, compiled
    # on two threads (past inline_limit, weights are arguments and every seed shares one entry).
    env = dict(os.environ, KILN_CACHE_DIR=str(root), KILN_THREADS=str(threads), KILN_INLINE_LIMIT="1G")
    env.pop("KILN_BLAS_THREADS", None)
    proc = subprocess.run([sys.executable, "-c", code], env=env, cwd=HERE, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, f"returncode {proc.returncode}\n{proc.stderr[-3000:]}"
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["pool"] == threads  # the pool really has that size
    return result


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Seed 1 compiled on one thread, then loaded on two (where seed 2 is
    compiled), then seed 2 loaded on one thread: three fresh processes, one cache."""
    root = tmp_path_factory.mktemp("threads") / "cache"
    return _run(root, 1, [1]), _run(root, 2, [1, 2]), _run(root, 1, [2])


def _by_seed(result, seed):
    return [m for m in result["models"] if m["seed"] == seed]


def test_compiled_on_one_thread_is_a_hit_on_two(runs):
    first, second, _ = runs
    compiled, loaded = _by_seed(first, 1), _by_seed(second, 1)
    assert [m["cache"] for m in compiled] == ["miss"] * 4 and all(m["new"] for m in compiled)
    assert [(m["name"], m["cache"], m["new"]) for m in loaded] == [(m["name"], "hit", []) for m in compiled]
    for m in compiled + loaded:
        assert m["err"] < 1e-4, m


def test_compiled_on_two_threads_is_a_hit_on_one(runs):
    _, second, third = runs
    compiled, loaded = _by_seed(second, 2), _by_seed(third, 2)
    assert [m["cache"] for m in compiled] == ["miss"] * 4 and all(m["new"] for m in compiled)
    assert [(m["name"], m["cache"], m["new"]) for m in loaded] == [(m["name"], "hit", []) for m in compiled]
    for m in compiled + loaded:
        assert m["err"] < 1e-4, m


#: The native entry points the models' kernels call: every generator that
#: passes a thread count, and the two run-time getters.
CALLED = ["kiln_pool_threads", "kiln_blas_threads", "kiln_sgemm_small_epi", "kiln_sgemm_par", "kiln_bias_act",
          "kiln_sgemm_wa", "kiln_conv2d", "kiln_conv2d_pair", "kiln_maxpool2d", "kiln_attention_gqa",
          "kiln_attention_packed", "kiln_permute", "kiln_layer_norm"]


def test_every_generator_ran(runs):
    """The cached libraries import each entry point (so the hits above ran each generator's code)."""
    data = b"".join(Path(p).read_bytes() for m in runs[0]["models"] for p in m["new"])
    assert [s for s in CALLED if b"\0" + s.encode() + b"\0" not in data] == []


# -- the generated code and the key do not depend on the thread counts --------

def _lit_inputs():
    """Each Backends/kiln-cpu-library*.mlir lit test with its first RUN line's
    pass flags, with the native runtime and, where products go to OpenBLAS
    without it (not the GEN checks: generated code), without."""
    out = []
    for path in sorted(BACKENDS.glob("kiln-cpu-library*.mlir")):
        if path.stem.endswith("-invalid"):  # its inputs fail by design
            continue
        text = path.read_text()
        flags = text.splitlines()[0].split("%s", 1)[1].split("|", 1)[0].split()
        out.append(pytest.param(path, flags, "1", id=f"{path.stem}-native"))
        if "--check-prefix=GEN" not in text:
            out.append(pytest.param(path, flags, "0", id=f"{path.stem}-openblas"))
    return out


def _opt(path, flags, out, monkeypatch, **env) -> str:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert kiln_opt.main([str(path), *flags, "-o", str(out)]) == 0
    return out.read_text()


@pytest.mark.parametrize("path, flags, native", _lit_inputs())
def test_library_helpers_do_not_bake_thread_counts(path, flags, native, tmp_path, monkeypatch):
    """kiln-cpu-library's output is the same under any KILN_THREADS /
    KILN_BLAS_THREADS (it used to carry them as constants), and asks for
    the counts at run time wherever a call takes one."""
    monkeypatch.setenv("KILN_NATIVE", native)
    one = _opt(path, flags, tmp_path / "a.mlir", monkeypatch, KILN_THREADS="1", KILN_BLAS_THREADS="1")
    many = _opt(path, flags, tmp_path / "b.mlir", monkeypatch, KILN_THREADS="3", KILN_BLAS_THREADS="5")
    assert one == many
    if native == "1":
        assert "call @kiln_pool_threads() : () -> i32" in one
    assert one.count("func.func private @kiln_pool_threads()") <= one.count("// -----") + 1


def test_thread_settings_are_not_in_the_key(monkeypatch):
    from kiln._mlir import ir
    from kiln.backends.cpu import objcache
    from kiln.context import make_context
    from kiln.module import parse_module

    text, _ = _weight_a(3)
    keys = []
    with make_context(), ir.Location.unknown():
        module = parse_module(text, "<test>")
        for threads, blas in (("1", "1"), ("3", "5"), (str(library.native_threads()), None)):
            monkeypatch.setenv("KILN_THREADS", threads)
            if blas is None:
                monkeypatch.delenv("KILN_BLAS_THREADS", raising=False)
            else:
                monkeypatch.setenv("KILN_BLAS_THREADS", blas)
            keys.append(objcache.kernel_key(module, 1))
    assert keys[0] is not None and len(set(keys)) == 1
    names = [name for name, _ in objcache.codegen_settings()]
    assert "KILN_THREADS" not in names and "KILN_BLAS_THREADS" not in names


def test_getters_are_declared_once_per_module(ctx):
    """Helpers of several passes (a product, then a pool, ...) all call
    kiln_pool_threads: the module declares it once, and a text that calls it
    parses alone (insert_helpers adds the declaration it needs)."""
    from kiln._mlir import ir

    module = ir.Module.parse("func.func @main() {\n  return\n}\n")
    for i in range(3):
        library.insert_helpers(module.operation, [
            f"func.func private @h{i}() -> i32 {{\n{library.pool_threads_line('%n')}\n"
            f"{library.blas_threads_value('%m', True)}\n  %s = arith.addi %n, %m : i32\n  return %s : i32\n}}"])
    text = str(module)
    assert text.count("func.func private @kiln_pool_threads() -> i32") == 1
    assert text.count("func.func private @kiln_blas_threads() -> i32") == 1
    assert module.operation.verify()


@pytest.mark.parametrize("value", ["abc", "2.5"])
def test_a_malformed_blas_thread_count_is_a_clear_error(value, monkeypatch):
    """KILN_BLAS_THREADS is read where the native library gets it (once per
    process): a value that is not a whole number is a KilnError naming it."""
    from kiln.errors import KilnError

    monkeypatch.setenv("KILN_BLAS_THREADS", value)
    with pytest.raises(KilnError, match=rf"KILN_BLAS_THREADS='{value}' is not a whole number of threads"):
        library.blas_threads()
    monkeypatch.setenv("KILN_BLAS_THREADS", "0")  # at least one thread, as before
    assert library.blas_threads() == 1
