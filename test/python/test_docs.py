"""The docs of issue 41: the API reference (pdoc) builds without warnings and
with a docstring on every public name, importing the documented modules has
no side effects, docs/ops.md is what the pattern tables give, reports print
through ``kiln.format_report``, and the wheel carries no internal notes."""

import json
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

import kiln
from kiln.tools import op_table
from kiln.tools.docs import documented_modules, missing_docstrings

ROOT = Path(kiln.__file__).resolve().parent


# ----------------------------------------------------------------------------
# API reference
# ----------------------------------------------------------------------------

_BUILD = textwrap.dedent("""
    import json, os, subprocess, sys
    spawned = []
    _init = subprocess.Popen.__init__
    def _record(self, args, *a, **k):
        spawned.append(str(args))
        return _init(self, args, *a, **k)
    subprocess.Popen.__init__ = _record
    import importlib
    from kiln.tools import docs
    for name in docs.documented_modules():  # what pdoc imports, with nothing else running
        importlib.import_module(name)
    native = sys.modules.get("kiln.runtime.native")
    seen = {"spawned": spawned[:], "native_loaded": bool(native is not None and native._handle is not None),
            "native_dir": os.path.exists(os.environ["KILN_NATIVE_DIR"])}
    seen["rc"] = docs.main(["-o", sys.argv[1]])  # (pdoc may run node for its search index)
    print("RESULT " + json.dumps(seen))
""")


def test_api_reference_builds_without_side_effects(tmp_path):
    """``python -m kiln.tools.docs`` (what scripts/docs.sh runs) writes the
    pages, reports no problem, and pdoc's imports start no process (no native
    build, no compiler) and load no native library."""
    out = tmp_path / "docs"
    env = {**os.environ, "KILN_NATIVE_DIR": str(tmp_path / "native"), "KILN_NATIVE_BUILD": "1"}
    p = subprocess.run([sys.executable, "-c", _BUILD, str(out)], capture_output=True, text=True, env=env,
                       timeout=300, cwd=tmp_path)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    assert p.returncode == 0 and lines, p.stdout + p.stderr
    result = json.loads(lines[-1].removeprefix("RESULT "))
    assert result["rc"] == 0, p.stderr
    assert result["spawned"] == [] and not result["native_loaded"] and not result["native_dir"]
    for page in ("index.html", "kiln.html", "kiln/errors.html", "kiln/compiler.html", "kiln/runtime/model.html",
                 "kiln/runtime/report.html", "kiln/pipelines/pipeline.html", "kiln/backends/registry.html",
                 "kiln/frontends/torch_import.html", "kiln/frontends/onnx_import.html"):
        assert (out / page).is_file(), page
    top = (out / "kiln.html").read_text()
    for name in ("compile", "CompiledModel", "format_report", "import_torch", "import_onnx", "register_kernel",
                 "Pipeline", "KilnError", "ShapeError"):
        assert f'id="{name}"' in top, name
    # Internals are not documented: no page for the passes, the conversions, the CPU backend.
    assert not (out / "kiln" / "transforms").exists() and not (out / "kiln" / "conversions").exists()
    assert not (out / "kiln" / "backends" / "cpu").exists()


def test_documented_modules_follow_the_public_api():
    mods = documented_modules()
    assert mods == sorted(mods) and {"kiln", "kiln.errors", "kiln.compiler", "kiln.runtime.model",
                                     "kiln.runtime.report"} <= set(mods)
    for name in kiln.__all__:
        module = getattr(getattr(kiln, name), "__module__", None)
        if isinstance(module, str) and module.startswith("kiln."):
            assert module in mods, name


def test_public_api_has_docstrings():
    assert missing_docstrings(documented_modules()) == []


