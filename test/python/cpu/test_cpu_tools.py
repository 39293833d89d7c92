"""kiln-compile and kiln-run on a small kiln model: artifact, --stop-after stages, errors."""

import subprocess
import sys

import numpy as np
import pytest

import kiln
from kiln.backends.cpu import library
from kiln.tools import kiln_compile, kiln_run

MODEL = """
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
func.func @main(%x: !kiln.tensor<["B", 4], f32>, %w: !kiln.tensor<[4, 3], f32>) -> !kiln.tensor<["B", 3], f32> {
  %0 = "kiln.matmul"(%x, %w) : (!kiln.tensor<["B", 4], f32>, !kiln.tensor<[4, 3], f32>) -> !kiln.tensor<["B", 3], f32>
  %1 = "kiln.relu"(%0) : (!kiln.tensor<["B", 3], f32>) -> !kiln.tensor<["B", 3], f32>
  return %1 : !kiln.tensor<["B", 3], f32>
}
"""


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("cpu_tools")
    src = d / "model.mlir"
    src.write_text(MODEL)
    g = np.random.default_rng(0)
    np.save(d / "x.npy", g.standard_normal((7, 4)).astype(np.float32))
    np.save(d / "w.npy", g.standard_normal((4, 3)).astype(np.float32))
    art = d / "art"
    assert kiln_compile.main([str(src), "-o", str(art)]) == 0
    return d, src, art


@pytest.mark.parametrize("stage,expect,absent", [
    ("import", '"kiln.matmul"', "linalg."),
    ("kiln-default-cpu", 'kind = "matmul_epilogue"', "linalg."),  # the graph passes kiln.compile runs
    ("convert-kiln-to-linalg", 'library_call = "native.gemm"', "kiln.matmul"),  # the library GEMM's placeholder
    ("kiln-cpu-prepare", "bufferization.materialize_in_destination", "kiln.symbol"),
    # the product and the ReLU both write the output argument (epilogues_in_place): no temporary
    ("kiln-cpu-bufferize", "outs(%arg2 : memref<?x3xf32>)", "memref.alloc"),
    ("kiln-cpu-to-llvm", "llvm.func @main", "memref.alloc"),
])
def test_stop_after_prints_each_stage(files, tmp_path, stage, expect, absent):
    _, src, _ = files
    out = tmp_path / "ir.mlir"
    assert kiln_compile.main([str(src), f"--stop-after={stage}", "-o", str(out)]) == 0
    text = out.read_text()
    assert expect in text
    assert absent not in text


def test_stop_after_lists_the_graph_stage_and_can_skip_it(files, tmp_path, capsys):
    _, src, _ = files
    assert kiln_compile.main(["--list-stages"]) == 0
    assert capsys.readouterr().out.split()[:3] == ["import", "kiln-default-cpu", "kiln-infer-shapes"]
    out = tmp_path / "ir.mlir"
    assert kiln_compile.main([str(src), "--stop-after=kiln-infer-shapes", "--no-optimize", "-o", str(out)]) == 0
    assert "kiln.fused" not in out.read_text() and '"kiln.relu"' in out.read_text()
    with pytest.raises(kiln.KilnError, match="that stage is the graph passes"):
        kiln_compile.main([str(src), "--stop-after=kiln-default-cpu", "--no-optimize"])


