"""kiln.save / kiln.load: a self-contained artifact, loaded without the compiler (issue 41).

The load tests run in a fresh process where torch-mlir and kiln's MLIR module
``kiln._mlir`` cannot be imported (a meta path finder raises ImportError for
them; the import layers themselves are checked in ``test_layering.py``) and starting a process raises
(no C compiler can run): the model must load and match from the manifest,
the weights and the object code alone.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch
from torch.export import Dim

import kiln

#: Run first in the child: torch-mlir hidden, subprocesses refused.
NO_COMPILER = '''
import json, sys
class _HideCompiler:
    def find_spec(self, name, path=None, target=None):
        if name in ("torch_mlir", "kiln._mlir") or name.startswith("torch_mlir."):
            raise ImportError(f"{name} is hidden by the test: no compiler here")
        return None
sys.meta_path.insert(0, _HideCompiler())
import subprocess
class _NoProcess:
    def __init__(self, *args, **kwargs):
        raise AssertionError(f"a process was started: {args[:1]}")
subprocess.Popen = _NoProcess
HIDDEN = True
for _name in ("torch_mlir", "kiln._mlir"):
    try:
        __import__(_name)
        HIDDEN = False
    except ImportError:
        pass
COMPILER_LAYERS = ("torch_mlir", "kiln._mlir", "kiln.frontends", "kiln.conversions", "kiln.transforms",
                   "kiln.pipelines", "kiln.dialects.kiln", "kiln.compiler", "kiln.context", "kiln.module")
def compiler_modules():
    return sorted(m for m in sys.modules if m.startswith(COMPILER_LAYERS))
'''


def run_without_compiler(code: str, *args, cache_dir) -> dict:
    """Run ``NO_COMPILER + code`` in a fresh interpreter (``sys.argv[1:]`` =
    ``args``); the JSON object it prints last."""
    env = dict(os.environ, KILN_CACHE_DIR=str(cache_dir), CC="/nonexistent/cc")
    r = subprocess.run([sys.executable, "-c", NO_COMPILER + code, *map(str, args)], capture_output=True, text=True,
                       timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


# ----------------------------------------------------------------------------
# The bench MLP: 32 MiB of weights, [B, 1024] -> [B, 1024]
# ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mlp_artifact(tmp_path_factory):
    from kiln.bench import models

    module, example, dynamic = models.mlp()
    compiled = kiln.compile(module, example, dynamic_shapes=dynamic)
    d = tmp_path_factory.mktemp("mlp") / "mlp.kiln"
    manifest = kiln.save(compiled, d)
    x = np.random.default_rng(0).standard_normal((5, 1024)).astype(np.float32)
    np.save(d.parent / "x.npy", x)
    np.save(d.parent / "y.npy", compiled(x))
    return d, manifest


LOAD_MLP = '''
import time
start = time.perf_counter()
import numpy as np
import torch  # the runtime's tensors (any PyTorch process has it loaded): timed apart
import kiln
torch_s = time.perf_counter() - start
directory = sys.argv[1]
x, y = np.load(sys.argv[2]), np.load(sys.argv[3])
start = time.perf_counter()
model = kiln.load(directory)
load_s = time.perf_counter() - start
out = model(x)
print(json.dumps({"hidden": HIDDEN, "compiler_modules": compiler_modules(), "load_s": load_s, "torch_s": torch_s,
                  "equal": bool(np.array_equal(out, y)), "compilations": model.compilations,
                  "artifact": model.report()["artifact"], "inputs": [s.name for s in model.inputs]}))
'''


def test_the_mlp_loads_and_matches_without_the_compiler(mlp_artifact, tmp_path):
    d, _ = mlp_artifact
    cache = tmp_path / "empty-cache"
    out = run_without_compiler(LOAD_MLP, d, d.parent / "x.npy", d.parent / "y.npy", cache_dir=cache)
    assert out["hidden"] and out["compiler_modules"] == []
    assert out["equal"] and out["inputs"] == ["x"]
    # The work of a load, counted: no JIT compilation, no lowering or compiler module imported
    # (above), no process started (the child refuses one), one kernel library loaded and no
    # kernel cache entry read or written.
    assert out["compilations"] == 0 and out["artifact"]["compilations"] == 0
    assert out["artifact"]["libraries"] == 1
    assert not cache.exists() or not any(p.is_file() for p in cache.rglob("*"))
    print(f"bench MLP artifact: kiln.load took {out['load_s']:.3f} s in a fresh process with torch imported "
          f"({out['torch_s']:.3f} s for numpy, torch and kiln before it)")


def test_the_weights_are_out_of_the_object_code(mlp_artifact):
    from safetensors.numpy import load_file

    d, manifest = mlp_artifact
    lib = manifest["libraries"]["generic"]
    cut = sum(n for _, n, _ in lib["weights"])  # weights inlined into the kernels, cut out of the library
    assert (d / "kernels" / "generic.so").stat().st_size == lib["size"] - cut < 1 << 20
    tensors = load_file(str(d / "weights.safetensors"))  # any safetensors reader opens it
    assert {name for _, _, name in lib["weights"]} <= set(tensors)
    # Weights past kiln-partition's inline-limit are constants of the schedule, saved as they are.
    passed = sum(tensors[name].nbytes for name in manifest["constants"].values())
    assert passed >= 32 << 20  # both 1024 x 4096 weights
    assert sum(t.nbytes for t in tensors.values()) >= cut + passed
    assert manifest["device"] == "cpu" and manifest["precision"] == ["f32"] and manifest["cpu_features"]


def test_a_tampered_weight_file_is_refused(mlp_artifact, tmp_path):
    d, _ = mlp_artifact
    bad = tmp_path / "bad.kiln"
    shutil.copytree(d, bad)
    with open(bad / "weights.safetensors", "r+b") as f:
        f.seek(20 << 20)
        byte = f.read(1)
        f.seek(20 << 20)
        f.write(bytes([byte[0] ^ 1]))
    with pytest.raises(kiln.KilnError, match="the weights file 'weights.safetensors' does not match its digest"):
        kiln.load(bad)


# ----------------------------------------------------------------------------
# A model with a PyTorch fallback, a constant of the schedule, profiles and a
# specialization compiled at run time
# ----------------------------------------------------------------------------


class WithFallback(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(16, 32)
        self.w = torch.nn.Parameter(torch.randn(32))

    def forward(self, x):
        return torch.special.bessel_j0(self.lin(x)) + torch.special.bessel_j0(self.w)


@pytest.fixture(scope="module")
def spec_model(tmp_path_factory):
    module = WithFallback().eval()
    compiled = kiln.compile(module, (torch.randn(4, 16),), dynamic_shapes=({0: Dim("B", min=1, max=64)},),
                            profiles=[{"name": "small", "B": (1, 4, 8)}], policy="specialize", budget=4,
                            static_kernels=True)  # every static kernel kept: a library per variant, not timing's choice
    compiled(torch.randn(20, 16))  # outside the profile: a specialization for B in [17, 32]
    d = tmp_path_factory.mktemp("spec") / "spec.kiln"
    kiln.save(compiled, d)
    return module, compiled, d


def _check(model, module, b, seed=0):
    x = torch.randn(b, 16, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        torch.testing.assert_close(model(x), module(x), rtol=1e-5, atol=1e-5)


def test_profiles_policy_and_names_survive(spec_model):
    module, compiled, d = spec_model
    loaded = kiln.load(d)
    assert loaded.shape_contract() == compiled.shape_contract()
    assert loaded.shape_contract()["policy"] == "specialize"
    assert [(s.name, s.dims, s.dtype) for s in loaded.inputs] == [(s.name, s.dims, s.dtype) for s in compiled.inputs]
    assert [o.name for o in loaded.outputs] == [o.name for o in compiled.outputs]
    assert [v.name for v in loaded.values] == [v.name for v in compiled.values]
    for b in (1, 4, 8, 20, 32):
        _check(loaded, module, b)
    rep, ref = loaded.report(), compiled.report()
    assert rep["fallback"]["op_names"] == ["aten.special_bessel_j0"] and rep["kernel_cache"] == "artifact"
    assert rep["profiles"]["variants"]["small"]["static_kernels"] == ref["profiles"]["variants"]["small"]["static_kernels"]
    assert rep["profiles"]["variants"]["small"]["measured_us"] == ref["profiles"]["variants"]["small"]["measured_us"]
    # B = 20 ran the specialization saved with the model: nothing compiled here.
    assert rep["profiles"]["specialization_names"] == ["spec B in [17, 32]"] and loaded.compilations == 0


SPECIALIZE = '''
import numpy as np, torch
import kiln
directory = sys.argv[1]
model = kiln.load(directory)
x20 = torch.randn(20, 16)
model(x20)  # the specialization saved with the model
try:
    model(torch.randn(40, 16))  # a new bucket: static kernels to compile
    error = None
except kiln.KilnError as e:
    error = str(e)
generic = kiln.load(directory, policy="generic")
print(json.dumps({"hidden": HIDDEN, "compiler_modules": compiler_modules(), "error": error,
                  "compilations": model.compilations,
                  "same": bool(torch.equal(generic(x20), model(x20))),
                  "generic_40": list(generic(torch.randn(40, 16)).shape)}))
'''


def test_a_new_specialization_needs_the_compiler_and_says_so(spec_model, tmp_path):
    _, _, d = spec_model
    out = run_without_compiler(SPECIALIZE, d, cache_dir=tmp_path / "cache")
    assert out["hidden"] and out["compiler_modules"] == []
    assert "loaded without the kiln compiler" in out["error"] and "B=40" in out["error"]
    assert "policy='generic'" in out["error"]
    assert out["compilations"] == 0 and out["same"] and out["generic_40"] == [40, 32]


def test_a_new_specialization_compiles_where_the_compiler_is(spec_model):
    module, _, d = spec_model
    loaded = kiln.load(d)
    _check(loaded, module, 40)
    assert loaded.compilations == 1
    assert loaded.report()["profiles"]["specialization_names"] == ["spec B in [33, 64]"]


def test_a_loaded_model_saves_again_to_the_same_files(spec_model, tmp_path):
    module, _, d = spec_model
    again = tmp_path / "again.kiln"
    kiln.load(d).save(again)  # CompiledModel.save is kiln.save
    first, second = (json.loads((p / "kiln-artifact.json").read_text()) for p in (d, again))
    assert {"kernels/generic.so", "kernels/variant0.so", "kernels/variant1.so"} <= set(first["files"])
    assert second["files"] == first["files"]  # the weights, each library and the native library, byte for byte
    _check(kiln.load(again), module, 20)


def _copy(d, tmp_path):
    out = tmp_path / "copy.kiln"
    shutil.copytree(d, out)
    return out


@pytest.mark.parametrize("name, what", [("kernels/generic.so", "kernel library"),
                                        ("kernels/variant1.so", "kernel library"),
                                        ("weights.safetensors", "weights file")])
def test_a_tampered_or_truncated_file_is_refused(spec_model, tmp_path, name, what):
    _, _, d = spec_model
    bad = _copy(d, tmp_path)
    data = (bad / name).read_bytes()
    (bad / name).write_bytes(data[:-1])
    with pytest.raises(kiln.KilnError, match=f"the {what} '{name}' does not match its digest"):
        kiln.load(bad)


def test_the_native_library_is_checked_too(spec_model, tmp_path):
    _, _, d = spec_model
    manifest = json.loads((d / "kiln-artifact.json").read_text())
    if manifest["native"] is None:
        pytest.skip("the model was compiled without kiln's native library (KILN_NATIVE=0)")
    bad = _copy(d, tmp_path)
    path = bad / manifest["native"]
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(kiln.KilnError, match="native library .* does not match its digest"):
        kiln.load(bad)
    assert hashlib.sha256(data).hexdigest() != manifest["files"][manifest["native"]]["sha256"]


def test_a_cpu_without_a_required_feature_gets_a_clear_error(spec_model, tmp_path):
    _, _, d = spec_model
    bad = _copy(d, tmp_path)
    manifest = json.loads((bad / "kiln-artifact.json").read_text())
    manifest["cpu_features"] += ["avx512_kiln_test", "amx_kiln_test"]
    (bad / "kiln-artifact.json").write_text(json.dumps(manifest))
    with pytest.raises(kiln.KilnError, match="this CPU lacks features .*: amx_kiln_test, avx512_kiln_test"):
        kiln.load(bad)


def test_save_refuses_what_it_cannot_write(spec_model, tmp_path):
    _, compiled, _ = spec_model
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("not an artifact")
    with pytest.raises(kiln.KilnError, match="not empty and holds no kiln artifact"):
        kiln.save(compiled, tmp_path / "mine")
    assert (tmp_path / "mine" / "notes.txt").exists()
    with pytest.raises(kiln.KilnError, match="kiln.save takes a model"):
        kiln.save(object(), tmp_path / "other")
    with pytest.raises(kiln.KilnError, match="compile options go to kiln.compile"):
        kiln.compiler.save(compiled, tmp_path / "third", profiles=[])
