"""The command-line tools' contract with hostile input: exit 1 with one clean
``error:`` line for anything a user can get wrong (files that are not UTF-8,
pickled or object ``.npy`` inputs, bad ``--input`` specs, unreadable or
unwritable files, a factory that raises), 130 for an interrupt, and 70 only
for a real kiln bug."""

import pathlib
import pickle
import subprocess
import sys

import numpy as np
import pytest

from kiln.errors import KilnError, ParseError
from kiln.tools import _cli, kiln_import, kiln_opt, kiln_run

ROOT = pathlib.Path(__file__).resolve().parents[3]

MODEL = """
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
func.func @f(%x: !kiln.tensor<["B", 4], f32>) -> !kiln.tensor<["B", 4], f32> {
  %0 = "kiln.relu"(%x) : (!kiln.tensor<["B", 4], f32>) -> !kiln.tensor<["B", 4], f32>
  return %0 : !kiln.tensor<["B", 4], f32>
}
"""


def tool(name, args, stdin=None):
    """Run a console tool as a user does (a fresh process), bytes in, text out."""
    r = subprocess.run([sys.executable, "-m", f"kiln.tools.{name}", *args], input=stdin, capture_output=True,
                       cwd=ROOT)
    return r.returncode, r.stdout.decode("utf-8", "replace"), r.stderr.decode("utf-8", "replace")


def assert_clean(stderr):
    assert "Traceback" not in stderr
    assert "internal error" not in stderr


# ---------------------------------------------------------------- bytes that are not UTF-8


def test_kiln_opt_file_not_utf8_is_a_clean_error(tmp_path):
    bad = tmp_path / "bad.mlir"
    bad.write_bytes(b"func.func @f() {\n  return\n}\n// caf\xe9\n")
    rc, out, err = tool("kiln_opt", [str(bad)])
    assert rc == 1
    assert err == (f"kiln-opt: error: {bad}:4:7: input is not UTF-8 text (byte 0xe9); "
                   "kiln reads .mlir files as UTF-8\n")
    assert out == ""


def test_kiln_opt_stdin_not_utf8_is_a_clean_error():
    rc, _, err = tool("kiln_opt", ["--kiln-infer-shapes"], stdin=b"\xff\xfe\x00f\x00u\x00n\x00c")
    assert rc == 1
    assert err.startswith("kiln-opt: error: <stdin>:1:1: input is not UTF-8 text (byte 0xff)")
    assert_clean(err)


def test_read_text_keeps_utf8_and_drops_a_byte_order_mark(tmp_path):
    f = tmp_path / "m.mlir"
    f.write_bytes(b"\xef\xbb\xbf// \xc3\xa9t\xc3\xa9\n")
    assert _cli.read_text(str(f)) == ("// été\n", str(f))
    f.write_bytes(b"\xef\xbb\xbfab\ncd\xc3")  # a truncated sequence at the very end
    with pytest.raises(ParseError, match=r":2:3: input is not UTF-8 text \(byte 0xc3\)"):
        _cli.read_text(str(f))


def test_read_text_of_a_missing_file_names_it(tmp_path):
    with pytest.raises(KilnError, match=r"could not open input file '.*nope\.mlir': No such file or directory"):
        _cli.read_text(str(tmp_path / "nope.mlir"))


@pytest.mark.parametrize("name, args", [
    ("kiln_compile", ["--stop-after=import"]),
    ("kiln_run", []),
])
def test_compile_and_run_of_a_mlir_file_not_utf8(tmp_path, name, args):
    bad = tmp_path / "bad.mlir"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n")
    rc, _, err = tool(name, [str(bad), *args])
    prog = name.replace("_", "-")
    assert rc == 1
    assert err.startswith(f"{prog}: error: {bad}:1:1: input is not UTF-8 text (byte 0x89)")
    assert_clean(err)


def test_kiln_opt_unwritable_output_is_a_clean_error(tmp_path, capsys):
    src = tmp_path / "m.mlir"
    src.write_text(MODEL)
    out = tmp_path / "no" / "such" / "dir" / "out.mlir"
    with pytest.raises(KilnError, match=r"could not write output file '.*out\.mlir': No such file or directory"):
        kiln_opt.main([str(src), "-o", str(out)])