def test_stop_after_on_a_torch_max_pool_lowers(tmp_path, monkeypatch):
    """A torch max-pool imports as kiln.max_pool2d (it was a fallback whose
    unused indices made the lowering stages fail)."""
    (tmp_path / "pool_factory.py").write_text(
        "import torch\n"
        "from torch.export import Dim\n"
        "class P(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        return torch.nn.functional.max_pool2d(x, 3, 2, 1)\n"
        "def factory():\n"
        "    return P(), (torch.randn(2, 4, 9, 9),), ({0: Dim('B', min=1, max=8)},)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "ir.mlir"
    assert kiln_compile.main(["pool_factory:factory", "--stop-after=convert-kiln-to-linalg", "-o", str(out)]) == 0
    text = out.read_text()
    assert "kiln.fallback" not in text
    # kiln-select-kernels ran as in kiln.compile: the native max pool's call where the runtime has it.
    if library.enabled() and library.native_enabled():
        assert 'library_call = "native.max_pool2d"' in text and "arith.maximumf" not in text
    else:
        assert "arith.maximumf" in text
    out = tmp_path / "calls.mlir"
    assert kiln_compile.main(["pool_factory:factory", "--stop-after=kiln-cpu-library-calls", "-o", str(out)]) == 0
    assert ("call @kiln_maxpool2d(" in out.read_text()) == (library.enabled() and library.native_enabled())


def test_artifact_runs_with_files_and_shapes(files, capsys):
    d, _, art = files
    # The self-contained artifact (issue 41): manifest, weights, object code; no IR to compile again.
    assert (art / "kiln-artifact.json").exists() and (art / "weights.safetensors").exists()
    assert (art / "kernels" / "generic.so").exists() and not (art / "model.kiln.mlir").exists()
    save = d / "outs"
    assert kiln_run.main([str(art), "--input", f"arg0={d / 'x.npy'}", "--input", f"1={d / 'w.npy'}",
                          "--repeat", "2", "--save", str(save)]) == 0
    printed = capsys.readouterr().out
    assert "output0: shape [7, 3] f32" in printed and "run: median" in printed
    x, w = np.load(d / "x.npy"), np.load(d / "w.npy")
    np.testing.assert_allclose(np.load(save / "output0.npy"), np.maximum(x @ w, 0), rtol=1e-5, atol=1e-6)
    assert kiln_run.main([str(art), "--input", "arg0=64x4", "--input", "arg1=4x3", "--repeat", "0"]) == 0
    assert "output0: shape [64, 3]" in capsys.readouterr().out


def test_load_gives_the_same_model(files):
    _, _, art = files
    model = kiln.compiler.load(str(art))
    x = np.ones((2, 4), np.float32)
    w = np.full((4, 3), 0.5, np.float32)
    np.testing.assert_allclose(model(x, w), np.full((2, 3), 2.0, np.float32))


HIDE_TORCH_MLIR = """
import sys
class _Hide:
    def find_spec(self, name, path=None, target=None):
        if name == "torch_mlir" or name.startswith("torch_mlir."):
            raise ImportError(name + " is hidden by the test")
sys.meta_path.insert(0, _Hide())
from kiln.tools.kiln_run import entry
sys.argv[0] = "kiln-run"
entry()
"""


def test_kiln_run_runs_an_artifact_without_the_compiler(files):
    d, _, art = files
    r = subprocess.run([sys.executable, "-c", HIDE_TORCH_MLIR, str(art), "--input", f"arg0={d / 'x.npy'}",
                        "--input", f"arg1={d / 'w.npy'}", "--repeat", "1"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "output0: shape [7, 3] f32" in r.stdout
    r = subprocess.run([sys.executable, "-c", HIDE_TORCH_MLIR, "model.mlir"], capture_output=True, text=True,
                       timeout=300, cwd=d)
    assert r.returncode != 0 and "torch_mlir is hidden" in r.stderr  # compiling a source does need it


def test_errors_are_one_line(files, tmp_path):
    _, src, art = files
    with pytest.raises(kiln.KilnError, match="no stage 'nope'"):
        kiln_compile.main([str(src), "--stop-after=nope"])
    with pytest.raises(kiln.KilnError, match="no input 'y'"):
        kiln_run.main([str(art), "--input", "y=3x4"])
    r = subprocess.run([sys.executable, "-m", "kiln.tools.kiln_run", str(art), "--input", "arg0=65x4",
                        "--input", "arg1=4x3"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    assert r.stderr.strip() == "kiln-run: error: input 'arg0' axis 0: B = 65 violates 1 <= B <= 64"
