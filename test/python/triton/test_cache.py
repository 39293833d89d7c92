"""The persistent kernel cache: entries, corruption, keys, reuse in a new process, the CLI."""

import json
import os
import subprocess
import sys
import textwrap

import pytest
from helpers import compile_text, symbols, t

from kiln.backends.cache import KernelCache, make_key
from kiln.backends.triton.spec import KernelSpec
from kiln.tools.kiln_main import main


def mlp(act: str = "relu") -> str:
    x, w, y = "B,32:f32", "32,24:f32", "B,24:f32"
    return symbols(B=(1, 64, 8)) + f"""
func.func @f(%x: {t(x)}, %w: {t(w)}) -> {t(y)} {{
  %m = "kiln.matmul"(%x, %w) : ({t(x)}, {t(w)}) -> {t(y)}
  %a = "kiln.{act}"(%m) : ({t(y)}) -> {t(y)}
  return %a : {t(y)}
}}"""


def test_put_get_and_corruption(tmp_path):
    kc = KernelCache(tmp_path)
    key = make_key("kernel", "abc", {"B": 8}, "interpreter")
    kc.put("kernel", key, b"payload", {"why": "test"})
    assert kc.get("kernel", key) == (b"payload", {"why": "test"})
    path = kc.path("kernel", key)
    data = path.read_bytes()
    path.write_bytes(data[:-3])  # truncated
    assert kc.get("kernel", key) is None and not path.exists()
    kc.put("kernel", key, b"payload")
    path.write_bytes(data[:-1] + b"X")  # one byte flipped
    assert kc.get("kernel", key) is None and kc.stats.corrupt == 2
    assert not list(path.parent.glob(".tmp-*"))  # no temporary file left behind


def test_key_changes_with_ir_bucket_target_versions():
    def spec_of(text):
        return compile_text(text).program.steps[0].spec

    relu, gelu = spec_of(mlp("relu")), spec_of(mlp("gelu"))
    assert isinstance(relu, KernelSpec) and relu.digest() != gelu.digest()
    assert relu.digest() == spec_of(mlp("relu")).digest()
    base = make_key("choice", relu.digest(), {"B": 8}, "interpreter")
    assert base != make_key("choice", gelu.digest(), {"B": 8}, "interpreter")
    assert base != make_key("choice", relu.digest(), {"B": 16}, "interpreter")
    assert base != make_key("choice", relu.digest(), {"B": 8}, "cuda:90")
    import kiln.backends.cache as cache_mod

    saved = cache_mod._VERSIONS
    try:
        cache_mod._VERSIONS = dict(cache_mod.versions(), triton="0.0")
        assert base != make_key("choice", relu.digest(), {"B": 8}, "interpreter")
    finally:
        cache_mod._VERSIONS = saved


def test_corrupted_source_and_choice_are_rebuilt(tmp_path):
    import torch

    kc = KernelCache(tmp_path)
    prog = compile_text(mlp(), cache=kc)
    x, w = torch.randn(3, 32), torch.randn(32, 24)
    want = prog(x, w)
    for f in (tmp_path / "choice").rglob("*.entry"):
        f.write_bytes(f.read_bytes()[:20])
    for f in (tmp_path / "src").glob("*.py"):
        f.write_text("garbage = (")
    from kiln.backends.triton import kernel as kernel_mod

    kernel_mod._MODULES.clear()  # a new process would import from disk again
    again = compile_text(mlp(), cache=kc)
    assert again.cache_stats["corrupt"] >= 1
    torch.testing.assert_close(again(x, w), want)
    assert all("garbage" not in f.read_text() for f in (tmp_path / "src").glob("*.py"))


SCRIPT = textwrap.dedent("""
    import json, sys, time
    sys.path.insert(0, {helpers!r})
    from helpers import compile_text
    from test_cache import mlp
    prog = compile_text(mlp(), autotune=True, max_configs=2)
    print(json.dumps({{"stats": prog.cache_stats, "how": [c.how for c in prog.choices],
                      "seconds": prog.compile_seconds}}))
""")


def test_second_compile_in_new_process_hits(tmp_path):
    env = dict(os.environ, KILN_CACHE_DIR=str(tmp_path), TRITON_INTERPRET="1")
    here = os.path.dirname(__file__)
    code = SCRIPT.format(helpers=here)
    runs = []
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", code], env=env, cwd=here, capture_output=True, text=True,
                             timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    cold, warm = runs
    assert cold["how"] == ["autotune"] and cold["stats"]["misses"] >= 1
    assert warm["how"] == ["cache"] and warm["stats"]["misses"] == 0 and warm["stats"]["hits"] >= 2


def test_cli_info_and_clear(tmp_path, capsys):
    kc = KernelCache(tmp_path)
    kc.put_json("choice", make_key("choice", "x", {}, "t"), {"a": 1})
    assert main(["cache", "info", "--dir", str(tmp_path), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["kinds"]["choice"]["entries"] == 1
    assert main(["cache", "clear", "--dir", str(tmp_path)]) == 0
    assert "removed 1 file" in capsys.readouterr().out
    assert KernelCache(tmp_path).info()["entries"] == 0
    with pytest.raises(SystemExit):
        main(["cache", "bogus"])