TRUNCATED_RESOURCE = (
    'func.func @f() {\n  return\n}\n{-#\n  dialect_resources: {\n    builtin: {\n      g32: "0x04000000'
)


@pytest.mark.parametrize("split", [False, True])
def test_kiln_opt_file_truncated_inside_a_resource_blob(tmp_path, split):
    # MLIR's parser reads past the end of a text that stops inside a resource
    # blob's string: kiln-opt died of SIGSEGV on such a truncated file (found
    # by fuzzing).  With --split-input-file a chunk ends so before a marker.
    text = TRUNCATED_RESOURCE + ("\n// -----\nfunc.func @g() {\n  return\n}\n" if split else "")
    bad = tmp_path / "truncated.mlir"
    bad.write_text(text)
    rc, _, err = tool("kiln_opt", [str(bad)] + (["--split-input-file"] if split else []))
    assert rc == 1, err
    assert "expected '\"' in string literal" in err
    assert_clean(err)


# ---------------------------------------------------------------- kiln-run --input


@pytest.fixture
def model_file(tmp_path):
    f = tmp_path / "m.mlir"
    f.write_text(MODEL)
    return f


def test_kiln_run_object_npy_exits_1_naming_the_file(tmp_path, model_file):
    obj = tmp_path / "obj.npy"
    np.save(obj, np.array([1, "a", None], dtype=object), allow_pickle=True)
    rc, _, err = tool("kiln_run", [str(model_file), "--input", f"0={obj}", "--repeat", "0"])
    assert rc == 1
    assert f"kiln-run: error: --input: '{obj}' is not a readable .npy array: Object arrays cannot be loaded" in err
    assert_clean(err)


class _Boom:
    """Unpickling this would run code: kiln must never do it."""

    def __reduce__(self):
        return (pathlib.Path("/nonexistent-kiln-pickle-ran").mkdir, ())


def _write_inputs(d: pathlib.Path) -> dict:
    files = {}
    with open(d / "pickle.npy", "wb") as f:
        pickle.dump(_Boom(), f)
    files["pickle"] = d / "pickle.npy"
    np.savez(d / "arch.npz", a=np.ones(3))
    (d / "arch.npz").rename(d / "arch.npy")
    files["npz"] = d / "arch.npy"
    np.save(d / "str.npy", np.array(["ab", "cd"]))
    files["str"] = d / "str.npy"
    np.save(d / "full.npy", np.ones((3, 4), np.float32))
    (d / "trunc.npy").write_bytes((d / "full.npy").read_bytes()[:100])
    files["trunc"] = d / "trunc.npy"
    (d / "empty.npy").write_bytes(b"")
    files["empty"] = d / "empty.npy"
    np.save(d / "rank3.npy", np.ones((3, 4, 1), np.float32))
    files["rank3"] = d / "rank3.npy"
    np.save(d / "f64.npy", np.ones((3, 4)))
    files["f64"] = d / "f64.npy"
    return files


@pytest.mark.parametrize("spec, message", [
    ("0={pickle}", r"--input: '.*pickle\.npy' is not a readable \.npy array: .*pickled"),
    ("0={npz}", r"--input: '.*arch\.npy' holds an archive of arrays \(\.npz\), not one array"),
    ("0={str}", r"--input: '.*str\.npy' holds an array of dtype <U2, not numbers"),
    ("0={trunc}", r"--input: '.*trunc\.npy' is not a readable \.npy array"),
    ("0={empty}", r"--input: '.*empty\.npy' is not a readable \.npy array"),
    ("0={dir}/missing.npy", r"--input: cannot read '.*missing\.npy': No such file or directory"),
    ("0={model}", r"--input: '.*m\.mlir' is not a \.npy file"),
    ("0=8xq", r"--input value must be a \.npy file or a shape like 7x33x16, got '8xq'"),
    ("0=", r"--input value must be a \.npy file or a shape like 7x33x16, got ''"),
    ("0=-1x4", r"--input value must be a \.npy file or a shape like 7x33x16, got '-1x4'"),
    ("0=100000000x100000000000", r"--input: cannot make random data of shape 100000000x100000000000"),
    ("3=2x4", r"the model has no input '3' \(inputs: arg0\)"),
    ("x=2x4", r"the model has no input 'x' \(inputs: arg0\)"),
    ("0", r"--input expects NAME=FILE\.npy\|SHAPE, got '0'"),
    ("0=2x4x5", r"input 'arg0' has rank 3 \[2, 4, 5\], but the model expects rank 2 \[B, 4\]"),
    ("0={rank3}", r"input 'arg0' has rank 3 \[3, 4, 1\], but the model expects rank 2 \[B, 4\]"),
    ("0={f64}", r"input 'arg0' has dtype f64, but the model expects f32"),
    ("0=100x4", r"input 'arg0' axis 0: B = 100 violates 1 <= B <= 64"),
])
def test_kiln_run_bad_inputs_are_clean_errors(tmp_path, model_file, spec, message):
    files = _write_inputs(tmp_path)
    spec = spec.format(dir=tmp_path, model=model_file, **files)
    with pytest.raises(KilnError, match=message):
        kiln_run.main([str(model_file), "--input", spec, "--repeat", "0"])
    assert not pathlib.Path("/nonexistent-kiln-pickle-ran").exists()