def test_missing_docstrings_are_found(tmp_path, monkeypatch):
    (tmp_path / "kiln_doc_probe.py").write_text(textwrap.dedent('''
        """A module."""
        __all__ = ["Documented", "bare", "Undocumented"]

        class Documented:
            """Has one."""
            def method(self):
                pass
            def _private(self):
                pass
            @property
            def size(self):
                return 1

        def bare():
            pass

        class Undocumented:
            pass

        def not_exported():
            pass
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    assert missing_docstrings(["kiln_doc_probe"]) == [
        "kiln_doc_probe.Documented.method", "kiln_doc_probe.Documented.size", "kiln_doc_probe.Undocumented",
        "kiln_doc_probe.bare"]


def test_pdoc_warnings_are_problems(tmp_path, monkeypatch):
    """A warning from pdoc (here: an annotation it cannot resolve) fails the build."""
    (tmp_path / "kiln_doc_bad.py").write_text(textwrap.dedent('''
        """A module."""
        from __future__ import annotations
        __all__ = ["f"]

        def f(x: NoSuchType) -> None:
            """Documented."""
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    from kiln.tools.docs import build

    problems = build(tmp_path / "out", ["kiln_doc_bad"])
    assert len(problems) == 1 and problems[0].startswith("pdoc: Error parsing type annotation NoSuchType")
    assert (tmp_path / "out" / "kiln_doc_bad.html").is_file()


# ----------------------------------------------------------------------------
# The supported-op table
# ----------------------------------------------------------------------------


def test_op_table_is_current():
    """docs/ops.md is what the pattern tables give now: run
    `python -m kiln.tools.op_table` and commit it when this fails."""
    assert (ROOT / "docs" / "ops.md").read_text() == op_table.generate()


def test_op_table_rows():
    text = op_table.generate()
    rows = {line.split("|")[1].strip(): line for line in text.splitlines() if line.startswith("| `")}
    assert "`kiln.transpose`" in rows["`aten.linear`"] and "`kiln.matmul`" in rows["`aten.linear`"]
    # cx.name decides which branch a pattern registered for several ops takes.
    assert "`kiln.reduce_max`" in rows["`GlobalMaxPool`"] and "reduce_mean" not in rows["`GlobalMaxPool`"]
    assert "no kiln op" in rows["`Identity`"]
    # A helper called with a bound kind: ReduceL1 is abs + reduce_sum.
    assert rows["`ReduceL1`"].split("|")[2].strip() == "`kiln.reduce_sum`, `kiln.abs`"
    assert "transposed convolution" in rows["`aten.convolution`"].split("Falls back: ")[1]
    assert "transposed" not in rows["`aten.conv2d`"]  # that Decline sits under cx.name.endswith("convolution")
    assert rows["`Shape`"].split("|")[2].strip() == "folded at import time"
    # A Known built to be handed on (a symbolic size turned into a tensor) is not a fold.
    assert "folded" not in rows["`aten.add.Tensor`"] and "folded" not in rows["`GatherND`"]
    # The kiln op tables, one per family: every kiln op with its implementations side by side.
    assert "### nn" in text and "### reductions" in text
    assert ("| `kiln.matmul` | reference | lowered | `native.gemm`, `native.matmul_lowp` | `matmul` | — | — |"
            in text)
    assert "| `kiln.relu` | reference | lowered | `native.gemm` (epilogue), `native.conv2d` (epilogue) |" in text
    assert "| `kiln.fallback` | — | — | — | — | torch kernel | — |" in text


def test_op_table_reads_closures_helpers_and_declines():
    from kiln.conversions.torch_to_kiln.driver import Decline

    def factory(kind, scaled=False):
        def lower(cx):
            if cx.name == "onnx.Skip":
                raise Decline("skipped")
            y = cx.build(kind, cx.tensor(0))
            y = cx.build("mul", y, cx.like(2.0, y)) if scaled else y
            if cx.has(1):
                raise Decline(f"operand {cx.int(1)} given")
            return cx.cast(y, "f32")
        return lower

    info = op_table.analyze_pattern(factory("exp"), "onnx.Exp")
    assert info.ops == ["kiln.exp"] and info.aux == ["kiln.cast"]
    assert info.declines == ["operand … given"]
    info = op_table.analyze_pattern(factory("exp", scaled=True), "onnx.Skip")
    assert info.ops == [] and info.declines == ["skipped"]
    info = op_table.analyze_pattern(factory("exp", scaled=True), "onnx.Exp")
    assert info.ops == ["kiln.exp", "kiln.mul"] and set(info.aux) == {"kiln.constant", "kiln.cast"}

    def opaque(cx):
        return cx.build(cx.attr("op"), cx.tensor(0))

    with pytest.raises(ValueError, match=r"cannot tell which kiln op .*opaque builds: cx.build\(cx.attr\('op'\)"):
        op_table.analyze_pattern(opaque)


def test_op_table_check_flag(tmp_path, capsys):
    stale = tmp_path / "ops.md"
    stale.write_text("# old\n")
    assert op_table.main(["-o", str(stale), "--check"]) == 1
    assert "is stale" in capsys.readouterr().err
    assert op_table.main(["-o", str(stale)]) == 0
    assert op_table.main(["-o", str(stale), "--check"]) == 0


def test_readme_links_the_op_table_and_the_reference():
    readme = (ROOT / "README.md").read_text()
    assert "(docs/ops.md)" in readme and "scripts/docs.sh" in readme


# ----------------------------------------------------------------------------
# format_report
# ----------------------------------------------------------------------------

T = '!kiln.tensor<["B", 16], f32>'
TEXT = f'''
"kiln.symbol"() {{sym_name = "B", min = 1 : i64, max = 32 : i64, opt = 4 : i64}} : () -> ()
func.func @main(%x: {T} {{kiln.name = "x"}}) -> {T} {{
  %0 = "kiln.add"(%x, %x) : ({T}, {T}) -> {T}
  %1 = "kiln.relu"(%0) : ({T}) -> {T}
  return %1 : {T}
}}
'''


def test_print_compiled_report_is_formatted(capsys):
    import numpy as np

    compiled = kiln.compile(TEXT)
    compiled(np.ones((3, 16), np.float32))
    report = compiled.report()
    assert isinstance(report, dict) and report["calls"] == 1 and report["kernels"]
    text = kiln.format_report(report)
    assert text.startswith("kernels in schedule: ") and "schedule:" in text
    print(report)
    assert capsys.readouterr().out == text + "\n"
    assert f"{report}" == text
    # Still plain data: JSON, equality with a dict, a dict's repr.
    assert json.loads(json.dumps(report)) == json.loads(json.dumps(dict(report)))
    assert report == dict(report) and repr(report) == repr(dict(report))


def test_format_report_of_an_import_report_and_of_nothing():
    from kiln.frontends import ImportReport

    r = ImportReport(source="m", ops={"aten.mm": {"converted": 2, "decomposed": 0, "fallback": 0}})
    assert kiln.format_report(r) == r.format() and "aten.mm" in kiln.format_report(r)
    from kiln.runtime.report import Report

    assert "no report" in str(Report()) and "no report" in kiln.format_report({})
    assert str(Report(calls=3)) == "{'calls': 3}"  # not a whole report: printed as the dict, never an error
    with pytest.raises(TypeError, match="format_report takes"):
        kiln.format_report(42)


# ----------------------------------------------------------------------------
# What the wheel carries
# ----------------------------------------------------------------------------

_NOT_SHIPPED = (".venv", "build", ".git", "__pycache__", "*.egg-info", "Output", ".pytest_cache", ".ruff_cache",
                ".lit_test_times.txt")


def test_wheel_has_no_internal_notes(tmp_path):
    """Build the wheel (about 5 s) from a copy of the checkout and list it: the
    team's notes, the changelog, tests and scripts stay out; the native C
    sources and the examples' inputs go in."""
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(*_NOT_SHIPPED))
    assert (src / "docs" / "NOTES.md").exists()  # it is in the checkout, so the check below means something
    p = subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation",
                        "-q", "-w", str(tmp_path / "wheel")], capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stdout + p.stderr
    (wheel,) = (tmp_path / "wheel").glob("kiln-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    leaked = [n for n in names if n.startswith(("kiln/docs/", "kiln/test/", "kiln/scripts/", "kiln/.ci/"))
              or n.rsplit("/", 1)[-1] in ("NOTES.md", "HELPERS.md", "CHANGELOG.md", "RESULTS.md", "CMakeLists.txt")
              or n.endswith(".md")]
    assert leaked == []
    for needed in ("kiln/__init__.py", "kiln/runtime/native/kiln_native.c", "kiln/runtime/native/kiln_native.h",
                   "kiln/examples/mlp.mlir", "kiln/examples/quickstart.py", "kiln/tools/docs.py"):
        assert needed in names, needed