def test_kiln_run_negative_seed_is_a_usage_error(model_file, capsys):
    with pytest.raises(SystemExit) as e:
        kiln_run.main([str(model_file), "--seed", "-1"])
    assert e.value.code == 2
    assert "--seed must be a non-negative integer, got -1" in capsys.readouterr().err


# ---------------------------------------------------------------- factories


def test_kiln_import_factory_that_raises_is_a_user_error(tmp_path, monkeypatch, capsys):
    (tmp_path / "kiln_cli_bad_factory.py").write_text(
        "def make():\n    raise ValueError('no weights here')\n"
        "not_callable = 3\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert kiln_import.main(["kiln_cli_bad_factory:make"]) == 1
    assert capsys.readouterr().err == (
        "kiln-import: error: factory 'kiln_cli_bad_factory:make' raised ValueError: no weights here\n")
    assert kiln_import.main(["kiln_cli_bad_factory:not_callable"]) == 1
    assert "'kiln_cli_bad_factory' has no factory 'not_callable'" in capsys.readouterr().err


def test_kiln_import_factory_module_with_a_syntax_error(tmp_path, monkeypatch, capsys):
    (tmp_path / "kiln_cli_broken_module.py").write_text("def make(:\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert kiln_import.main(["kiln_cli_broken_module:make"]) == 1
    assert "kiln-import: error: cannot import 'kiln_cli_broken_module': SyntaxError" in capsys.readouterr().err


# ---------------------------------------------------------------- exit status conventions


def _exit_of(main):
    with pytest.raises(SystemExit) as e:
        _cli.run_tool("kiln-x", main)
    return e.value.code


def _raiser(exc):
    def main():
        raise exc
    return main


def test_kiln_error_exits_1(capsys):
    assert _exit_of(_raiser(KilnError("symbol 'B' is undeclared"))) == 1
    assert capsys.readouterr().err == "kiln-x: error: symbol 'B' is undeclared\n"


def test_os_error_on_a_user_file_exits_1_naming_it(capsys):
    err = PermissionError(13, "Permission denied", "/root/secret.mlir")
    assert _exit_of(_raiser(err)) == 1
    assert capsys.readouterr().err == "kiln-x: error: '/root/secret.mlir': Permission denied\n"


def test_keyboard_interrupt_exits_130(capsys):
    assert _exit_of(_raiser(KeyboardInterrupt())) == 130
    assert capsys.readouterr().err == ""


def test_broken_pipe_exits_1_quietly(capsys, monkeypatch):
    monkeypatch.setattr(_cli, "_quiet_broken_pipe", lambda: None)  # keep pytest's stdout
    assert _exit_of(_raiser(BrokenPipeError(32, "Broken pipe"))) == 1
    assert capsys.readouterr().err == ""


def test_only_a_bug_exits_70(capsys, monkeypatch):
    monkeypatch.delenv("KILN_DEBUG", raising=False)
    assert _exit_of(_raiser(TypeError("unsupported operand"))) == 70
    err = capsys.readouterr().err
    assert err.startswith("kiln-x: internal error: TypeError: unsupported operand\n")
    assert "this is a bug in kiln" in err


def test_status_from_main_is_kept():
    assert _exit_of(lambda: 0) == 0
    assert _exit_of(lambda: 1) == 1
